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

const LIST_LIMIT = 50;
const LIMIT_RULE = `must be a whole number from 1 to ${LIST_LIMIT}`;
const BEFORE_RULE = 'must be one id: that of an item a page of this list returned';

export const PageQuery = z.object({
  limit: z
    .string({ error: LIMIT_RULE })
    .regex(/^[1-9]\d?$/, LIMIT_RULE)
    .transform(Number)
    .pipe(z.number().max(LIST_LIMIT, LIMIT_RULE))
    .optional()
    .meta({ description: `How many items (${LIST_LIMIT} when absent).` }),
  before: z
    .string({ error: BEFORE_RULE })
    .min(1, BEFORE_RULE)
    .max(64, BEFORE_RULE)
    .optional()
    .meta({ description: 'The id of an item of this list, usually the last of a page: the answer holds the items listed after it (older).' }),
});
type Page = z.output<typeof PageQuery>;

/** One of the three lists: its table (each has `instance_id`, `created_at` and `id`) and the alias
 *  its query names that table by. */
export interface ListSource {
  table: 'send_items' | 'incoming' | 'events';
  alias: string;
}

/**
 * Reads the page asked for of a list query (its rows of one instance, any filters applied). The
 * cursor is looked up in the same statement; only an empty page asks whether it exists, so a
 * `before` that is no item of this instance's list is a 400 rather than taken for the end.
 */
export async function readPage(db: Knex, list: Knex.QueryBuilder, source: ListSource, instanceId: string, page: Page): Promise<Record<string, any>[]> {
  const { table, alias } = source;
  list.orderBy(`${alias}.created_at`, 'desc').orderBy(`${alias}.id`, 'desc').limit(page.limit ?? LIST_LIMIT);
  if (page.before === undefined) return await list;
  list.whereRaw(`(${alias}.created_at, ${alias}.id) < (select created_at, id from ${table} where instance_id = ? and id = ?)`, [instanceId, page.before]);
  const rows: Record<string, any>[] = await list;
  if (!rows.length && !(await db(table).where({ instance_id: instanceId, id: page.before }).first('id'))) {
    throw problems.validation([{ path: 'before', message: 'is no item of this list: use the id of an item a page returned (an item removed by retention is no longer one)' }]);
  }
  return rows;
}
