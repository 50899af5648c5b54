// Cluster mode: set by the operator's finalizer before it stops the session pod of a deleted
// Instance, so the session process that gets the pod's SIGTERM unlinks the device from the phone
// instead of only disconnecting (a kubectl delete reaches no gateway).
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw('alter table instances add column deletion_requested_at timestamptz');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table instances drop column if exists deletion_requested_at');
}
