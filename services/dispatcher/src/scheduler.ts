// The delivery worker (DESIGN §1 "Deliver"). Attempts are scheduled from the database, never from
// the bus: each tick claims due deliveries (FOR UPDATE SKIP LOCKED, leased), runs their attempts
// concurrently and records each result. Several replicas can run on one database; a claim is
// theirs alone until its lease runs out.
//
// Isolation: at most `maxConcurrent` attempts at once, and at most `perDestinationConcurrency`
// per destination (webhook URL); destinations at their cap are left out of the claim query, so a
// slow receiver only fills its own slots. A URL with a backlog that answers promptly may earn more
// slots, up to `perDestinationMaxConcurrency` (destination-concurrency.ts), lent only while half
// of `maxConcurrent` is free. A circuit breaker per destination stops requests to an
// endpoint that keeps timing out (breaker.ts). Both are per URL, not per host: tenants may share a webhook host
// (a hosted automation service), and one tenant's hanging or failing path (a half-open probe can
// take the whole attempt time-out) must not hold back the others.
//
// Decision: a delivery whose URL's breaker is open is handed back (rescheduled for when
// the breaker lets a probe through) WITHOUT counting an attempt. No request was made, so the
// receiver saw nothing; counting would burn the 8 attempts of every queued delivery in a few
// cool-downs without one of them being tried. Each delivery still exhausts on its own failures.
//
// A webhook failure never touches the send queue: this module only writes `deliveries`.
import { withParent, type Crypto, type Logger, type Metrics } from '@switchboard/core';
import type { Knex } from 'knex';
import { performAttempt, type AttemptDeps, type AttemptOutcome } from './attempt.ts';
import { retryDelayMs, type RetryTiming } from './backoff.ts';
import { CircuitBreakers } from './breaker.ts';
import type { EgressClient } from './egress.ts';
import { DeliveredWriter } from './delivered-writer.ts';
import { RecentValues } from './recent-values.ts';
import { ResponsiveDestinations } from './responsive-destinations.ts';
import { DestinationConcurrency } from './destination-concurrency.ts';
import type { DeliveryHandOff } from './intake.ts';
import { claimDueDeliveries, recordCutOffAttempt, recordFailure, releaseClaim, type ClaimedDelivery } from './store.ts';

export interface SchedulerOptions {
  /** How often to look for due deliveries when nothing kicks the scheduler. */
  pollIntervalMs: number;
  /** How long a claim is held; must exceed the attempt time-out. */
  leaseMs: number;
  /** Whole attempt: connect + headers + body. A waiting claim with less lease left than this is
   *  handed back rather than attempted, so no attempt can outlive its lease. */
  attemptTimeoutMs: number;
  /** Attempts in flight at once. Generous: a hanging receiver holds its slots for the whole
   *  time-out, and only when hanging URLs fill all of them does every other tenant wait. */
  maxConcurrent: number;
  /** Attempts at once per webhook URL (its base; see perDestinationMaxConcurrency). */
  perDestinationConcurrency: number;
  /** The most a URL may earn by answering promptly with a backlog (destination-concurrency.ts);
   *  at or below perDestinationConcurrency, every URL keeps its base. */
  perDestinationMaxConcurrency: number;
  breakerThreshold: number;
  breakerCooldownMs: number;
  /** Most deliveries claimed by one query. */
  claimBatchSize: number;
}

/** A delivery's destination is its webhook URL: the concurrency cap and the circuit breaker
 *  are kept per URL, so a slow or failing one holds back no other, even on the same host. */
function destinationOf(claim: ClaimedDelivery): string {
  return claim.url ?? '';
}

/** Retries due within this many ms of each other share a wake-up, or within 1/50 of their delay
 *  when that is more (a retry is at most 2 % late, well inside the schedule's ±20 % jitter). */
const WAKE_UP_GRAIN_MS = 10;
/** A retry whose delay is more than this many poll intervals is left to the poll, which is then
 *  at most 2 % late too (and a process restarted meanwhile finds it by polling anyway). */
const POLLS_PER_WAKE_UP_HORIZON = 50;

