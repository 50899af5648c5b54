// Writes accepted sends to the queue, many per statement (group commit): the sends that arrive
// while one batch is being written form the next, so under load one INSERT (items + their outbox
// rows) serves many requests, and a lone request waits for nothing. Each caller learns what
// happened to its own item.
//
// The database keeps the queue limit (migration 002_queue_count). When a batch is refused for what
// may be one item's sake — an instance's queue filled up, the instance was deleted, a value the
// column refuses, a deadlock with another writer — its items are written one by one in arrival
// order, so the limit stays exact and one client's bad item fails only its own request. When the
// database itself is failing (connection lost, shutting down), the whole batch fails at once.
import { batchGatherMs, CallBatcher, FOREIGN_KEY_VIOLATION, prepared, QUEUE_FULL_SQLSTATE, outboxRow, subjects, type Db } from '@switchboard/core';

export interface NewSendItem {
  id: string;
  instance_id: string;
  messenger_id: string;
  phone: string;
  type: string;
  payload: string;
  status: 'queued';
  idempotency_key: string | null;
  content_hash: string | null;
  expires_at: Date;
  trace_context: string | null;
}

/** `key_in_use`: the item's Idempotency-Key already names an operation of its instance;
 *  `instance_gone`: the instance was deleted meanwhile. */
export type WriteResult = 'queued' | 'key_in_use' | 'queue_full' | 'instance_gone';

/** What a lone item's refusal means for its request (anything else fails the request). */
const SINGLE_ITEM_FAULTS: Record<string, WriteResult | undefined> = { [QUEUE_FULL_SQLSTATE]: 'queue_full', [FOREIGN_KEY_VIOLATION]: 'instance_gone' };
/** SQLSTATE classes one item can cause: data (22), constraints (23), transaction rollback such as a
 *  deadlock (40). Others (08 connection, 53 resources, 57 shutdown, XX internal) are the database's. */
const ITEM_FAULT_CLASSES = new Set(['22', '23', '40']);
const MAX_BATCH = 64;

export class SendItemWriter {
  /** An Error is the refusal of that one item (its request fails; its batch-mates do not). */
  private readonly writer: CallBatcher<NewSendItem, WriteResult | Error>;

  constructor(private readonly db: Db) {
    this.writer = new CallBatcher((items) => this.writeBatch(items), MAX_BATCH, batchGatherMs(db));
  }

  async write(item: NewSendItem): Promise<WriteResult> {
    const result = await this.writer.submit(item);
    if (result instanceof Error) throw result;
    return result;
  }

  /** A batch holds many clients' requests: refused for what may be one item's fault, each item
   *  is then written alone, so a bad item (or a full queue) fails only its own request. When the
   *  database is failing, every item fails at once rather than one connection wait each. */
  private async writeBatch(items: NewSendItem[]): Promise<(WriteResult | Error)[]> {
    try {
      return await this.insert(items);
    } catch (err) {
      const failure = err instanceof Error ? err : new Error(String(err));
      const state = sqlState(err);
      if (!isItemFault(state)) return items.map(() => failure);
      // A lone item's other refusals (e.g. a deadlock) fail its request; nothing was written.
      if (items.length === 1) return [SINGLE_ITEM_FAULTS[state!] ?? failure];
    }
    const results: (WriteResult | Error)[] = [];
    for (const item of items) results.push(...(await this.writeBatch([item])));
    return results;
  }

  /** One statement: the items (a used key is skipped, not an error) and the outbox rows of those
   *  inserted, in arrival order. Rows go in by instance so concurrent batches lock instances in
   *  the same order. Each column travels as one array parameter (`unnest`): the statement text is
   *  the same for every batch size, and a batch of 64 binds 15 values instead of 1,000. */
  private async insert(items: NewSendItem[]): Promise<WriteResult[]> {
    const rows = [...items].sort((a, b) => (a.instance_id < b.instance_id ? -1 : a.instance_id > b.instance_id ? 1 : 0));
    const column = (key: keyof NewSendItem) => rows.map((row) => row[key]);
    const announcements = items.map((item) => outboxRow({ subject: subjects.command(item.instance_id), msgId: item.id, payload: JSON.stringify({ id: item.id }), headers: item.trace_context ? { traceparent: item.trace_context } : {} }));
    const arrays: unknown[][] = [
      ...ITEM_COLUMNS.map((key) => column(key)),
      announcements.map((a) => a.msgId),
      announcements.map((a) => a.subject),
      announcements.map((a) => a.payload),
      announcements.map((a) => a.headers),
    ];
    const result = await this.db.raw(INSERT_WITH_ANNOUNCEMENTS, arrays as Parameters<Db['raw']>[1]).options(prepared('gateway_insert_send_items'));
    const inserted = new Set((result.rows as { id: string }[]).map((r) => r.id));
    return items.map((item) => (inserted.has(item.id) ? 'queued' : 'key_in_use'));
  }
}

const ITEM_COLUMNS = ['id', 'instance_id', 'messenger_id', 'phone', 'type', 'payload', 'status', 'idempotency_key', 'content_hash', 'expires_at', 'trace_context'] as const;
const INSERT_WITH_ANNOUNCEMENTS = `
  with inserted as (
    insert into send_items (${ITEM_COLUMNS.join(', ')})
    select id, instance_id, messenger_id, phone, type, payload::jsonb, status, idempotency_key, content_hash, expires_at, trace_context
    from unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::timestamptz[], ?::text[])
      as t(${ITEM_COLUMNS.join(', ')})
    on conflict (instance_id, idempotency_key) do nothing
    returning id),
  announced as (
    insert into outbox (subject, msg_id, payload, headers)
    select a.subject, a.msg_id, a.payload, a.headers::jsonb
    from unnest(?::text[], ?::text[], ?::text[], ?::text[]) with ordinality a(msg_id, subject, payload, headers, place)
    join inserted on inserted.id = a.msg_id
    order by a.place
    returning seq)
  select id from inserted`;

function isItemFault(state: string | undefined): boolean {
  return state !== undefined && (state === QUEUE_FULL_SQLSTATE || ITEM_FAULT_CLASSES.has(state.slice(0, 2)));
}

/** PostgreSQL's SQLSTATE of a statement error; undefined for other failures (`ECONNREFUSED`). */
function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.length === 5 ? code : undefined;
}
