// Who holds a delivery's lease (a claim, or a first attempt handed straight to the intake's own
// scheduler): the dispatcher's replica name, cleared when the lease ends. A dispatcher restarted
// under the same name (the one process of a PGlite data dir, a pod's container after a crash)
// takes back at once what its predecessor had claimed, instead of waiting out the 60 s lease.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw('alter table deliveries add column lease_owner text');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table deliveries drop column if exists lease_owner');
}
