// Media retention (spec "Limits": 30 days): a periodic sweep deletes rows older than maxAgeMs,
// then the blobs of every deleted row. The database queues a deleted row's blob in `media_purge`
// in the same transaction (migration 011), whoever deleted it — this sweep, or the cascade of an
// instance delete — so a crash between row and blob leaves the entry for the next drain.
import type { Db } from '../db/connect.ts';
import type { Logger } from '../logger.ts';
import type { MediaStore } from './types.ts';
import { startPeriodicJob, type PeriodicJob } from '../periodic-job.ts';

export interface MediaRetentionOptions {
  db: Db;
  store: MediaStore;
  maxAgeMs: number;
  /** Default hourly. */
  intervalMs?: number;
  /** The first sweep, this long after the start (default a minute, or intervalMs if shorter): a
   *  process restarted more often than intervalMs would otherwise never sweep. */
  firstRunAfterMs?: number;
  log: Pick<Logger, 'info' | 'warn' | 'error'>;
  /** Rows handled per database round trip. */
  batchSize?: number;
}

/** runOnce: one sweep; resolves with the number of media records removed. */
export type MediaRetention = PeriodicJob<number>;

export function startMediaRetention(opts: MediaRetentionOptions): MediaRetention {
  const intervalMs = opts.intervalMs ?? 3_600_000;
  return startPeriodicJob(() => sweep(opts), {
    name: 'media retention sweep',
    firstRunAfterMs: opts.firstRunAfterMs ?? Math.min(60_000, intervalMs),
    intervalMs,
    log: opts.log,
  });
}

async function sweep(opts: MediaRetentionOptions): Promise<number> {
  const cutoff = new Date(Date.now() - opts.maxAgeMs);
  const batchSize = opts.batchSize ?? 200;
  let removed = 0;
  for (;;) {
    const old = opts.db('media').where('created_at', '<', cutoff).orderBy('created_at').limit(batchSize).select('id');
    const deleted = Number(await opts.db('media').whereIn('id', old).delete());
    removed += deleted;
    if (deleted < batchSize) break;
  }
  const purged = await drainMediaPurge(opts.db, opts.store, opts.log, batchSize);
  const orphans = opts.store.purgeOlderThan ? await opts.store.purgeOlderThan(cutoff) : 0;
  if (removed || purged || orphans) opts.log.info({ removed, purged, orphans }, 'media retention removed old and deleted media');
  return removed;
}

/** Removes the blobs of deleted media rows (queued by the database in `media_purge`), then their
 *  entries, one pass over the queue. Concurrent drains (several processes, several deletes) skip
 *  each other's entries; a blob the store fails to delete stays queued for the next drain. */
export async function drainMediaPurge(db: Db, store: MediaStore, log: Pick<Logger, 'warn'>, batchSize = 200): Promise<number> {
  let purged = 0;
  let after = '';
  for (;;) {
    const batch = await db.transaction(async (trx) => {
      const ids = (await trx('media_purge').where('media_id', '>', after).orderBy('media_id').limit(batchSize).forUpdate().skipLocked().pluck('media_id')) as string[];
      const done: string[] = [];
      for (const id of ids) {
        try {
          await store.delete(id);
          done.push(id);
        } catch (err) {
          log.warn({ mediaId: id, err: String(err) }, 'media: deleting the file of a deleted record failed; retried later');
        }
      }
      if (done.length) await trx('media_purge').whereIn('media_id', done).delete();
      return { ids, done: done.length };
    });
    purged += batch.done;
    if (batch.ids.length < batchSize) return purged;
    after = batch.ids[batch.ids.length - 1];
  }
}
