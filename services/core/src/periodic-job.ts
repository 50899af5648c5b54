// A background job that runs now and then in a long-lived process: first a while after the start
// (not at once, while the process is still busy starting), then on its interval. A run still
// going is joined rather than doubled; a failed run is logged, and the next comes as planned.
import type { Logger } from './logger.ts';

export interface PeriodicJob<T> {
  /** One run now (or the one under way). */
  runOnce(): Promise<T>;
  /** No further runs; resolves once a run under way has ended (before its database closes). */
  stop(): Promise<void>;
}

export interface PeriodicJobOptions {
  /** For the log line of a failed run. */
  name: string;
  firstRunAfterMs: number;
  intervalMs: number;
  log: Pick<Logger, 'error'>;
}

export function startPeriodicJob<T>(work: () => Promise<T>, opts: PeriodicJobOptions): PeriodicJob<T> {
  let running: Promise<T> | undefined;
  const runOnce = (): Promise<T> => {
    running ??= work().finally(() => (running = undefined));
    return running;
  };
  const runInBackground = () => void runOnce().catch((err: unknown) => opts.log.error({ err }, `${opts.name} failed`));
  const first = setTimeout(runInBackground, opts.firstRunAfterMs);
  const timer = setInterval(runInBackground, opts.intervalMs);
  // A background job alone must not keep the process alive.
  first.unref();
  timer.unref();
  return {
    runOnce,
    stop: async () => {
      clearTimeout(first);
      clearInterval(timer);
      await running?.catch(() => undefined);
    },
  };
}

/** Runs `batch` (which deletes at most `size` rows and says how many) until one comes back short;
 *  resolves with the total. PGlite runs each statement on the event loop: requests get their turn
 *  between batches. */
export async function inBatches(batch: (size: number) => Promise<number>, size: number): Promise<number> {
  let total = 0;
  for (;;) {
    const count = await batch(size);
    total += count;
    if (count < size) return total;
    await new Promise((resolve) => setImmediate(resolve));
  }
}
