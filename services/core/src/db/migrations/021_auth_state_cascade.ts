// A session's credentials and keys go with their instance, whoever writes them last. A delete
// clears them and then deletes the row, but a session that another gateway replica had just
// started again could write its credentials after the clear (a two-replica stress test left the
// sealed credentials of deleted instances behind). With the foreign key such a late write fails
// instead, and the delete takes whatever is there. Rows already orphaned are removed first.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`set local lock_timeout = '5s'`);
  await knex.raw('alter table auth_state add constraint auth_state_instance_fk foreign key (instance_id) references instances (id) on delete cascade not valid');
  await knex.raw('delete from auth_state a where not exists (select 1 from instances i where i.id = a.instance_id)');
  await knex.raw('alter table auth_state validate constraint auth_state_instance_fk');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table auth_state drop constraint if exists auth_state_instance_fk');
}
