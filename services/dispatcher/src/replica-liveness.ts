// Each dispatcher replica says every few seconds that it is alive (a row of dispatcher_replicas,
// stamped with the database's clock). A replica that has not said so for `goneAfterMs` is gone —
// killed, or on a node that was lost — and whichever replica notices first hands back as due the
// leases it held, so its claims wait seconds instead of the rest of their 60 s lease. A restarted
// replica under the same name takes its leases back itself at start (see startDispatcher).
//
// Silence is measured on the watcher's own monotonic clock: a stamp seen unchanged for
// `goneAfterMs` means nobody wrote it in that time. Comparing stamps with the database's now()
// would take every replica for gone when that clock steps forward (an NTP correction, a failover
// to a server whose clock is ahead).
//
// A false alarm (a replica alive but silent for `goneAfterMs`) costs at most a second attempt of
// the deliveries it had under way: its results are fenced off (the lease is no longer its own),
// and the receiver sees the same event id twice, which at-least-once delivery allows. Replicas of
// a version without this table hold leases under names that have no row here; those are never
// touched and wait out their lease as before.
import type { Knex } from 'knex';
import type { Logger } from '@switchboard/core';
import { releaseLeasesOf } from './store.ts';

export interface ReplicaLivenessOptions {
  /** How often this replica says it is alive. */
  heartbeatMs: number;
  /** Silence after which a replica is gone. Several heartbeats, so a slow statement or a pause
   *  of the event loop is not taken for a crash. */
  goneAfterMs: number;
}

export const DEFAULT_REPLICA_LIVENESS: ReplicaLivenessOptions = { heartbeatMs: 5_000, goneAfterMs: 20_000 };

/** The options in effect: each one given, else its default. */
export function livenessOptions(heartbeatMs?: number, goneAfterMs?: number): ReplicaLivenessOptions {
  return { heartbeatMs: heartbeatMs ?? DEFAULT_REPLICA_LIVENESS.heartbeatMs, goneAfterMs: goneAfterMs ?? DEFAULT_REPLICA_LIVENESS.goneAfterMs };
}

/** A silence shorter than two heartbeats would take a replica whose one stamp was late for gone. */
export function silenceTooShort(opts: ReplicaLivenessOptions): boolean {
  return opts.goneAfterMs < 2 * opts.heartbeatMs;
}

/** A stamp as exact text whatever the session's TimeZone and DateStyle: microseconds since 1970
 *  (extract returns numeric, so nothing is rounded). */
const STAMP = `(extract(epoch FROM seen_at) * 1000000)::bigint::text`;

export interface ReplicaLivenessDeps {
  db: Knex;
  log: Logger;
  /** This replica's name, the one its leases carry. */
  name: string;
  /** Called with how many deliveries were handed back, so the local scheduler claims them now. */
  onReleased(count: number): void;
}

export class ReplicaLiveness {
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;
  /** A check for silent replicas under way; it never delays this replica's own stamps. */
  private sweeping: Promise<void> | undefined;
  /** Each other replica's stamp as last read, and since when (local monotonic ms) it has been
   *  that. Forgotten whenever this replica's own heartbeats falter: after a database outage, a
   *  stall or a pause of this process nobody could stamp, so every watch starts again. */
  private readonly watched = new Map<string, { stamp: string; since: number }>();
  private lastBeat: number | undefined;

  constructor(
    private readonly deps: ReplicaLivenessDeps,
    private readonly opts: ReplicaLivenessOptions = DEFAULT_REPLICA_LIVENESS,
  ) {
    if (silenceTooShort(opts)) throw new Error(`dispatcher: goneAfterMs (${opts.goneAfterMs}) must be at least twice heartbeatMs (${opts.heartbeatMs})`);
  }

  async start(): Promise<void> {
    await this.beat();
    this.schedule();
  }