/** When a retry due in `ms` wakes the scheduler (rounded up to its grain, so wake-ups stay few
 *  however many deliveries fail), or undefined when the poll serves it as well. */
export function wakeUpTime(now: number, ms: number, pollIntervalMs: number): number | undefined {
  if (!(ms < POLLS_PER_WAKE_UP_HORIZON * pollIntervalMs)) return undefined; // NaN included
  // A power of two: delays close to each other share a grain, and so their wake-ups.
  const grain = Math.max(WAKE_UP_GRAIN_MS, 2 ** Math.floor(Math.log2(Math.max(1, ms / 50))));
  return Math.ceil((now + Math.max(0, ms)) / grain) * grain;
}

/** The most of the time the poll's walks may take (see poll), and the longest spacing that gives
 *  them (a database slow for a moment must not keep the poll away for long). */
const POLL_WALK_SHARE = 0.05;
const MAX_POLL_SPACING_MS = 30_000;

/** Claims waiting for a slot, in all destinations, are capped at this many claim batches. */
const WAITING_BATCHES = 4;
/** A claim held longer than this before its attempt starts reads its row again first: a webhook
 *  save or a new secret may have cancelled it meanwhile (a fresh claim's read is its claim's). */
const RECHECK_AFTER_MS = 1000;

export const DEFAULT_SCHEDULER_OPTIONS: SchedulerOptions = {
  pollIntervalMs: 500,
  leaseMs: 60_000,
  attemptTimeoutMs: 15_000,
  maxConcurrent: 256,
  perDestinationConcurrency: 4,
  perDestinationMaxConcurrency: 32,
  breakerThreshold: 5,
  breakerCooldownMs: 30_000,
  claimBatchSize: 64,
};

/** An open breaker never holds a destination back longer than its shortest retry delay, so the
 *  breaker saves slots without changing the retry schedule a client configured. */
function breakerCooldownFor(timing: RetryTiming, configured: number | undefined): number {
  if (configured !== undefined) return configured;
  const shortestRetry = Math.min(...timing.schedule.slice(1).filter((d) => d > 0));
  return Math.min(DEFAULT_SCHEDULER_OPTIONS.breakerCooldownMs, Number.isFinite(shortestRetry) ? shortestRetry : 1);
}

export interface SchedulerDeps {
  db: Knex;
  crypto: Crypto;
  egress: EgressClient;
  log: Logger;
  timing: RetryTiming;
  /** Webhook attempt/exhaustion counters and the open-breaker gauge (optional). */
  metrics?: Metrics;
  /** This dispatcher's replica name, kept with its leases (store.ts releaseLeasesOf); unique
   *  among live dispatchers. */
  leaseOwner: string;
}

export class DeliveryScheduler implements DeliveryHandOff {
  private readonly opts: SchedulerOptions;
  private readonly breakers: CircuitBreakers;
  private readonly inFlight = new Set<Promise<void>>();
  /** Result writes of finished attempts (their slot is already free). */
  private readonly recording = new Set<Promise<void>>();
  private readonly delivered: DeliveredWriter;
  private readonly attemptDeps: AttemptDeps;
  private readonly perDestination = new Map<string, number>();
  private readonly responsive = new ResponsiveDestinations();
  private readonly concurrency: DestinationConcurrency;
  /** Claims waiting for a slot of their destination (at most a claim batch each, see roomFor), so
   *  a finished attempt starts the next one without waiting for a claim round trip. */
  private readonly ready = new Map<string, ClaimedDelivery[]>();
  /** When each claim reached this scheduler, on the local monotonic clock. Its lease, set by the
   *  database's clock (which may be skewed from ours), ends at most leaseMs after that. */
  private readonly receivedAt = new WeakMap<ClaimedDelivery, number>();
  /** Destinations whose last claim took every due row it found: refilling them waits for news
   *  (rows written for them, a retry come due, a kick, the poll) instead of asking the database
   *  again after every attempt. */
  private readonly drained = new Set<string>();
  /** Destinations the next claim is for: finished attempts that ran low, retries come due, rows
   *  the intake wrote. A claim names them rather than walking every destination with open
   *  deliveries (see store.ts), which costs a probe per failing URL however few rows are due. */
  private readonly wanted = new Set<string>();
  /** Whether the next claim walks every destination: news of rows this scheduler cannot place
   *  (the poll, a kick: other replicas, the retry endpoint, leases given back). */
  private walkWanted = false;
  /** Destinations whose attempts finished running low while a claim round was under way: once it
   *  ends, those it did not refill are claimed for (a round names only its own destinations). */
  private readonly refillAfterRound = new Set<string>();
  /** When the last walk began and how long it took, on the local monotonic clock, and whether
   *  one is under way (see poll). */
  private lastWalk = { startedAt: -Infinity, tookMs: 0 };
  private walking = false;
  private timer: NodeJS.Timeout | undefined;
  /** Due times (ms, rounded up to their grain) of retries the poll would serve late, with their
   *  destinations, and the one timer armed for the earliest (see wakeUpIn). */
  private readonly wakeUps = new Map<number, Set<string>>();
  private wakeUpTimer: { timer: NodeJS.Timeout; at: number } | undefined;
  private ticking: Promise<void> | undefined;
  private again = false;
  private stopped = true;

