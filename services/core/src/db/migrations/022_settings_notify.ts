// Tells the session of an instance that its settings changed (core/settings-channel.ts), so it
// reads them at once rather than polling every session's row every 2 s: a thousand connected
// sessions asked 500 times a second for rows that almost never change.
import type { Knex } from 'knex';
import { SETTINGS_CHANNEL_PREFIX } from '../../settings-channel.ts';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create or replace function switchboard_settings_changed() returns trigger language plpgsql as $$
    begin
      perform pg_notify('${SETTINGS_CHANNEL_PREFIX}' || new.id, '');
      return null;
    end $$`);
  await knex.raw(`
    create trigger instances_settings_changed after update of settings on instances
    for each row when (old.settings is distinct from new.settings)
    execute function switchboard_settings_changed()`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop trigger if exists instances_settings_changed on instances');
  await knex.raw('drop function if exists switchboard_settings_changed()');
}