  /** Stops the heartbeat and removes this replica's row (its claims were handed back already). */
  async stop(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.beating;
    await this.sweeping;
    try {
      await this.deps.db('dispatcher_replicas').where({ name: this.deps.name }).delete();
    } catch (err) {
      // Harmless: the row goes stale and the next check of another replica removes it.
      this.deps.log.warn({ err }, 'dispatcher: could not remove this replica from dispatcher_replicas');
    }
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      this.beating = this.beat().finally(() => {
        this.beating = undefined;
        if (this.timer) this.schedule();
      });
    }, this.opts.heartbeatMs);
    this.timer.unref();
  }

  private async beat(): Promise<void> {
    let inserted: boolean;
    try {
      const { rows } = await this.deps.db.raw(
        `INSERT INTO dispatcher_replicas (name, seen_at) VALUES (?, now())
         ON CONFLICT (name) DO UPDATE SET seen_at = excluded.seen_at
         RETURNING (xmax = 0) AS inserted`,
        [this.deps.name],
      );
      inserted = Boolean(rows[0]?.inserted);
    } catch (err) {
      this.lastBeat = undefined;
      this.deps.log.warn({ err }, 'dispatcher: could not record that this replica is alive; will try again');
      return;
    }
    if (inserted && this.lastBeat !== undefined) {
      this.deps.log.warn('dispatcher: another replica took this one for gone (silent too long) and handed back its claims; deliveries under way may reach their receivers twice');
    }
    const now = performance.now();
    if (!this.beatingSteadily(now)) this.watched.clear();
    this.lastBeat = now;
    this.sweeping ??= this.releaseGoneReplicas().finally(() => (this.sweeping = undefined));
  }

  /** Whether this replica's own last heartbeat is recent: if not, the database (or this process)
   *  stood still, and so did everyone's stamps. */
  private beatingSteadily(now: number): boolean {
    return this.lastBeat !== undefined && now - this.lastBeat <= 2 * this.opts.heartbeatMs;
  }

  /** Reads the other replicas' stamps and returns those unchanged for `goneAfterMs`. */
  private async silentReplicas(): Promise<{ name: string; stamp: string }[]> {
    const rows: { name: string; stamp: string }[] = await this.deps.db('dispatcher_replicas')
      .whereNot({ name: this.deps.name })
      .select('name', this.deps.db.raw(`${STAMP} AS stamp`));
    const now = performance.now();
    // A read the database held back (a stall, not an error) ends when the others could not stamp
    // either: it shows nothing about their silence.
    if (!this.beatingSteadily(now)) {
      this.watched.clear();
      return [];
    }
    for (const name of this.watched.keys()) if (!rows.some((r) => r.name === name)) this.watched.delete(name);
    return rows.filter(({ name, stamp }) => {
      const seen = this.watched.get(name);
      if (seen?.stamp === stamp) return now - seen.since >= this.opts.goneAfterMs;
      this.watched.set(name, { stamp, since: now });
      return false;
    });
  }

  private async releaseGoneReplicas(): Promise<void> {
    try {
      const silent = await this.silentReplicas();
      if (!silent.length) return;
      const released = await this.deps.db.transaction(async (trx) => {
        // Rows another replica is deleting or stamping right now are not worth a wait.
        await trx.raw(`SET LOCAL lock_timeout = '2s'`);
        const gone: string[] = [];
        let count = 0;
        for (const { name, stamp } of silent) {
          // Only the stamp that was watched: a replica that stamped meanwhile is alive.
          const deleted = await trx('dispatcher_replicas').where({ name }).whereRaw(`${STAMP} = ?`, [stamp]).delete();
          if (!deleted) {
            this.deps.log.info({ replica: name }, 'dispatcher: a replica taken for silent stamped again (or was removed) meanwhile; left alone');
            continue;
          }
          gone.push(name);
          this.watched.delete(name);
          count += await releaseLeasesOf(trx, name);
        }
        if (gone.length) this.deps.log.info({ replicas: gone, released: count }, 'dispatcher: replicas gone silent; handed back the deliveries they had claimed');
        return count;
      });
      if (released) this.deps.onReleased(released);
    } catch (err) {
      this.deps.log.warn({ err }, 'dispatcher: could not check for replicas gone silent; will try again');
    }
  }
}
