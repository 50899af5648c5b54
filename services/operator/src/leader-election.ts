// Lease-based leader election (client-node ships none). The holder renews the Lease every
// renewInterval; others take it over once they have seen no renewal for leaseDuration, measured
// on their own clock (as client-go does): the holder's renewTime comes from another node's clock,
// and comparing it with ours would let a candidate whose clock runs ahead take a live lease. All
// writes carry the resourceVersion read just before, so two candidates racing for an expired
// lease cannot both win: the second write gets 409 Conflict. A leader that cannot renew within
// the renew deadline stops leading (its controller stops) before anyone else may take over —
// also when a request hangs instead of failing (a link that drops packets): each round is cut off
// at the deadline, as client-go bounds its renewal with a context. Starting and stopping the
// controller run beside the rounds, never inside one, so a slow first list cannot delay renewals.
import { V1MicroTime, type CoordinationV1Api, type V1Lease } from '@kubernetes/client-node';
import { isStatus } from './kube-errors.ts';

export interface LeaderElectionOptions {
  api: CoordinationV1Api;
  namespace: string;
  leaseName: string;
  identity: string;
  leaseDurationMs?: number;
  /** A leader that could not renew for this long stops leading; must be below leaseDurationMs. */
  renewDeadlineMs?: number;
  renewIntervalMs?: number;
  retryIntervalMs?: number;
  onStartedLeading: () => void | Promise<void>;
  onStoppedLeading: () => void | Promise<void>;
  onError?: (err: unknown) => void;
  /** Local clock in ms (tests simulate skew between nodes). */
  now?: () => number;
}

export class LeaderElector {
  private timer?: NodeJS.Timeout;
  private leading = false;
  private lastRenew = 0;
  private stopped = false;
  /** The lease record as last read, and when (our clock) it last changed: expiry is judged from that. */
  private observed?: { record: string; at: number };
  /** The round in flight: stop() waits for it, so a lease it just acquired is released too (a
   *  request the round gave up on may still land later; then the lease expires instead). */
  private round: Promise<void> = Promise.resolve();
  /** The leadership callbacks under way: stop() waits for them. */
  private transitions: Promise<void> = Promise.resolve();

  constructor(private readonly o: LeaderElectionOptions) {}

  private now(): number {
    return this.o.now?.() ?? Date.now();
  }

  get isLeader(): boolean {
    return this.leading;
  }

  private get durationMs(): number {
    return this.o.leaseDurationMs ?? 15_000;
  }

  start(): void {
    this.stopped = false;
    this.round = this.tick();
  }

  /** Stops campaigning; a leader releases the lease so a successor need not wait for it to expire. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.round;
    const mayHold = this.leading || this.lastRenew > 0; // also a lease won by the round stop() waited for
    this.setLeading(false);
    await this.transitions;
    if (!mayHold) return;
    try {
      const lease = await this.o.api.readNamespacedLease({ name: this.o.leaseName, namespace: this.o.namespace });
      if (lease.spec?.holderIdentity === this.o.identity) {
        lease.spec.holderIdentity = undefined;
        lease.spec.leaseDurationSeconds = 1;
        lease.spec.renewTime = new V1MicroTime(this.now() - this.durationMs);
        await this.o.api.replaceNamespacedLease({ name: this.o.leaseName, namespace: this.o.namespace, body: lease });
      }
    } catch (err) {
      this.o.onError?.(err);
    }
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    const attemptAt = this.now(); // the renewTime we write is no earlier than this
    const deadline = this.o.renewDeadlineMs ?? (this.durationMs * 2) / 3;
    // A leader's round may last only until its deadline; a candidate's, one deadline.
    const budget = this.leading ? this.lastRenew + deadline - attemptAt : deadline;
    try {
      const held = await withinTime(this.tryAcquireOrRenew(), budget);
      if (held) this.lastRenew = attemptAt;
      this.setLeading(held && !this.stopped);
    } catch (err) {
      this.o.onError?.(err);
      // Cannot reach the API: stop leading at the renew deadline, well before others may take over.
      if (this.leading && (err instanceof RoundTimedOut || this.now() - this.lastRenew >= deadline)) this.setLeading(false);
    }
    if (this.stopped) return;
    // Renewing every 2 s (client-go's retry period) leaves a leader several tries before its deadline.
    const next = this.leading ? (this.o.renewIntervalMs ?? 2_000) : (this.o.retryIntervalMs ?? 2_000);
    this.timer = setTimeout(() => (this.round = this.tick()), next);
  }

  private setLeading(value: boolean): void {
    if (this.leading === value) return;
    this.leading = value;
    // A start waits for the stop before it. A stop never waits for a start still under way (its
    // lists may hang on the same link): a leader that lost its lease stops its controller at once.
    const previous = this.transitions;
    const run = value ? previous.then(() => this.o.onStartedLeading()) : Promise.resolve().then(() => this.o.onStoppedLeading());
    this.transitions = Promise.all([previous, run.catch((err) => this.o.onError?.(err))]).then(() => undefined);
  }

  /** One round: create the lease, renew ours, or take over an expired one. True when we hold it. */
  private async tryAcquireOrRenew(): Promise<boolean> {
    const { api, namespace, leaseName: name, identity } = this.o;
    const now = new V1MicroTime(this.now()); // our clock: another node's may differ, which is why expiry is judged locally
    const seconds = Math.max(1, Math.ceil(this.durationMs / 1000));
    let lease: V1Lease;
    try {
      lease = await api.readNamespacedLease({ name, namespace });
    } catch (err) {
      if (!isStatus(err, 404)) throw err;
      const body: V1Lease = {
        metadata: { name, namespace },
        spec: { holderIdentity: identity, leaseDurationSeconds: seconds, acquireTime: now, renewTime: now, leaseTransitions: 0 },
      };
      return this.write(() => api.createNamespacedLease({ namespace, body }));
    }
    const spec = lease.spec ?? {};
    const ours = spec.holderIdentity === identity;
    const record = `${spec.holderIdentity}@${lease.metadata?.resourceVersion}`; // every renewal writes a new resourceVersion
    if (this.observed?.record !== record) this.observed = { record, at: this.now() };
    const expired = !spec.holderIdentity || this.observed.at + (spec.leaseDurationSeconds ?? seconds) * 1000 < this.now();
    if (!ours && !expired) return false;
    lease.spec = {
      ...spec,
      holderIdentity: identity,
      leaseDurationSeconds: seconds,
      renewTime: now,
      acquireTime: ours ? asMicroTime(spec.acquireTime) : now,
      leaseTransitions: (spec.leaseTransitions ?? 0) + (ours ? 0 : 1),
    };
    return this.write(() => api.replaceNamespacedLease({ name, namespace, body: lease }));
  }

  private async write(call: () => Promise<V1Lease>): Promise<boolean> {
    try {
      await call();
      return true;
    } catch (err) {
      if (isStatus(err, 409)) return false; // another candidate wrote first
      throw err;
    }
  }
}

class RoundTimedOut extends Error {}

/** The round's answer, or a rejection once `ms` have passed. A request cut off this way may
 *  still land later; that is safe, since every write carries the resourceVersion read before it. */
async function withinTime<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RoundTimedOut(`the Lease request got no answer within ${Math.max(0, Math.round(ms))} ms`)), Math.max(0, ms));
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Times read back from the API are strings or Dates; written back they must keep micro-second form. */
function asMicroTime(t: Date | string | undefined): V1MicroTime | undefined {
  return t === undefined ? undefined : new V1MicroTime(new Date(t).getTime());
}
