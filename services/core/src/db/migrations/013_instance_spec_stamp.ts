// Cluster mode: which version of its Instance resource's spec an instance's record follows
// (services/core/src/instance-spec-stamp.ts). The resource's uid tells a re-created resource,
// whose generation starts again at 1, from an older read of the same one.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw('alter table instances add column spec_uid text, add column spec_generation bigint');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table instances drop column if exists spec_uid, drop column if exists spec_generation');
}
