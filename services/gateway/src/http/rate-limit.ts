// Per-client-IP sliding-window limit (DESIGN §5): no IP gets more than `limit` requests in any
// 60-second window. Each IP keeps the timestamps of its recent requests in a ring buffer.
import type { Context, Next } from 'koa';
import { Problem } from '@switchboard/core';
import { PROBE_PATHS } from './probe-paths.ts';

const WINDOW_MS = 60_000;

class SlidingWindow {
  private readonly stamps: Float64Array;
  private head = 0; // index of the oldest entry
  private size = 0;

  constructor(private readonly limit: number) {
    this.stamps = new Float64Array(limit);
  }

  /** Records a request at `now` if allowed; returns the remaining count or -1 when refused. */
  take(now: number): number {
    while (this.size > 0 && this.stamps[this.head] <= now - WINDOW_MS) {
      this.head = (this.head + 1) % this.limit;
      this.size--;
    }
    if (this.size >= this.limit) return -1;
    this.stamps[(this.head + this.size) % this.limit] = now;
    this.size++;
    return this.limit - this.size;
  }

  /** Milliseconds until the oldest request leaves the window. */
  resetIn(now: number): number {
    return this.size === 0 ? 0 : Math.max(0, this.stamps[this.head] + WINDOW_MS - now);
  }

  idleSince(now: number): boolean {
    return this.size === 0 || this.stamps[(this.head + this.size - 1) % this.limit] <= now - WINDOW_MS;
  }
}

export function rateLimiter(opts: { limit: number; trustProxy: boolean; now?: () => number }) {
  const windows = new Map<string, SlidingWindow>();
  const now = opts.now ?? Date.now;
  let lastSweep = now();

  return async function limitRate(ctx: Context, next: Next): Promise<void> {
    if (PROBE_PATHS.has(ctx.path)) return next();
    const t = now();
    if (t - lastSweep > WINDOW_MS) {
      for (const [ip, w] of windows) if (w.idleSince(t)) windows.delete(ip);
      lastSweep = t;
    }
    const ip = clientIp(ctx, opts.trustProxy);
    let window = windows.get(ip);
    if (!window) windows.set(ip, (window = new SlidingWindow(opts.limit)));
    const remaining = window.take(t);
    const resetSeconds = Math.ceil(window.resetIn(t) / 1000);
    ctx.set('RateLimit-Limit', String(opts.limit));
    ctx.set('RateLimit-Remaining', String(Math.max(0, remaining)));
    ctx.set('RateLimit-Reset', String(resetSeconds));
    if (remaining < 0) {
      throw new Problem(429, 'rate_limited', `More than ${opts.limit} requests in 60 seconds from this address; retry in ${resetSeconds} s.`, undefined, {
        'Retry-After': String(Math.max(1, resetSeconds)),
      });
    }
    return next();
  };
}

/** The connecting IP, or the first X-Forwarded-For hop when a trusted proxy is in front. */
export function clientIp(ctx: Context, trustProxy: boolean): string {
  if (trustProxy) {
    const forwarded = ctx.get('x-forwarded-for').split(',')[0]?.trim();
    if (forwarded) return forwarded;
  }
  return ctx.req.socket.remoteAddress ?? 'unknown';
}
