// A write about something that already happened on the network (a send it took, a message it
// handed over) cannot be had again by asking the network: it is retried while the database is
// away, for a while, rather than given up at the first failure.

export interface RetryOptions {
  /** How long to keep trying; a failure after that is thrown. */
  forMs: number;
  /** Which failures are worth another try (default: all). */
  worthRetrying?: (err: unknown) => boolean;
  /** Told of each failure that will be tried again. */
  onRetry: (err: unknown, retryInMs: number) => void;
}

/** Runs `attempt` until it succeeds, pausing 0.1 s, 0.2 s, … up to 5 s between tries. */
export async function retryWhileFailing<T>(attempt: () => Promise<T>, opts: RetryOptions): Promise<T> {
  const giveUpAt = Date.now() + opts.forMs;
  for (let delayMs = 100; ; delayMs = Math.min(delayMs * 2, 5_000)) {
    try {
      return await attempt();
    } catch (err) {
      if (!(opts.worthRetrying?.(err) ?? true) || Date.now() + delayMs > giveUpAt) throw err;
      opts.onRetry(err, delayMs);
      await new Promise((resolve) => setTimeout(resolve, delayMs));
    }
  }
}
