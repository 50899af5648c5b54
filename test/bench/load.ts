// A small in-process HTTP load generator on undici (keep-alive pool). Two shapes:
// - closed loop (`concurrency` workers, each sends its next request when the previous answered):
//   finds the peak requests/s;
// - open loop (`ratePerSecond`): requests start on a fixed schedule whatever the server does, and
//   latency is measured from the *scheduled* start, so a stalled server cannot hide its queueing
//   (no coordinated omission).
import { Pool } from 'undici';
import { LatencyHistogram } from './histogram.ts';

export interface LoadRequest {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  headers?: Record<string, string>;
  body?: string;
}

export interface LoadOptions {
  origin: string;
  /** Builds request number `i` (bodies and Idempotency-Keys can vary per request). */
  request: (i: number) => LoadRequest;
  durationMs: number;
  /** Closed loop: this many requests in flight. */
  concurrency?: number;
  /** Open loop: this many request starts per second. */
  ratePerSecond?: number;
  /** Discard the first ms of results (JIT, pools filling). */
  warmupMs?: number;
  connections?: number;
  /** Reads each answer's body and hands it over with the request's scheduled start (epoch ms). */
  onResponse?: (i: number, status: number, body: string, scheduledAtEpochMs: number) => void;
  /** Closed loop: stop early once this returns true. */
  stopWhen?: () => boolean;
}

export interface LoadResult {
  requests: number;
  /** Requests per second over the measured window (answers of any status). */
  rps: number;
  statuses: Record<string, number>;
  errors: number;
  firstError?: string;
  latency: LatencyHistogram;
  p50Ms: number;
  p99Ms: number;
}

export async function runLoad(opts: LoadOptions): Promise<LoadResult> {
  const connections = opts.connections ?? opts.concurrency ?? 64;
  const pool = new Pool(opts.origin, { connections, pipelining: 1, keepAliveTimeout: 30_000 });
  const latency = new LatencyHistogram();
  const statuses: Record<string, number> = {};
  let errors = 0;
  let firstError: string | undefined;
  let measured = 0;
  let counter = 0;
  const start = performance.now();
  const measureFrom = start + (opts.warmupMs ?? 0);
  const end = measureFrom + opts.durationMs;

  const one = async (scheduledAt: number): Promise<void> => {
    const i = counter++;
    const req = opts.request(i);
    try {
      const res = await pool.request({ method: req.method, path: req.path, headers: req.headers, body: req.body });
      if (opts.onResponse) opts.onResponse(i, res.statusCode, await res.body.text(), performance.timeOrigin + scheduledAt);
      else await res.body.dump();
      if (scheduledAt >= measureFrom) {
        statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
        latency.recordMs(performance.now() - scheduledAt);
        measured++;
      }
    } catch (err) {
      errors++;
      firstError ??= err instanceof Error ? err.message : String(err);
    }
  };

  try {
    if (opts.ratePerSecond) await openLoop(opts.ratePerSecond, end, one);
    else await closedLoop(opts.concurrency ?? 16, end, one, opts.stopWhen);
  } finally {
    await pool.close();
  }
  return { requests: measured, rps: (measured / opts.durationMs) * 1000, statuses, errors, firstError, latency, p50Ms: latency.percentileMs(50), p99Ms: latency.percentileMs(99) };
}

async function closedLoop(concurrency: number, end: number, one: (scheduledAt: number) => Promise<void>, stopWhen = () => false): Promise<void> {
  const worker = async () => {
    while (performance.now() < end && !stopWhen()) await one(performance.now());
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

async function openLoop(ratePerSecond: number, end: number, one: (scheduledAt: number) => Promise<void>): Promise<void> {
  const interval = 1000 / ratePerSecond;
  const inFlight = new Set<Promise<void>>();
  let next = performance.now();
  while (next < end) {
    const now = performance.now();
    // Catch up on every start that is due (timers on a busy loop fire late).
    while (next <= now && next < end) {
      const p = one(next).finally(() => inFlight.delete(p));
      inFlight.add(p);
      next += interval;
    }
    await sleep(Math.max(0, Math.min(next - performance.now(), 5)));
  }
  await Promise.all(inFlight);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
