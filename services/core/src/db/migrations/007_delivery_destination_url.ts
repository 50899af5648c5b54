// A delivery's destination is its whole webhook URL, no longer the URL's scheme and authority:
// two tenants whose webhooks share a host (a hosted automation service, a shared relay) each get
// their own concurrency cap, so one tenant's hanging path cannot hold the slots of the others.
// Claims walk the due deliveries by URL through this index, keyed by md5(url): a URL may be
// longer than a B-tree entry can be (2,704 bytes; the API takes 2,048 characters of any script).
// 003's host-keyed column and index stay for now, so dispatchers of the previous version keep
// claiming during a rolling upgrade; a later migration drops them.
import type { Knex } from 'knex';

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`create index deliveries_due_by_url_key on deliveries (md5(url), next_attempt_at) where status in ('pending', 'retrying') and url is not null`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop index if exists deliveries_due_by_url_key');
}
