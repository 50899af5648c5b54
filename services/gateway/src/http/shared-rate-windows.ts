// The rate limit's windows in PostgreSQL, shared by every gateway replica of a cluster: with
// windows in memory, a client whose connections reach two replicas would get the limit twice
// (DESIGN §5 counts per client IP, not per replica). The takes that arrive while one statement
// runs form the next (CallBatcher), so under load many requests cost one statement; its row locks
// keep the count exact when replicas take for the same client at once (migration 019).
//
// The database keeps whole seconds, so its count errs on the strict side by under a second. When
// the database cannot answer, this replica's own windows decide: the API stays up with the limit
// per replica, as before this module, and a warning says so.
import { batchGatherMs, CallBatcher, prepared, startPeriodicJob, type Db, type Logger, type PeriodicJob } from '@switchboard/core';
import { LocalRateWindows, WINDOW_MS, type RateVerdict, type RateWindows } from './rate-limit.ts';

const MAX_BATCH = 256;
const FALLBACK_WARNING_EVERY_MS = 30_000;

export interface SharedRateWindowsOptions {
  db: Db;
  limit: number;
  log: Logger;
  /** The window's length; only tests shorten it. */
  windowMs?: number;
}

interface WindowRow {
  client: string;
  seconds: string[];
  counts: number[];
  taken: number;
  now_ms: string;
}

export class SharedRateWindows implements RateWindows {
  private readonly batcher: CallBatcher<string, RateVerdict>;
  private readonly local: LocalRateWindows;
  private readonly sweep: PeriodicJob<unknown>;
  private readonly windowMs: number;
  private lastWarning = -Infinity;

  constructor(private readonly opts: SharedRateWindowsOptions) {
    this.windowMs = opts.windowMs ?? WINDOW_MS;
    this.local = new LocalRateWindows(opts.limit);
    this.batcher = new CallBatcher((keys) => this.takeBatch(keys), MAX_BATCH, batchGatherMs(opts.db));
    // Rows of clients that went quiet: every replica sweeps, which is harmless.
    this.sweep = startPeriodicJob(() => this.removeIdle(), { name: 'rate limit sweep', firstRunAfterMs: this.windowMs, intervalMs: this.windowMs, log: opts.log });
  }

  async take(key: string, now: number): Promise<RateVerdict> {
    // Kept in step always, so that a fallback knows this replica's recent requests.
    const local = this.local.take(key, now);
    try {
      return await this.batcher.submit(key);
    } catch (err) {
      if (now - this.lastWarning >= FALLBACK_WARNING_EVERY_MS) {
        this.lastWarning = now;
        this.opts.log.warn({ err }, 'rate limit: the database did not answer; this replica counts alone until it does');
      }
      return local;
    }
  }

  async stop(): Promise<void> {
    await this.sweep.stop();
    await this.batcher.idle();
  }

  removeIdle(): Promise<unknown> {
    return this.opts.db.raw("delete from rate_limit_windows where touched_at < now() - (? * interval '1 millisecond')", [this.windowMs + 1000]);
  }

  /** One statement for the batch: each key's requests are taken in arrival order, as many as its
   *  window has room for. */
  private async takeBatch(keys: string[]): Promise<RateVerdict[]> {
    const asked = new Map<string, number>();
    for (const key of keys) asked.set(key, (asked.get(key) ?? 0) + 1);
    const { limit } = this.opts;
    const window = this.windowMs;
    // Keys in one order in every statement, so two replicas' batches never wait on each other's locks.
    const result = await this.opts.db
      .raw(
        `with asked (client, asked) as (select * from unnest(?::text[], ?::integer[])),
              clock (now_ms) as (select (extract(epoch from now()) * 1000)::bigint)
         insert into rate_limit_windows as w (client, seconds, counts, asked, taken, touched_at)
         select a.client, t.kept_seconds, t.kept_counts, a.asked, t.taken, now()
           from asked a, clock c, rate_limit_take('{}', '{}', c.now_ms, a.asked, ?, ?) t
          order by a.client
         on conflict (client) do update set (seconds, counts, asked, taken, touched_at) = (
           select t.kept_seconds, t.kept_counts, excluded.asked, t.taken, excluded.touched_at
             from clock c, rate_limit_take(w.seconds, w.counts, c.now_ms, excluded.asked, ?, ?) t)
         returning client, seconds, counts, taken, (select now_ms from clock) as now_ms`,
        [[...asked.keys()], [...asked.values()], limit, window, limit, window],
      )
      .options(prepared('gateway_rate_limit_take'));
    const rows = new Map((result.rows as WindowRow[]).map((row) => [row.client, row]));
    const seen = new Map<string, number>();
    return keys.map((key) => {
      const row = rows.get(key)!;
      const index = seen.get(key) ?? 0;
      seen.set(key, index + 1);
      const counted = row.counts.reduce((sum, n) => sum + n, 0);
      const before = counted - row.taken;
      const oldest = Math.min(...row.seconds.map(Number));
      const resetMs = row.seconds.length ? Math.max(0, (oldest + 1) * 1000 + window - Number(row.now_ms)) : 0;
      return { remaining: index < row.taken ? limit - (before + index + 1) : -1, resetMs };
    });
  }
}
