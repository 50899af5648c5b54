// Which ENCRYPTION_KEY the database was written with, as a fingerprint that reveals nothing of the
// key (services/core/src/encryption-key-check.ts): a process started with another key refuses to
// start instead of failing every token, secret and session it cannot decrypt.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw('create table encryption_key_check (id smallint primary key check (id = 1), fingerprint text not null, recorded_at timestamptz not null default now())');
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('encryption_key_check');
}
