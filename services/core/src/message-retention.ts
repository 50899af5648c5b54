// Message retention (MESSAGE_RETENTION_MS; 0, the default, keeps every message): sends whose
// outcome is known and received messages older than that are deleted, each batch's counts added
// to `message_counts` in the same statement, so the statistics count them as before (migration
// 023). Queued and sending items are never touched. Without it every message text, number and
// name stayed in the database for good, and with them the tables every listing and count reads.
import type { Knex } from 'knex';
import type { EventRetentionOptions } from './event-retention.ts';
import { inBatches, startPeriodicJob, type PeriodicJob } from './periodic-job.ts';
import { ITEM_STATUSES, PENDING_ITEM_STATUSES } from './send-events.ts';

/** As the event retention's; `maxAgeMs` 0 keeps every message, and the first run comes two
 *  minutes after the start (after the event retention's). */
export type MessageRetentionOptions = EventRetentionOptions;

/** Send item statuses no later write changes (only receipts of a sent message, within days). */
const SETTLED_SEND_STATUSES = ITEM_STATUSES.filter((status) => !PENDING_ITEM_STATUSES.includes(status));

const ADD_COUNTS = `INSERT INTO message_counts (instance_id, date, direction, type, count)
  SELECT instance_id, (created_at AT TIME ZONE 'UTC')::date, direction, type, count(*) FROM gone_counted GROUP BY 1, 2, 3, 4
  ON CONFLICT (instance_id, date, direction, type) DO UPDATE SET count = message_counts.count + excluded.count
  RETURNING 1`;

/** runOnce: one sweep; resolves with the number of messages deleted. */
export function startMessageRetention(opts: MessageRetentionOptions): PeriodicJob<number> {
  return startPeriodicJob(() => sweep(opts), {
    name: 'message retention sweep',
    firstRunAfterMs: opts.firstRunAfterMs ?? 120_000,
    intervalMs: opts.intervalMs ?? 3_600_000,
    log: opts.log,
  });
}

async function sweep(opts: MessageRetentionOptions): Promise<number> {
  if (!opts.maxAgeMs) return 0;
  const cutoff = new Date(Date.now() - opts.maxAgeMs);
  const batchSize = opts.batchSize ?? 500;
  const deleted =
    (await inBatches((size) => deleteOldSends(opts.db, cutoff, size), batchSize)) + (await inBatches((size) => deleteOldReceived(opts.db, cutoff, size), batchSize));
  if (deleted) opts.log.info({ deleted }, 'message retention removed old messages');
  return deleted;
}

/** Sends whose queue time ended before `cutoff` (accepted a day before that, by default) and whose
 *  outcome is known, up to `limit`: each status's oldest through the (status, expires_at) index,
 *  in its order (one range for all statuses would read and sort every old row for each batch). */
export async function deleteOldSends(db: Knex, cutoff: Date, limit: number): Promise<number> {
  return db.transaction(async (trx) => {
    const candidates: Candidate[] = [];
    for (const status of SETTLED_SEND_STATUSES) {
      if (candidates.length >= limit) break;
      candidates.push(...(await trx('send_items').where({ status }).where('expires_at', '<', cutoff).orderBy('expires_at').limit(limit - candidates.length).select('id', 'instance_id')));
    }
    return deleteCounting(trx, 'send_items', candidates);
  });
}

/** Received messages from before `cutoff`, up to `limit`, through each instance's
 *  (instance_id, created_at) index. */
export async function deleteOldReceived(db: Knex, cutoff: Date, limit: number): Promise<number> {
  return db.transaction(async (trx) => {
    const { rows } = await trx.raw(
      `SELECT o.id, i.id AS instance_id FROM instances i CROSS JOIN LATERAL (
         SELECT id FROM incoming WHERE instance_id = i.id AND created_at < ? ORDER BY created_at LIMIT ?) o
       LIMIT ?`,
      [cutoff, limit, limit],
    );
    return deleteCounting(trx, 'incoming', rows as Candidate[]);
  });
}

interface Candidate {
  id: string;
  instance_id: string;
}

/** How the statistics count each table's rows: a send is outbound; of received messages, what the
 *  phone itself sent is outbound, and the echo of an API send is not counted again (its send is). */
const COUNTED_AS = {
  send_items: { returning: 'instance_id, created_at, type', rows: `SELECT instance_id, created_at, 'outbound' AS direction, type FROM gone` },
  incoming: {
    returning: 'instance_id, created_at, type, from_me, from_api',
    rows: `SELECT instance_id, created_at, CASE WHEN from_me THEN 'outbound' ELSE 'inbound' END AS direction, type FROM gone WHERE NOT from_api`,
  },
};

/**
 * Deletes the candidates and adds what it deleted to message_counts, in one statement. Their
 * instances are locked first (KEY SHARE, in id order): an instance's delete locks its row and then
 * cascades into these rows, while the counts' foreign key check needs that row — taken the other
 * way round, the two deadlocked and the instance's delete failed. Of two sweeps that pick the same
 * rows, each counts only those its own DELETE removed.
 */
async function deleteCounting(trx: Knex.Transaction, table: keyof typeof COUNTED_AS, candidates: Candidate[]): Promise<number> {
  if (!candidates.length) return 0;
  const instances = [...new Set(candidates.map((c) => c.instance_id))].sort();
  await trx('instances').whereIn('id', instances).orderBy('id').forKeyShare().select('id');
  const { returning, rows: counted } = COUNTED_AS[table];
  const { rows } = await trx.raw(
    `WITH gone AS (DELETE FROM ${table} WHERE id = ANY (?::text[]) RETURNING ${returning}),
     gone_counted AS (${counted}),
     counted AS (${ADD_COUNTS})
     SELECT (SELECT count(*) FROM gone) AS deleted, (SELECT count(*) FROM counted) AS groups`,
    [candidates.map((c) => c.id)],
  );
  return Number(rows[0].deleted);
}
