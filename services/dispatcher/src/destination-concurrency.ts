// How many attempts one webhook URL may have under way at once on this replica. Each URL starts at
// the configured concurrency (`base`); with a fixed cap a URL gets at most base events per round
// trip of its receiver (40 a second for one 100 ms away), however large its backlog. So a URL that
// has a backlog and keeps accepting deliveries (2xx) about as quickly as it does unloaded earns
// slots, up to `max`: one more per round trip of answers (additive, like TCP's congestion
// avoidance). It gives them back as soon as it shows strain:
// - no answer (time-out, refused or broken connection): back to base at once;
// - 429 or 503 (the receiver says it is overloaded): half its slots (never below base);
// - answers more than twice as slow as its fastest (the receiver queues our requests): one slot
//   less per round trip of them.
// A URL that never answers promptly with a 2xx never earns a slot, one that starts hanging gives
// them all back at its first time-out, and the scheduler starts attempts beyond the base only
// while the replica has half its attempts free (DeliveryScheduler.limitOf), so earned slots
// take at most about half the replica from other tenants. Unused for a while, a URL starts
// again from base.
import { QUICK_ANSWER_MS, RESPONSIVE_FOR_MS } from './responsive-destinations.ts';

export interface AttemptAnswer {
  /** How long the attempt took, request to answer (or failure). */
  tookMs: number;
  /** The receiver's status code; null when it gave none (time-out, connection failure). */
  statusCode: number | null;
  /** Whether more deliveries to this URL were waiting for a slot when the attempt ended, while it
   *  had all it has earned under way (more slots would have been used). */
  backlog: boolean;
}

export interface ConcurrencyBounds {
  base: number;
  max: number;
}

/** Answers within this much of twice the fastest still count as unloaded: on a fast local
 *  receiver a millisecond or two of jitter is no sign of queueing. */
const LATENCY_SLACK_MS = 10;
/** At its base a URL's fastest answer follows slower answers by 1/FASTEST_DRIFT of the gap each:
 *  a receiver that has become slower for good is judged against what it does now. Above the base
 *  it only falls, else answers slowed by our own extra requests would raise it step by step. */
const FASTEST_DRIFT = 16;
/** Forgotten URLs are swept after this many answers (the map only holds URLs that had a backlog). */
const SWEEP_EVERY = 1000;

interface UrlState {
  limit: number;
  /** Prompt answers with a backlog (or answers that queued) since the limit last moved: a round
   *  trip of either, `limit` answers, moves it by one. */
  earned: number;
  queued: number;
  fastestMs: number;
  lastAnswerAt: number;
}

export class DestinationConcurrency {
  private readonly states = new Map<string, UrlState>();
  private answers = 0;

  constructor(
    private readonly bounds: ConcurrencyBounds,
    private readonly now: () => number = Date.now,
  ) {}

  /** The URL's current cap (whole slots). */
  limitOf(key: string): number {
    const state = this.current(key);
    return state ? state.limit : this.bounds.base;
  }

  /** What an attempt to this URL told about its receiver. */
  answered(key: string, answer: AttemptAnswer): void {
    if (++this.answers % SWEEP_EVERY === 0) this.sweep();
    const { base, max } = this.bounds;
    if (max <= base) return; // adaptation is off
    if (answer.statusCode === null) {
      this.states.delete(key);
      return;
    }
    let state = this.current(key);
    if (!state) {
      if (!answer.backlog) return; // nothing to adapt to: the URL keeps its base
      state = { limit: base, earned: 0, queued: 0, fastestMs: answer.tookMs, lastAnswerAt: 0 };
      this.states.set(key, state);
    }
    state.lastAnswerAt = this.now();
    const drift = state.limit === base ? (answer.tookMs - state.fastestMs) / FASTEST_DRIFT : 0;
    state.fastestMs = Math.min(answer.tookMs, state.fastestMs + drift);
    if (answer.statusCode === 429 || answer.statusCode === 503) {
      this.moveTo(state, Math.floor(state.limit / 2));
    } else if (answer.tookMs > 2 * state.fastestMs + LATENCY_SLACK_MS) {
      if (++state.queued >= state.limit) this.moveTo(state, state.limit - 1);
    } else if (answer.backlog && answer.tookMs <= QUICK_ANSWER_MS && answer.statusCode >= 200 && answer.statusCode < 300) {
      if (++state.earned >= state.limit) this.moveTo(state, state.limit + 1);
    }
  }

  private moveTo(state: UrlState, limit: number): void {
    state.limit = Math.min(this.bounds.max, Math.max(this.bounds.base, limit));
    state.earned = 0;
    state.queued = 0;
  }

  /** The URL's state, unless it has not answered for RESPONSIVE_FOR_MS (then it starts afresh). */
  private current(key: string): UrlState | undefined {
    const state = this.states.get(key);
    if (state && this.now() - state.lastAnswerAt > RESPONSIVE_FOR_MS) {
      this.states.delete(key);
      return undefined;
    }
    return state;
  }

  /** URLs above their base right now (a gauge). */
  aboveBaseCount(): number {
    let above = 0;
    for (const key of this.states.keys()) if (this.limitOf(key) > this.bounds.base) above++;
    return above;
  }

  private sweep(): void {
    for (const key of this.states.keys()) this.current(key);
  }
}
