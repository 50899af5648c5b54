// Circuit breakers, one per webhook URL, in memory of one dispatcher replica. They guard against
// one kind of failure only: a receiver that does not answer within the attempt time-out, since
// each such attempt holds a slot for the whole time-out. After `threshold` consecutive time-outs
// the breaker opens: no request goes to that URL until `cooldownMs` has passed; then exactly one
// delivery is let through as a probe (half-open). A probe that ends in time closes the breaker,
// one that times out opens it for another cool-down. Prompt failures (an HTTP error status, a
// refused connection) cost nothing to wait for, so they never open it: those deliveries keep the
// retry schedule exactly, however many fail at once.

export type Admission = { allowed: true } | { allowed: false; retryAt: number };

interface BreakerState {
  consecutiveFailures: number;
  openUntil: number | null;
  probing: boolean;
}

export interface BreakerOptions {
  threshold: number;
  cooldownMs: number;
  now?: () => number;
}

export class CircuitBreakers {
  private readonly states = new Map<string, BreakerState>();
  private readonly now: () => number;

  constructor(private readonly opts: BreakerOptions) {
    this.now = opts.now ?? Date.now;
  }

  /** May an attempt go to this destination now? When not, `retryAt` is when to ask again. */
  admit(key: string): Admission {
    const state = this.states.get(key);
    if (!state || state.openUntil === null) return { allowed: true };
    const now = this.now();
    if (now < state.openUntil) return { allowed: false, retryAt: state.openUntil };
    if (state.probing) return { allowed: false, retryAt: now + this.opts.cooldownMs };
    state.probing = true;
    return { allowed: true };
  }

  /** The attempt ended before the time-out, whatever its result: the receiver does not hang. */
  recordPromptOutcome(key: string): void {
    this.states.delete(key);
  }

  /** The attempt told nothing about the receiver (it threw before an answer, or its event was
   *  gone): a probe it was frees the way for the next one, and the breaker stays as it was. */
  releaseProbe(key: string): void {
    const state = this.states.get(key);
    if (state) state.probing = false;
  }

  /** The attempt held its slot until the time-out. */
  recordTimeout(key: string): void {
    const state = this.states.get(key) ?? { consecutiveFailures: 0, openUntil: null, probing: false };
    state.consecutiveFailures++;
    if (state.probing || state.consecutiveFailures >= this.opts.threshold) {
      state.openUntil = this.now() + this.opts.cooldownMs;
      state.probing = false;
    }
    this.states.set(key, state);
  }

  /** Destinations whose breaker is open right now (metrics). */
  openCount(): number {
    let open = 0;
    for (const key of this.states.keys()) if (this.isOpen(key)) open++;
    return open;
  }

  isOpen(key: string): boolean {
    const openUntil = this.states.get(key)?.openUntil;
    return openUntil !== null && openUntil !== undefined && this.now() < openUntil;
  }
}
