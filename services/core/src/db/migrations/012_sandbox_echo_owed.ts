// The sandbox network owes the echo of an API send as it owes its receipts (migration 005): the
// echo (the send, recorded as the account's own message) waits in its ledger row until the
// session has taken it, and is delivered when the account connects again if the session stopped
// first. Without its bytes: a medium the session never took is announced as no longer available.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw('alter table sandbox_ledger add column echo_owed jsonb');
  await knex.raw('drop index if exists sandbox_ledger_receipts_owed');
  await knex.raw(`create index sandbox_ledger_owed on sandbox_ledger (instance_id, seq) where receipts_owed <> '{}' or echo_owed is not null`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop index if exists sandbox_ledger_owed');
  await knex.raw(`create index sandbox_ledger_receipts_owed on sandbox_ledger (instance_id, seq) where receipts_owed <> '{}'`);
  await knex.raw('alter table sandbox_ledger drop column if exists echo_owed');
}