  constructor(
    private readonly deps: SchedulerDeps,
    options: Partial<SchedulerOptions> = {},
  ) {
    this.opts = { ...DEFAULT_SCHEDULER_OPTIONS, ...options, breakerCooldownMs: breakerCooldownFor(deps.timing, options.breakerCooldownMs) };
    // A lease shorter than an attempt would let another replica start the same delivery.
    const { leaseMs, attemptTimeoutMs } = this.opts;
    if (leaseMs <= attemptTimeoutMs) throw new Error(`dispatcher: leaseMs (${leaseMs}) must exceed attemptTimeoutMs (${attemptTimeoutMs})`);
    const { perDestinationConcurrency: base, perDestinationMaxConcurrency: max } = this.opts;
    this.concurrency = new DestinationConcurrency({ base, max: Math.max(base, max) });
    this.breakers = new CircuitBreakers({ threshold: this.opts.breakerThreshold, cooldownMs: this.opts.breakerCooldownMs });
    this.delivered = new DeliveredWriter(deps.db);
    const secrets = new RecentValues((sealed) => deps.crypto.open(sealed));
    this.attemptDeps = { db: deps.db, egress: deps.egress, metrics: deps.metrics, openSecret: (sealed) => secrets.get(sealed) };
    deps.metrics?.trackBreakers(() => this.breakers.openCount());
    deps.metrics?.trackEarnedConcurrency(() => this.concurrency.aboveBaseCount());
  }

  start(): void {
    this.stopped = false;
    this.timer = setInterval(() => this.poll(), this.opts.pollIntervalMs);
    this.timer.unref();
    this.kick();
  }

  /** Look for due deliveries of every destination now: there may be new ones (the poll, rows
   *  written elsewhere). Calls coalesce. */
  kick(): void {
    this.drained.clear();
    this.walkWanted = true;
    this.claimSoon();
  }

  /** The poll walks, unless the last walk was so dear that one now would take more than its share
   *  of the time (a walk probes every destination with open deliveries: 100 ms with 20,000 URLs
   *  that keep failing). What it finds, others' rows, is then found later, never lost. */
  private poll(): void {
    if (this.walking || performance.now() - this.lastWalk.startedAt < this.pollSpacingMs()) return;
    this.kick();
  }

  /** How far apart the poll's walks are: the poll interval, or more when walks are dear. */
  private pollSpacingMs(): number {
    return Math.max(this.opts.pollIntervalMs, Math.min(this.lastWalk.tookMs / POLL_WALK_SHARE, MAX_POLL_SPACING_MS));
  }

  /** Look for due deliveries of these destinations now (rows written for them). Calls coalesce. */
  claimFor(destinations: Iterable<string>): void {
    for (const key of destinations) {
      this.drained.delete(key);
      this.wanted.add(key);
    }
    this.claimSoon();
  }

