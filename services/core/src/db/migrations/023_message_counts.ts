// Counts of the messages that message retention (MESSAGE_RETENTION_MS) deleted, by instance, UTC
// date, direction and type: the statistics (/api/stats) add them to the rows still there, so a
// deleted message is counted as before. They go with their instance, as its messages do.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('message_counts', (t) => {
    t.string('instance_id', 40).notNullable().references('instances.id').onDelete('CASCADE');
    t.date('date').notNullable();
    t.string('direction', 8).notNullable();
    t.string('type', 16).notNullable();
    t.bigInteger('count').notNullable();
    t.primary(['instance_id', 'date', 'direction', 'type']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('message_counts');
}
