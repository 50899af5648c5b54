// Drops 003's host-keyed destination column and its index, which nothing has read since
// 007_delivery_destination_url (kept until then for the previous version's dispatchers during a
// rolling upgrade). The index held the whole host of each open delivery's URL: a host of 2,048
// characters in a non-Latin script is more than a B-tree entry can hold, and the one statement that
// routes a batch of events failed for every tenant in it.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw('drop index if exists deliveries_due_by_destination');
  await knex.raw('alter table deliveries drop column if exists destination');
}

export async function down(): Promise<void> {
  // 003's down removes them; nothing to bring back here.
}
