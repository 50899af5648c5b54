// The sandbox network's ledger (a row per accepted send, with the echo and receipts it still owes)
// goes with its instance: rows of deleted instances stayed for good, with the recipient's number
// and the echoed message. Rows already orphaned are removed first.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  // NOT VALID holds every new row to it at once; the orphans are removed, then it is validated. A
  // send recorded for an instance deleted meanwhile cannot slip in between and fail the migration.
  await knex.raw(`set local lock_timeout = '5s'`);
  await knex.raw('alter table sandbox_ledger add constraint sandbox_ledger_instance_fk foreign key (instance_id) references instances (id) on delete cascade not valid');
  await knex.raw('delete from sandbox_ledger l where not exists (select 1 from instances i where i.id = l.instance_id)');
  await knex.raw('alter table sandbox_ledger validate constraint sandbox_ledger_instance_fk');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table sandbox_ledger drop constraint if exists sandbox_ledger_instance_fk');
}
