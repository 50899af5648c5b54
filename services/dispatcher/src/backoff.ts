// When the next attempt happens (DESIGN §4 WEBHOOK_RETRY_SCHEDULE). schedule[n] is the delay
// before attempt n+1: schedule[0] before the first (no jitter), the others with ±20 % jitter so
// that deliveries failing together do not retry together. The schedule's length is the attempt
// limit (8).

export const JITTER = 0.2;
/** A receiver's Retry-After is honoured up to this much, so one header cannot park a delivery for days. */
export const DEFAULT_RETRY_AFTER_CAP_MS = 3600_000;

export interface RetryTiming {
  schedule: readonly number[];
  retryAfterCapMs?: number;
  random?: () => number;
}

/** Delay before the first attempt. */
export function firstAttemptDelayMs(schedule: readonly number[]): number {
  return schedule[0] ?? 0;
}

/**
 * Delay after a failed attempt, given how many attempts have now been made; undefined when the
 * limit is reached (the delivery is exhausted). A Retry-After is a floor: the receiver asked us
 * not to come back sooner, and the schedule may still ask for longer.
 */
export function retryDelayMs(timing: RetryTiming, attemptsMade: number, retryAfterMs?: number): number | undefined {
  if (attemptsMade >= timing.schedule.length) return undefined;
  const base = timing.schedule[attemptsMade];
  const random = timing.random ?? Math.random;
  const jittered = Math.round(base * (1 + (random() * 2 - 1) * JITTER));
  const cap = timing.retryAfterCapMs ?? DEFAULT_RETRY_AFTER_CAP_MS;
  return retryAfterMs === undefined ? jittered : Math.max(jittered, Math.min(retryAfterMs, cap));
}
