// Cluster mode: migration 015's mark, named for what it now asks. The operator sets it before it
// stops a session pod for a delete or for a reset, so the session process that gets the pod's
// SIGTERM unlinks the device from the phone instead of only disconnecting (a kubectl delete or
// reset reaches no gateway, and the gateway's reset races the operator's stop). A reset clears it.
// 015's column stays, and a delete still sets it: session processes of the previous version read
// it during a rolling upgrade (migrations keep what the previous version reads).
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw('alter table instances add column unlink_requested_at timestamptz');
  await knex.raw('update instances set unlink_requested_at = deletion_requested_at where deletion_requested_at is not null');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table instances drop column if exists unlink_requested_at');
}
