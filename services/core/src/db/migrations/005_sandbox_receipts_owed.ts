// The sandbox network owes receipts the way the real one does: a receipt not yet handed to the
// session (the session process stopped or was killed in between) is delivered when the account
// connects again, instead of being lost with the process that had it scheduled. Each ledger row
// keeps the receipts still owed for its message, in the order they are due; a partial index holds
// only the rows that still owe some, so a reconnect does not read the instance's whole history.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`alter table sandbox_ledger add column receipts_owed text[] not null default '{}'`);
  await knex.raw(`create index sandbox_ledger_receipts_owed on sandbox_ledger (instance_id, seq) where receipts_owed <> '{}'`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop index if exists sandbox_ledger_receipts_owed');
  await knex.raw('alter table sandbox_ledger drop column if exists receipts_owed');
}
