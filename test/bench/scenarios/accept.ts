// Accept throughput and latency of POST /api/instances/{id}/messages (text), with and without an
// Idempotency-Key: the peak (the best closed loop of several concurrencies: with group commit a
// server may need more requests in flight to reach its peak than a bare handler does) and the
// latency at 80 % of that peak (open loop).
// Requests spread over many instances so the per-instance queue limit (1000) is never the limit.
import { ApiClient } from '../../support/http.ts';
import { createInstance, ordinaryPhone, type BenchInstance } from '../api.ts';
import { runLoad, type LoadRequest } from '../load.ts';

export interface AcceptFigures {
  peakRps: number;
  /** Requests in flight of the closed loop that reached the peak. */
  peakConcurrency: number;
  peakP50Ms: number;
  peakP99Ms: number;
  /** Open loop at 80 % of the peak. */
  atLoadRps: number;
  atLoadP50Ms: number;
  atLoadP99Ms: number;
  non202: number;
  errors: number;
}

export interface AcceptOptions {
  durationMs: number;
  warmupMs: number;
  /** Closed loops tried for the peak (requests in flight). */
  concurrencies: number[];
  progress: (line: string) => void;
}

export async function prepareAcceptInstances(url: string, adminKey: string, count: number): Promise<BenchInstance[]> {
  const admin = new ApiClient(url, adminKey);
  const instances: BenchInstance[] = [];
  for (let i = 0; i < count; i++) instances.push(await createInstance(admin, `bench accept ${i}`));
  return instances;
}

export async function measureAccept(url: string, instances: BenchInstance[] | undefined, withKey: boolean, o: AcceptOptions): Promise<AcceptFigures> {
  const run = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  const request = (i: number): LoadRequest => {
    const inst = instances?.[i % instances.length] ?? { id: 'bare', token: 'bare' };
    const headers: Record<string, string> = { 'content-type': 'application/json', authorization: `Bearer ${inst.token}` };
    if (withKey) headers['idempotency-key'] = `bench-${run}-${i}`;
    return { method: 'POST', path: `/api/instances/${inst.id}/messages`, headers, body: JSON.stringify({ phone: ordinaryPhone(i), type: 'text', text: `bench message ${i}` }) };
  };
  let peak: Awaited<ReturnType<typeof runLoad>> | undefined;
  let peakConcurrency = 0;
  for (const concurrency of o.concurrencies) {
    const loop = await runLoad({ origin: url, request: (i) => request(i + concurrency * 1_000_000), durationMs: o.durationMs, warmupMs: o.warmupMs, concurrency });
    o.progress(`${concurrency} in flight: ${loop.rps.toFixed(0)} req/s, p50 ${loop.p50Ms.toFixed(1)} ms, p99 ${loop.p99Ms.toFixed(1)} ms ${JSON.stringify(loop.statuses)}`);
    if (!peak || loop.rps > peak.rps) [peak, peakConcurrency] = [loop, concurrency];
  }
  if (!peak) throw new Error('measureAccept: no concurrency given');
  const rate = Math.max(1, Math.floor(peak.rps * 0.8));
  const atLoad = await runLoad({ origin: url, request: (i) => request(i + 1_000_000_000), durationMs: o.durationMs, warmupMs: o.warmupMs, ratePerSecond: rate, connections: Math.max(...o.concurrencies) * 2 });
  o.progress(`at 80 % (${rate} req/s): ${atLoad.rps.toFixed(0)} req/s, p50 ${atLoad.p50Ms.toFixed(1)} ms, p99 ${atLoad.p99Ms.toFixed(1)} ms ${JSON.stringify(atLoad.statuses)}`);
  const non202 = [peak, atLoad].reduce((n, r) => n + Object.entries(r.statuses).filter(([s]) => s !== '202').reduce((a, [, c]) => a + c, 0), 0);
  return {
    peakRps: peak.rps,
    peakConcurrency,
    peakP50Ms: peak.p50Ms,
    peakP99Ms: peak.p99Ms,
    atLoadRps: atLoad.rps,
    atLoadP50Ms: atLoad.p50Ms,
    atLoadP99Ms: atLoad.p99Ms,
    non202,
    errors: peak.errors + atLoad.errors,
  };
}
