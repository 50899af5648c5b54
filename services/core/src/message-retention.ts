// Message retention (MESSAGE_RETENTION_MS; 0, the default, keeps every message): sends whose
// outcome is known and received messages older than that are deleted, each batch's counts added
// to `message_counts` in the same statement, so the statistics count them as before (migration
// 023). Queued and sending items are never touched. Without it every message text, number and
// name stayed in the database for good, and with them the tables every listing and count reads.
import type { Knex } from 'knex';
import type { EventRetentionOptions } from './event-retention.ts';
import { inBatches, startPeriodicJob, type PeriodicJob } from './periodic-job.ts';

/** As the event retention's; `maxAgeMs` 0 keeps every message, and the first run comes two
 *  minutes after the start (after the event retention's). */
export type MessageRetentionOptions = EventRetentionOptions;

/** Send item statuses no later write changes (only receipts of a sent message, within days). */
const SETTLED_SEND_STATUSES = ['sent', 'delivered', 'read', 'played', 'failed', 'uncertain', 'cancelled', 'expired'];

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
 *  outcome is known; through the (status, expires_at) index. Of two sweeps that pick the same rows,
 *  each counts only those its own DELETE removed. */
export async function deleteOldSends(db: Knex, cutoff: Date, limit: number): Promise<number> {
  const { rows } = await db.raw(
    `WITH gone AS (
       DELETE FROM send_items WHERE id IN (
         SELECT id FROM send_items WHERE status = ANY (?::text[]) AND expires_at < ? ORDER BY expires_at LIMIT ?)
       RETURNING instance_id, created_at, type),
     gone_counted AS (SELECT instance_id, created_at, 'outbound' AS direction, type FROM gone),
     counted AS (${ADD_COUNTS})
     SELECT (SELECT count(*) FROM gone) AS deleted, (SELECT count(*) FROM counted) AS groups`,
    [SETTLED_SEND_STATUSES, cutoff, limit],
  );
  return Number(rows[0].deleted);
}

/** Received messages from before `cutoff`, through each instance's (instance_id, created_at)
 *  index. Counted as the statistics count them: what the phone itself sent is outbound, the echo
 *  of an API send is not counted again (its send is). */
export async function deleteOldReceived(db: Knex, cutoff: Date, limit: number): Promise<number> {
  const { rows } = await db.raw(
    `WITH old AS (
       SELECT o.id FROM instances i CROSS JOIN LATERAL (
         SELECT id FROM incoming WHERE instance_id = i.id AND created_at < ? ORDER BY created_at LIMIT ?) o
       LIMIT ?),
     gone AS (DELETE FROM incoming WHERE id IN (SELECT id FROM old) RETURNING instance_id, created_at, type, from_me, from_api),
     gone_counted AS (
       SELECT instance_id, created_at, CASE WHEN from_me THEN 'outbound' ELSE 'inbound' END AS direction, type FROM gone WHERE NOT from_api),
     counted AS (${ADD_COUNTS})
     SELECT (SELECT count(*) FROM gone) AS deleted, (SELECT count(*) FROM counted) AS groups`,
    [cutoff, limit, limit],
  );
  return Number(rows[0].deleted);
}