  /** A retry (or a breaker's probe) gets a wake-up of its own (see wakeUpTime), so it is not late
   *  by up to a poll interval: the schedule keeps its spacing however it compares to the poll. */
  private wakeUpIn(ms: number, destination: string): void {
    const at = wakeUpTime(Date.now(), ms, this.pollSpacingMs());
    if (this.stopped || at === undefined) return;
    const due = this.wakeUps.get(at);
    if (due) due.add(destination);
    else this.wakeUps.set(at, new Set([destination]));
    this.armWakeUp();
  }

  /** One timer, for the earliest due time; when it fires it claims and re-arms for the next. */
  private armWakeUp(): void {
    const next = Math.min(...this.wakeUps.keys());
    if (this.stopped || !Number.isFinite(next) || (this.wakeUpTimer && this.wakeUpTimer.at <= next)) return;
    clearTimeout(this.wakeUpTimer?.timer);
    const timer = setTimeout(() => {
      this.wakeUpTimer = undefined;
      const due: string[] = [];
      for (const [at, destinations] of this.wakeUps) {
        if (at > Date.now()) continue;
        due.push(...destinations);
        this.wakeUps.delete(at);
      }
      this.claimFor(due);
      this.armWakeUp();
    }, next - Date.now() + 1); // +1: the rows are due by the time the claim reads the clock
    timer.unref();
    this.wakeUpTimer = { timer, at: next };
  }

  /** Runs a claim round now, or once more after the one under way. */
  private claimSoon(): void {
    if (this.stopped) return;
    if (this.ticking) {
      this.again = true;
      return;
    }
    this.ticking = this.tick()
      .catch((err) => this.deps.log.warn({ err: String(err) }, 'dispatcher: claiming deliveries failed; will retry'))
      .finally(() => {
        this.ticking = undefined;
        // Refills that waited for this round: it may have named other destinations only.
        for (const key of this.refillAfterRound) {
          if (!this.runningLow(key)) continue;
          this.wanted.add(key);
          this.again = true;
        }
        this.refillAfterRound.clear();
        if (this.again) {
          this.again = false;
          this.claimSoon();
        }
      });
  }

  /** Stops claiming and waits for the attempts under way (each is bounded by its time-out). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    clearTimeout(this.wakeUpTimer?.timer);
    this.wakeUpTimer = undefined;
    this.wakeUps.clear();
    while (this.ticking) await this.ticking;
    if (this.inFlight.size) {
      // Shown at shutdown: a receiver that does not answer holds the stop up to the attempt time-out.
      this.deps.log.info({ attempts: this.inFlight.size, atMostMs: this.opts.attemptTimeoutMs }, 'dispatcher: waiting for the webhook attempts under way to finish');
    }
    await Promise.allSettled([...this.inFlight]);
    await Promise.allSettled([...this.recording]);
    await this.releaseReady();
  }

  /** Hands back claims that were waiting for a slot, so another replica need not wait for their lease. */
  private async releaseReady(): Promise<void> {
    const waiting = [...this.ready.values()].flat();
    this.ready.clear();
    await Promise.allSettled(waiting.map((claim) => releaseClaim(this.deps.db, claim, claim.dueAt)));
  }

  get leaseMs(): number {
    return this.opts.leaseMs;
  }

  get leaseOwner(): string {
    return this.deps.leaseOwner;
  }

  /** How many more deliveries to this destination the intake may hand over now: as many as a
   *  claim would take, none after stop. (Breakers are per URL: an open one hands its deliveries
   *  back in dispatch, without an attempt.) */
  room(destination: string): number {
    if (this.stopped) return 0;
    return Math.max(0, this.roomFor(destination) - this.heldBy(destination));
  }

  /** Claims the intake wrote for this scheduler (leased rows): attempted like its own claims. */
  adopt(claims: ClaimedDelivery[]): void {
    this.received(claims);
    for (const claim of claims) {
      this.dispatch(claim).catch((err) => this.deps.log.warn({ err: String(err), eventId: claim.eventId }, 'dispatcher: a handed-off delivery could not be started; its lease brings it back'));
    }
  }

  private readyCount(): number {
    let n = 0;
    for (const queue of this.ready.values()) n += queue.length;
    return n;
  }

