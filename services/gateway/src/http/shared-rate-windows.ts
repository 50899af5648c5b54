// The rate limit's windows in PostgreSQL, shared by every gateway replica of a cluster: with
// windows in memory, a client whose connections reach two replicas would get the limit twice
// (DESIGN §5 counts per client IP, not per replica). The takes that arrive while one statement
// runs form the next (CallBatcher), so under load many requests cost one statement; its row locks
// keep the count exact when replicas take for the same client at once (migration 019).
//
// The database keeps whole seconds, so its count errs on the strict side by under a second. A
// refused client is answered from memory until its window frees (no other replica can free it
// sooner), so a flood of refused requests costs no statements. When the database does not answer
// within a moment, this replica's own windows decide: the API stays up with the limit per replica,
// as before this module, and a warning says so.
import { batchGatherMs, CallBatcher, prepared, startPeriodicJob, withDeadline, type Db, type Logger, type PeriodicJob } from '@switchboard/core';
import { LocalRateWindows, WINDOW_MS, type RateVerdict, type RateWindows } from './rate-limit.ts';

const MAX_BATCH = 256;
const FALLBACK_WARNING_EVERY_MS = 30_000;
/** How long a request waits for the database's count before this replica's own decides. */
export const SHARED_COUNT_DEADLINE_MS = 500;

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
  asked: number;
  taken: number;
  now_ms: string;
}

export class SharedRateWindows implements RateWindows {
  private readonly batcher: CallBatcher<string, RateVerdict>;
  private readonly local: LocalRateWindows;
  private readonly sweep: PeriodicJob<unknown>;
  private readonly windowMs: number;
  /** Clients refused by the shared count, and until when (this process's clock). */
  private readonly refusedUntil = new Map<string, number>();
  /** When the statement under way began (undefined while none runs). */
  private statementSince: number | undefined;
  private lastWarning = -Infinity;

  constructor(private readonly opts: SharedRateWindowsOptions) {
    this.windowMs = opts.windowMs ?? WINDOW_MS;
    this.local = new LocalRateWindows(opts.limit);
    this.batcher = new CallBatcher((keys) => this.takeBatch(keys), MAX_BATCH, batchGatherMs(opts.db));
    // Rows of clients that went quiet, once a minute: every replica sweeps, which is harmless.
    this.sweep = startPeriodicJob(() => this.removeIdle(), { name: 'rate limit sweep', firstRunAfterMs: WINDOW_MS, intervalMs: WINDOW_MS, log: opts.log });
  }

  async take(key: string, now: number): Promise<RateVerdict> {
    // Kept in step always, so that a fallback knows this replica's recent requests.
    const local = this.local.take(key, now);
    const refusedUntil = this.refusedUntil.get(key);
    if (refusedUntil !== undefined) {
      if (now < refusedUntil) return { remaining: -1, resetMs: refusedUntil - now };
      this.refusedUntil.delete(key);
    }
    // A statement stuck past the deadline (a failover, a lock): new requests do not queue behind it.
    if (this.statementSince !== undefined && now - this.statementSince > SHARED_COUNT_DEADLINE_MS) return this.fallBack(now, local, 'is slow');
    try {
      const verdict = await withDeadline(this.batcher.submit(key), SHARED_COUNT_DEADLINE_MS, () => new Error('no answer in time'));
      if (verdict.remaining < 0) this.refusedUntil.set(key, now + verdict.resetMs);
      return verdict;
    } catch (err) {
      return this.fallBack(now, local, 'did not answer', err);
    }
  }

  async stop(): Promise<void> {
    await this.sweep.stop();
    await this.idle();
  }

  /** Resolves once no statement is under way (its answer taken in, the database shared again). */
  idle(): Promise<void> {
    return this.batcher.idle();
  }

  /** Deletes the rows of clients quiet for longer than the window (and the second that may still
   *  count), skipping rows a take has locked: waiting for them could deadlock with its batch. */
  removeIdle(): Promise<unknown> {
    for (const [key, until] of this.refusedUntil) if (until <= Date.now()) this.refusedUntil.delete(key);
    return this.opts.db.raw(
      `delete from rate_limit_windows where client in (
         select client from rate_limit_windows where touched_at < now() - (? * interval '1 millisecond') for update skip locked)`,
      [this.windowMs + 1000],
    );
  }

  private fallBack(now: number, local: RateVerdict, why: string, err?: unknown): RateVerdict {
    if (now - this.lastWarning >= FALLBACK_WARNING_EVERY_MS) {
      this.lastWarning = now;
      this.opts.log.warn({ err }, `rate limit: the database ${why}; this replica counts alone until it answers`);
    }
    return local;
  }

  /** One statement for the batch: each key's requests are taken in arrival order, as many as its
   *  window has room for. */
  private async takeBatch(keys: string[]): Promise<RateVerdict[]> {
    const asked = new Map<string, number>();
    for (const key of keys) asked.set(key, (asked.get(key) ?? 0) + 1);
    this.statementSince = Date.now();
    let rows: WindowRow[];
    try {
      rows = await this.upsertWindows(asked);
    } finally {
      this.statementSince = undefined;
    }
    const verdicts = new Map(rows.map((row) => [row.client, this.verdictsFor(row)]));
    return keys.map((key) => verdicts.get(key)!.shift()!);
  }

  /** Keys are locked in one order in every statement, so two replicas' batches may wait for each
   *  other but never deadlock. */
  private async upsertWindows(asked: Map<string, number>): Promise<WindowRow[]> {
    const { limit } = this.opts;
    const result = await this.opts.db
      .raw(
        `with asked (client, asked) as (select * from unnest(?::text[], ?::integer[])),
              clock (now_ms) as (select (extract(epoch from now()) * 1000)::bigint)
         insert into rate_limit_windows as w (client, seconds, counts, asked, taken, touched_at)
         select a.client, t.kept_seconds, t.kept_counts, a.asked, t.taken, now()
           from asked a, clock c, rate_limit_take('{}', '{}', c.now_ms, a.asked, ?, ?) t
          order by a.client
         on conflict (client) do update set (seconds, counts, asked, taken, touched_at) = (
           select t.kept_seconds, t.kept_counts, excluded.asked, t.taken, greatest(w.touched_at, excluded.touched_at)
             from clock c, rate_limit_take(w.seconds, w.counts, c.now_ms, excluded.asked, ?, ?) t)
         returning client, seconds, counts, asked, taken, (select now_ms from clock) as now_ms`,
        [[...asked.keys()], [...asked.values()], limit, this.windowMs, limit, this.windowMs],
      )
      .options(prepared('gateway_rate_limit_take'));
    return result.rows as WindowRow[];
  }

  /** The verdicts of one client's requests in the batch, in arrival order: the first `taken` let
   *  through, each with the places left after it; the rest refused. */
  private verdictsFor(row: WindowRow): RateVerdict[] {
    const counted = row.counts.reduce((sum, n) => sum + n, 0);
    const before = counted - row.taken;
    const oldest = Math.min(...row.seconds.map(Number));
    const resetMs = row.seconds.length ? Math.max(0, (oldest + 1) * 1000 + this.windowMs - Number(row.now_ms)) : 0;
    return Array.from({ length: row.asked }, (_, i) => ({ remaining: i < row.taken ? this.opts.limit - (before + i + 1) : -1, resetMs }));
  }
}
