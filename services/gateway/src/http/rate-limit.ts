// Per-client-IP sliding-window limit (DESIGN §5): no IP gets more than `limit` requests in any
// 60-second window. Each IP keeps the timestamps of its recent requests in a ring buffer that
// grows with use, so a flood of one-off addresses costs little memory. IPv6 clients are counted
// per /64, the block one subscriber gets: rotating addresses inside it does not reset the count.
// One process keeps its windows in memory; the replicas of a cluster share theirs in the database
// (shared-rate-windows.ts), or each would let a client through once more.
import { isIPv4, isIPv6 } from 'node:net';
import type { Context, Next } from 'koa';
import { Problem } from '@switchboard/core';
import { isProbePath } from './probe-paths.ts';

export const WINDOW_MS = 60_000;

class SlidingWindow {
  private stamps = new Float64Array(4);
  private head = 0; // index of the oldest entry
  private size = 0;

  constructor(private readonly limit: number) {}

  /** Records a request at `now` if allowed; returns the remaining count or -1 when refused. */
  take(now: number): number {
    while (this.size > 0 && this.stamps[this.head] <= now - WINDOW_MS) {
      this.head = (this.head + 1) % this.stamps.length;
      this.size--;
    }
    if (this.size >= this.limit) return -1;
    if (this.size === this.stamps.length) this.grow();
    this.stamps[(this.head + this.size) % this.stamps.length] = now;
    this.size++;
    return this.limit - this.size;
  }

  /** Milliseconds until the oldest request leaves the window. */
  resetIn(now: number): number {
    return this.size === 0 ? 0 : Math.max(0, this.stamps[this.head] + WINDOW_MS - now);
  }

  idleSince(now: number): boolean {
    return this.size === 0 || this.stamps[(this.head + this.size - 1) % this.stamps.length] <= now - WINDOW_MS;
  }

  /** Doubles the ring (up to the limit), oldest entry first. */
  private grow(): void {
    const bigger = new Float64Array(Math.min(this.limit, this.stamps.length * 2));
    for (let i = 0; i < this.size; i++) bigger[i] = this.stamps[(this.head + i) % this.stamps.length];
    this.stamps = bigger;
    this.head = 0;
  }
}

/** A request counted against its key's window: the requests left (-1 when refused) and the
 *  milliseconds until the oldest counted request leaves the window. */
export interface RateVerdict {
  remaining: number;
  resetMs: number;
}

/** Where the windows are kept: this process (embedded, one gateway), or the database every
 *  replica of a cluster shares (shared-rate-windows.ts). */
export interface RateWindows {
  take(key: string, now: number): RateVerdict | Promise<RateVerdict>;
}

/** The windows of this process alone, exact to the millisecond. */
export class LocalRateWindows implements RateWindows {
  private readonly windows = new Map<string, SlidingWindow>();
  private lastSweep: number | undefined;

  constructor(private readonly limit: number) {}

  take(key: string, now: number): RateVerdict {
    this.lastSweep ??= now;
    if (now - this.lastSweep > WINDOW_MS) {
      for (const [k, w] of this.windows) if (w.idleSince(now)) this.windows.delete(k);
      this.lastSweep = now;
    }
    let window = this.windows.get(key);
    if (!window) this.windows.set(key, (window = new SlidingWindow(this.limit)));
    return { remaining: window.take(now), resetMs: window.resetIn(now) };
  }
}

export function rateLimiter(opts: { limit: number; trustProxy: boolean; windows?: RateWindows; now?: () => number }) {
  const windows = opts.windows ?? new LocalRateWindows(opts.limit);
  const now = opts.now ?? Date.now;

  return async function limitRate(ctx: Context, next: Next): Promise<void> {
    if (isProbePath(ctx.path)) return next();
    const { remaining, resetMs } = await windows.take(limitKey(clientIp(ctx, opts.trustProxy)), now());
    const resetSeconds = Math.ceil(resetMs / 1000);
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

/**
 * The connecting IP or, behind a trusted proxy, the address that proxy saw: the last
 * X-Forwarded-For entry, the one it appended. Earlier entries are whatever the client sent, so
 * counting by them would let a client pick a fresh address for every request.
 */
export function clientIp(ctx: Context, trustProxy: boolean): string {
  if (trustProxy) {
    const forwarded = forwardedAddress(ctx.get('x-forwarded-for').split(',').at(-1)?.trim() ?? '');
    if (forwarded) return forwarded;
  }
  return ctx.req.socket.remoteAddress ?? 'unknown';
}

/** An X-Forwarded-For entry as the address alone (some proxies add a port, IPv6 in brackets), or
 *  undefined when it is no address: free text would open a fresh window with every request. */
function forwardedAddress(entry: string): string | undefined {
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(entry);
  const candidate = bracketed ? bracketed[1] : /^[\d.]+:\d+$/.test(entry) ? entry.slice(0, entry.lastIndexOf(':')) : entry;
  if (isIPv4(candidate)) return candidate;
  if (isIPv6(candidate)) return candidate.toLowerCase();
  return undefined;
}

/** The key an address is counted under: IPv4 as is (also when IPv4-mapped), IPv6 by its /64. */
export function limitKey(ip: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return mapped[1];
  if (!isIPv6(ip)) return ip;
  const [left, right = ''] = ip.toLowerCase().split('::');
  const head = left ? left.split(':') : [];
  const tail = right ? right.split(':') : [];
  const groups = ip.includes('::') ? [...head, ...Array(8 - head.length - tail.length).fill('0'), ...tail] : head;
  return `${groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, '')).join(':')}::/64`;
}