  /** Claims for the wanted destinations, or for every destination when a walk is wanted, until a
   *  claim comes back short of its limit. What is wanted meanwhile waits for the next round. */
  private async tick(): Promise<void> {
    const walk = this.walkWanted;
    const asked = [...this.wanted];
    this.walkWanted = false;
    this.wanted.clear();
    if (!walk && !asked.length) return;
    this.walking = walk;
    try {
      await this.claimUntilShort(walk, asked);
    } catch (err) {
      this.wantAgain(walk, asked); // the next round asks again (the poll walks anyway)
      throw err;
    } finally {
      this.walking = false;
    }
  }

  /** What a round did not finish stays wanted. */
  private wantAgain(walk: boolean, asked: string[]): void {
    if (walk) this.walkWanted = true;
    for (const key of asked) this.wanted.add(key);
  }

  private async claimUntilShort(walk: boolean, asked: string[]): Promise<void> {
    for (;;) {
      const capacity = this.opts.maxConcurrent - this.inFlight.size;
      if (this.stopped) return;
      if (capacity <= 0) return this.wantAgain(walk, asked); // the attempt that frees a slot asks
      const limit = Math.min(capacity, this.opts.claimBatchSize);
      const freeSlots = this.freeRoom();
      const started = performance.now();
      const claims = await claimDueDeliveries(this.deps.db, {
        limit,
        leaseMs: this.opts.leaseMs,
        leaseOwner: this.deps.leaseOwner,
        excludeDestinations: this.saturatedDestinations(),
        // A destination with nothing under way: its concurrency (it has answered nothing lately).
        perDestinationLimit: this.opts.perDestinationConcurrency,
        freeSlots,
        onlyDestinations: walk ? undefined : asked,
      });
      if (walk) this.lastWalk = { startedAt: started, tookMs: performance.now() - started };
      if (claims.length < limit) this.noteDrained(claims, freeSlots, walk ? [...Object.keys(freeSlots), ...asked] : asked);
      this.received(claims);
      for (const claim of claims) await this.dispatch(claim);
      if (claims.length < limit) return;
    }
  }

  /** After a claim that the overall limit did not cut short: a destination it looked at that got
   *  less than its room has no more due rows (as of the claim). That includes the idle
   *  destinations it was for: one whose deliveries all came handed off would otherwise ask after
   *  each one. */
  private noteDrained(claims: ClaimedDelivery[], freeSlots: Record<string, number>, lookedAt: string[]): void {
    const got = new Map<string, number>();
    for (const claim of claims) {
      const key = destinationOf(claim);
      got.set(key, (got.get(key) ?? 0) + 1);
    }
    for (const key of new Set([...lookedAt, ...got.keys()])) {
      const room = freeSlots[key] ?? this.opts.perDestinationConcurrency; // as the claim was for it
      if (room > 0 && (got.get(key) ?? 0) < room) this.drained.add(key);
      else this.drained.delete(key);
    }
  }

  /** A destination holds at most its concurrency in attempts plus, when it answers quickly (see
   *  ResponsiveDestinations), a claim batch ready to go: enough that its slots never wait for a
   *  claim round trip (a commit each) while it has a backlog. Once WAITING_BATCHES claim batches
   *  wait in all, only free slots are claimed. */
  private roomFor(key: string, waiting = this.readyCount()): number {
    const prefetching = waiting < this.opts.claimBatchSize * WAITING_BATCHES && this.responsive.isResponsive(key);
    return this.limitOf(key) + (prefetching ? this.opts.claimBatchSize : 0);
  }

  /** How many attempts this destination may have under way now: what it has earned (see
   *  DestinationConcurrency) while the replica has half its slots free, else its base, so
   *  earned slots take at most about half the replica from other tenants. */
  private limitOf(key: string): number {
    if (this.inFlight.size >= this.opts.maxConcurrent / 2) return this.opts.perDestinationConcurrency;
    return this.concurrency.limitOf(key);
  }

  /** Whether a destination's waiting claims run low while it may have more due rows. */
  private runningLow(key: string): boolean {
    return (this.ready.get(key)?.length ?? 0) <= this.opts.claimBatchSize / 2 && !this.drained.has(key);
  }

