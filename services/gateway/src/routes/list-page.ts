// Paging through the newest-first lists of sends, incoming messages and events. Without a query
// they answer the specification's "last 50". `limit` (1–50) asks for fewer; `before=<id>`, the id
// of an item of the same list (the last one of a page), asks for the items listed after it — the
// next page back. A client whose receiver was down for a day can page back until it meets an id
// it has seen, and find every exhausted delivery to retry, not only the last 50 events.
//
// The cursor is compared in the database on (created_at, id), the lists' order, so its
// microseconds are kept (a JavaScript Date would drop them and skip or repeat items).
import type { Knex } from 'knex';
import { z } from 'zod';
import { problems } from '@switchboard/core';

export const LIST_LIMIT = 50;

export const PageQuery = z.object({
  limit: z.coerce.number().int().min(1).max(LIST_LIMIT).optional(),
  before: z.string().min(1).max(64).optional(),
});
export type Page = z.output<typeof PageQuery>;

/** The tables of the three lists; each has `instance_id`, `created_at` and `id`. */
export type ListTable = 'send_items' | 'incoming' | 'events';

/** Narrows a newest-first list query (its rows qualified by `alias`) to the page asked for. A
 *  `before` that is no item of this instance's list is a 400, so a mistyped cursor is not taken
 *  for the end of the list. */
export async function onPage<Q extends Knex.QueryBuilder>(db: Knex, list: Q, table: ListTable, alias: string, instanceId: string, page: Page): Promise<Q> {
  list.orderBy(`${alias}.created_at`, 'desc').orderBy(`${alias}.id`, 'desc').limit(page.limit ?? LIST_LIMIT);
  if (page.before === undefined) return list;
  const cursor = await db(table).where({ instance_id: instanceId, id: page.before }).first('id');
  if (!cursor) throw problems.validation([{ path: 'before', message: 'is no item of this list: use the id of an item a page returned (an item removed by retention has nothing older left)' }]);
  return list.whereRaw(`(${alias}.created_at, ${alias}.id) < (select created_at, id from ${table} where id = ?)`, [page.before]) as Q;
}
