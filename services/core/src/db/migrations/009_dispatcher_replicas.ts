// Live dispatcher replicas and when each last said so (services/dispatcher/src/replica-liveness.ts).
// A replica that stops saying so for a while is gone (a crash, a lost node): another replica
// hands back the leases it held (migration 008) instead of leaving them to run out.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw('create table dispatcher_replicas (name text primary key, seen_at timestamptz not null)');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop table if exists dispatcher_replicas');
}