  private heldBy(key: string): number {
    return (this.perDestination.get(key) ?? 0) + (this.ready.get(key)?.length ?? 0);
  }

  /** Destinations with attempts under way or waiting. */
  private busyDestinations(): Set<string> {
    return new Set([...this.perDestination.keys(), ...this.ready.keys()]);
  }

  private saturatedDestinations(): string[] {
    const waiting = this.readyCount();
    return [...this.busyDestinations()].filter((key) => this.heldBy(key) >= this.roomFor(key, waiting));
  }

  /** Destinations with attempts under way or waiting → how many more claims they may take now. */
  private freeRoom(): Record<string, number> {
    const free: Record<string, number> = {};
    const waiting = this.readyCount();
    for (const key of this.busyDestinations()) free[key] = Math.max(0, this.roomFor(key, waiting) - this.heldBy(key));
    return free;
  }

  private received(claims: ClaimedDelivery[]): void {
    const now = performance.now();
    for (const claim of claims) this.receivedAt.set(claim, now);
  }

  /** How long ago this scheduler got the claim. */
  private heldFor(claim: ClaimedDelivery): number {
    return performance.now() - (this.receivedAt.get(claim) ?? performance.now());
  }

  /** Starts waiting claims of a destination while it has free slots. One that cannot be started
   *  (the database failed to take it back) is left to its lease, and the next one is tried: else
   *  the rest would wait here with nothing under way to start them. */
  private async startReady(key: string): Promise<void> {
    const queue = this.ready.get(key);
    while (queue?.length && (this.perDestination.get(key) ?? 0) < this.limitOf(key) && !this.stopped) {
      const claim = queue.shift()!;
      await this.dispatch(claim).catch((err) => this.deps.log.warn({ err: String(err), eventId: claim.eventId }, 'dispatcher: a waiting delivery could not be started; its lease brings it back'));
    }
    if (queue && !queue.length && this.ready.get(key) === queue) this.ready.delete(key);
  }

  private waitForSlot(key: string, claim: ClaimedDelivery): void {
    const queue = this.ready.get(key);
    if (queue) queue.push(claim);
    else this.ready.set(key, [claim]);
  }

  /** Starts the attempt of one claim, or hands the claim back when its destination cannot take it. */
  private async dispatch(claim: ClaimedDelivery): Promise<void> {
    const key = destinationOf(claim);
    if ((this.perDestination.get(key) ?? 0) >= this.limitOf(key)) {
      // All slots busy: the claim waits (leased) for the next free one.
      if (this.stopped) await releaseClaim(this.deps.db, claim, claim.dueAt);
      else this.waitForSlot(key, claim);
      return;
    }
    const heldFor = this.heldFor(claim);
    if (this.opts.leaseMs - heldFor < this.opts.attemptTimeoutMs) {
      // Waited too long behind a slow destination: its lease could end mid-attempt and let
      // another replica start the same delivery. Give it back as due; a fresh claim takes it.
      await releaseClaim(this.deps.db, claim, claim.dueAt);
      this.claimFor([key]);
      return;
    }
    const admission = this.breakers.admit(key);
    if (!admission.allowed) {
      const dueAt = Math.max(admission.retryAt, claim.dueAt.getTime());
      await releaseClaim(this.deps.db, claim, new Date(dueAt));
      this.wakeUpIn(dueAt - Date.now(), key);
      return;
    }
    this.perDestination.set(key, (this.perDestination.get(key) ?? 0) + 1);
    // Without its material, the attempt reads it again, and only while the row is still ours.
    const attempted = heldFor > RECHECK_AFTER_MS ? { ...claim, material: undefined } : claim;
    const running = this.attempt(attempted, key).finally(() => {
      const wasFull = this.inFlight.size >= this.opts.maxConcurrent;
      this.inFlight.delete(running);
      const left = (this.perDestination.get(key) ?? 1) - 1;
      if (left > 0) this.perDestination.set(key, left);
      else this.perDestination.delete(key);
      void this.startReady(key).catch((err) => this.deps.log.warn({ err: String(err) }, 'dispatcher: starting a waiting delivery failed'));
      // Claiming after every attempt would fetch a row or two per statement: refill a destination
      // once its waiting claims run low (unless its last claim found no more), after the claim
      // round under way if there is one. At the overall cap, it also runs what the cap held back
      // (rounds that stopped at it keep what they were for wanted, a walk included).
      const runningLow = this.runningLow(key);
      if (wasFull || (runningLow && !this.ticking)) this.claimFor([key]);
      else if (runningLow) this.refillAfterRound.add(key);
    });
    this.inFlight.add(running);
  }

