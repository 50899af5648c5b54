// Media blobs outlive their rows unless someone deletes them: a media row goes with its instance
// (ON DELETE CASCADE, from the gateway's delete or the operator's finalizer) and nothing then knew
// which blobs to remove, so a deleted instance's files stayed in the store for 30 days. The
// database now queues the blob of every deleted media row, in the same transaction as the delete;
// the media retention sweep (and the instance delete, at once) removes the blobs and the entries.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('media_purge', (t) => {
    t.string('media_id', 40).primary();
    t.timestamp('queued_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.raw(`
    create function media_queue_purge() returns trigger language plpgsql as $$
    begin
      insert into media_purge (media_id) select id from gone on conflict do nothing;
      return null;
    end $$`);
  await knex.raw('create trigger media_purge_on_delete after delete on media referencing old table as gone for each statement execute function media_queue_purge()');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop trigger if exists media_purge_on_delete on media');
  await knex.raw('drop function if exists media_queue_purge()');
  await knex.schema.dropTableIfExists('media_purge');
}
