// Who holds a delivery's lease (a claim, or a first attempt handed straight to the intake's own
// scheduler), and the lease it was given. A dispatcher restarted under the same name (the one
// process of a PGlite data dir, a pod's container after a crash) takes back at once what its
// predecessor had claimed, instead of waiting out the 60 s lease. The lease is held only while
// `next_attempt_at = lease_until`: any later write of the row (a result, a hand-back, a retry
// scheduled by a dispatcher that knows nothing of these columns) ends it without clearing them.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  // Adding nullable columns rewrites nothing, but needs a moment's exclusive lock: fail (and let
  // the start retry) rather than queue every delivery statement behind a long reader.
  await knex.raw(`set local lock_timeout = '5s'`);
  await knex.raw('alter table deliveries add column lease_owner text, add column lease_until timestamptz');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table deliveries drop column if exists lease_owner, drop column if exists lease_until');
}