  /** Runs the request; its slot frees when the receiver has answered, while the result is still
   *  being written (the lease keeps the row ours until then, so nobody else attempts it). */
  private async attempt(claim: ClaimedDelivery, key: string): Promise<void> {
    const couldNotRecord = (err: unknown) =>
      // The database failed us mid-attempt: the lease brings the delivery back later.
      this.deps.log.warn({ err: String(err), eventId: claim.eventId }, 'dispatcher: attempt could not be recorded');
    let outcome: AttemptOutcome;
    try {
      outcome = await performAttempt(this.attemptDeps, claim, this.limitOf(key));
    } catch (err) {
      this.breakers.releaseProbe(key);
      couldNotRecord(err);
      return;
    }
    if (outcome.kind === 'gone') this.breakers.releaseProbe(key);
    else if (outcome.kind === 'failed' && outcome.timedOut) this.breakers.recordTimeout(key);
    else this.breakers.recordPromptOutcome(key);
    if (outcome.kind !== 'gone') {
      const { requestMs: tookMs, statusCode } = outcome;
      if (statusCode !== null) this.responsive.answered(key, tookMs);
      // A backlog that more slots would have served: claims waiting while the URL used all it has
      // earned (not while the replica's load held it at its base: answers then say nothing of
      // how it does with more).
      const usedAll = (this.perDestination.get(key) ?? 0) >= this.concurrency.limitOf(key);
      this.concurrency.answered(key, { tookMs, statusCode, backlog: usedAll && (this.ready.get(key)?.length ?? 0) > 0 });
    }
    // In the attempt's trace (not in that of whatever started the claim): its log lines join the
    // trace of the event it delivered, and so do the statements it makes alone (a "delivered"
    // write gathered with others runs in the trace of the first).
    const recording = withParent(outcome.kind === 'gone' ? undefined : outcome.traceparent, () => this.record(claim, outcome))
      .catch(couldNotRecord)
      .finally(() => this.recording.delete(recording));
    this.recording.add(recording);
  }

  private async record(claim: ClaimedDelivery, outcome: AttemptOutcome): Promise<void> {
    if (outcome.kind === 'gone') return;
    const log = this.deps.log;
    if (outcome.kind === 'delivered') {
      const recorded = await this.delivered.record(claim, outcome.statusCode);
      if (!recorded) await recordCutOffAttempt(this.deps.db, claim, outcome.statusCode, null);
      log.debug({ eventId: claim.eventId, statusCode: outcome.statusCode, recorded }, 'webhook delivered');
      return;
    }
    const attemptsMade = claim.attempts + 1;
    const retryInMs = retryDelayMs(this.deps.timing, attemptsMade, outcome.retryAfterMs);
    const recorded = await recordFailure(this.deps.db, claim, { statusCode: outcome.statusCode, error: outcome.error, retryInMs });
    if (!recorded) await recordCutOffAttempt(this.deps.db, claim, outcome.statusCode, outcome.error);
    if (recorded && retryInMs !== undefined) this.wakeUpIn(retryInMs, destinationOf(claim));
    const exhausted = retryInMs === undefined;
    if (exhausted && recorded) this.deps.metrics?.webhookExhausted.inc();
    // A failed attempt is routine (the next one is scheduled); the last one is what an operator
    // acts on (the retry endpoint), so it stands out in the log.
    const fields = { eventId: claim.eventId, instanceId: claim.instanceId, attempt: attemptsMade, error: outcome.error, exhausted, recorded };
    if (exhausted) log.warn(fields, 'webhook delivery exhausted: no attempts left (POST …/events/{eventId}/retry sends it again)');
    else log.info(fields, 'webhook attempt failed');
  }
}
