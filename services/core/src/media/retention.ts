// Media retention (spec "Limits": 30 days): a periodic sweep deletes blobs and rows older than
// maxAgeMs. The blob goes first, then the row, so a crash mid-way leaves at worst a row whose
// blob is gone (its download answers 404) and the next sweep removes that row.
import type { Db } from '../db/connect.ts';
import type { Logger } from '../logger.ts';
import type { MediaStore } from './types.ts';

export interface MediaRetentionOptions {
  db: Db;
  store: MediaStore;
  maxAgeMs: number;
  intervalMs: number;
  log: Pick<Logger, 'info' | 'warn' | 'error'>;
  /** Rows handled per database round trip. */
  batchSize?: number;
}

export interface MediaRetention {
  /** One sweep; resolves with the number of media records removed. */
  runOnce(): Promise<number>;
  stop(): void;
}

export function startMediaRetention(opts: MediaRetentionOptions): MediaRetention {
  let running: Promise<number> | undefined;
  const runOnce = (): Promise<number> => {
    // A sweep that is still going is joined rather than run twice in parallel.
    running ??= sweep(opts).finally(() => (running = undefined));
    return running;
  };
  const timer = setInterval(() => {
    runOnce().catch((err: unknown) => opts.log.error({ err }, 'media retention sweep failed'));
  }, opts.intervalMs);
  timer.unref(); // retention alone must not keep the process alive
  return { runOnce, stop: () => clearInterval(timer) };
}

async function sweep(opts: MediaRetentionOptions): Promise<number> {
  const cutoff = new Date(Date.now() - opts.maxAgeMs);
  const batchSize = opts.batchSize ?? 200;
  let removed = 0;
  for (;;) {
    const ids = (await opts.db('media').where('created_at', '<', cutoff).orderBy('created_at').limit(batchSize).pluck('id')) as string[];
    for (const id of ids) await opts.store.delete(id);
    if (ids.length) await opts.db('media').whereIn('id', ids).delete();
    removed += ids.length;
    if (ids.length < batchSize) break;
  }
  const orphans = opts.store.purgeOlderThan ? await opts.store.purgeOlderThan(cutoff) : 0;
  if (removed || orphans) opts.log.info({ removed, orphans }, 'media retention removed old media');
  return removed;
}
