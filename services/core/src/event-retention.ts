// Event retention: events (and their delivery rows, by cascade) older than EVENT_RETENTION_MS whose
// delivery is over — delivered, filtered, without a destination, cancelled or exhausted — are
// deleted. A delivery that is still pending or retrying is never touched; without this the table
// grew by every event for good, and the dispatcher's start-up sweep, which reads every event, with
// it.
import type { Knex } from 'knex';
import type { Db } from './db/connect.ts';
import { DELIVERY_STATUSES, OPEN_DELIVERY_STATUSES } from './deliveries.ts';
import type { Logger } from './logger.ts';
import { inBatches, startPeriodicJob, type PeriodicJob } from './periodic-job.ts';

export interface EventRetentionOptions {
  db: Db;
  maxAgeMs: number;
  log: Pick<Logger, 'info' | 'error'>;
  /** Default hourly, the first a minute after the start. */
  intervalMs?: number;
  firstRunAfterMs?: number;
  /** Events deleted per statement. */
  batchSize?: number;
}

/** Deliveries in these states are over: nothing sends them again unless a retry is asked for. */
const FINISHED = DELIVERY_STATUSES.filter((status) => !OPEN_DELIVERY_STATUSES.includes(status));

/** runOnce: one sweep; resolves with the number of events deleted. */
export function startEventRetention(opts: EventRetentionOptions): PeriodicJob<number> {
  return startPeriodicJob(() => sweep(opts), {
    name: 'event retention sweep',
    firstRunAfterMs: opts.firstRunAfterMs ?? 60_000,
    intervalMs: opts.intervalMs ?? 3_600_000,
    log: opts.log,
  });
}

async function sweep(opts: EventRetentionOptions): Promise<number> {
  const cutoff = new Date(Date.now() - opts.maxAgeMs);
  const deleted = await inBatches((size) => deleteFinishedEvents(opts.db, cutoff, size), opts.batchSize ?? 500);
  if (deleted) opts.log.info({ deleted }, 'event retention removed old events');
  return deleted;
}

/** Deletes up to `limit` events created before `cutoff` whose delivery is over, oldest first (the
 *  (created_at, id) index); returns how many. Rows locked elsewhere — a retry of that event, a
 *  concurrent sweep in another gateway — are skipped until the next sweep. */
export async function deleteFinishedEvents(db: Knex | Knex.Transaction, cutoff: Date, limit: number): Promise<number> {
  const old = db('events as e')
    .join('deliveries as d', 'd.event_id', 'e.id')
    .where('e.created_at', '<', cutoff)
    .whereIn('d.status', FINISHED)
    .orderBy([{ column: 'e.created_at' }, { column: 'e.id' }])
    .limit(limit)
    .forUpdate()
    .skipLocked()
    .select('e.id');
  return Number(await db('events').whereIn('id', old).delete());
}
