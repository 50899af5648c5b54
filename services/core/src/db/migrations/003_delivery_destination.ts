// Each delivery's destination (scheme + authority of its URL, lower-cased: the key the dispatcher
// caps concurrency and opens breakers by), stored and indexed with the due time. The claim query
// walks the destinations that have due deliveries through this index and takes a few rows of each,
// so a dead receiver's backlog — however long — is never scanned by claims for the others.
// Since 007_delivery_destination_url a destination is the whole URL; this column is no longer read.
import type { Knex } from 'knex';

/** The dispatcher's destination key until 007; `\\?` keeps knex from reading a binding. */
const DESTINATION_OF_URL = `lower(coalesce(substring(url from '^[A-Za-z][A-Za-z0-9+.-]*://[^/\\?#]+'), url))`;

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`alter table deliveries add column destination text generated always as (${DESTINATION_OF_URL}) stored`);
  await knex.raw(`create index deliveries_due_by_destination on deliveries (destination, next_attempt_at) where status in ('pending', 'retrying')`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop index if exists deliveries_due_by_destination');
  await knex.raw('alter table deliveries drop column if exists destination');
}
