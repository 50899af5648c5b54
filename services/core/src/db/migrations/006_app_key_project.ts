// An integration key's project, like an instance's, is a reference the database keeps: deleting
// the project clears it, and a key cannot be created in a project that a concurrent delete just
// removed (the check and the insert were two statements). Keys that already name a missing
// project (earlier versions did not check) lose that label first.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw('update app_keys set project_id = null where project_id is not null and not exists (select 1 from projects where projects.id = app_keys.project_id)');
  await knex.raw('alter table app_keys add constraint app_keys_project_id_foreign foreign key (project_id) references projects (id) on delete set null');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('alter table app_keys drop constraint if exists app_keys_project_id_foreign');
}
