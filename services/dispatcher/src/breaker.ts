// Circuit breakers, one per webhook URL, in memory of one dispatcher replica. After `threshold`
// consecutive failed attempts the breaker opens: no request goes to that URL until
// `cooldownMs` has passed; then exactly one delivery is let through as a probe (half-open). The
// probe's success closes the breaker, its failure opens it for another cool-down.

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

  onSuccess(key: string): void {
    this.states.delete(key);
  }

  onFailure(key: string): void {
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
