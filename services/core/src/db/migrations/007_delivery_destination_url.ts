// A delivery's destination is its whole webhook URL, no longer the URL's scheme and authority:
// two tenants whose webhooks share a host (a hosted automation service, a shared relay) each get
// their own concurrency cap, so one tenant's hanging path cannot hold the slots of the others.
// Claims walk the due deliveries by URL through this index (as they walked 003's column).
import type { Knex } from 'knex';
import { up as addAuthorityDestination } from './003_delivery_destination.ts';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`create index deliveries_due_by_url on deliveries (url, next_attempt_at) where status in ('pending', 'retrying')`);
  await knex.raw('drop index if exists deliveries_due_by_destination');
  await knex.raw('alter table deliveries drop column if exists destination');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop index if exists deliveries_due_by_url');
  await addAuthorityDestination(knex);
}
