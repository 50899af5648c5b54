// Cluster mode: migration 015's mark, named for what it asks. The operator sets it before it stops
// a session pod for a delete or for a reset, so the session process that gets the pod's SIGTERM
// unlinks the device from the phone instead of only disconnecting (a kubectl delete or reset
// reaches no gateway, and the gateway's reset races the operator's stop). A reset clears it.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw('alter table instances rename column deletion_requested_at to unlink_requested_at');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table instances rename column unlink_requested_at to deletion_requested_at');
}
