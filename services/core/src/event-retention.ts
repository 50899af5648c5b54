// Event retention: events (and their delivery rows, by cascade) older than EVENT_RETENTION_MS whose
// delivery is over — delivered, filtered, without a destination, cancelled or exhausted — are
// deleted. Listings show the last 50, and a delivery that is still pending or retrying is never
// touched; without this the table grew by every event for good, and the dispatcher's start-up
// sweep, which reads every event, with it.
import type { Db } from './db/connect.ts';
import type { Logger } from './logger.ts';
import { startPeriodicJob, type PeriodicJob } from './periodic-job.ts';

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

/** Deliveries in these states are over: nothing will send them again without a retry request. */
const FINISHED = ['delivered', 'filtered', 'no_destination', 'cancelled', 'exhausted'];

/** runOnce: one sweep; resolves with the number of events deleted. */
export function startEventRetention(opts: EventRetentionOptions): PeriodicJob<number> {
  return startPeriodicJob(() => deleteFinishedEvents(opts), {
    name: 'event retention sweep',
    firstRunAfterMs: opts.firstRunAfterMs ?? 60_000,
    intervalMs: opts.intervalMs ?? 3_600_000,
    log: opts.log,
  });
}

async function deleteFinishedEvents(opts: EventRetentionOptions): Promise<number> {
  const batchSize = opts.batchSize ?? 1000;
  const cutoff = new Date(Date.now() - opts.maxAgeMs);
  let deleted = 0;
  for (;;) {
    // Oldest first by the (created_at, id) index; rows another sweep (another gateway) holds are
    // skipped, and a delivery row locked by a dispatcher keeps its event for the next sweep.
    const old = opts.db('events as e')
      .join('deliveries as d', 'd.event_id', 'e.id')
      .where('e.created_at', '<', cutoff)
      .whereIn('d.status', FINISHED)
      .orderBy([{ column: 'e.created_at' }, { column: 'e.id' }])
      .limit(batchSize)
      .forUpdate()
      .skipLocked()
      .select('e.id');
    const count = Number(await opts.db('events').whereIn('id', old).delete());
    deleted += count;
    if (count < batchSize) break;
  }
  if (deleted) opts.log.info({ deleted }, 'event retention removed old events');
  return deleted;
}
