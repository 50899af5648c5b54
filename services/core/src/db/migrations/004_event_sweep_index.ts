// The dispatcher's start-up sweep (findUnroutedEvents) reads events oldest first, by keyset on
// (created_at, id), and keeps those without a delivery row. Without an index in that order each
// page sorted the whole events table (a sequential scan and a hash anti-join over every delivery),
// so a sweep cost grew with the square of the table. With it, a page reads its next rows in order
// and probes the deliveries primary key for each.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw('create index events_created_at_id on events (created_at, id)');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop index if exists events_created_at_id');
}
