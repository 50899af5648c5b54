// Where the inbound → webhook latency goes, hop by hop (BENCH_ONLY=hops; not part of the full run,
// since exporting spans costs every process CPU of its own). Cluster mode with tracing on: every
// process exports its spans to a collector in the benchmark, and each sandbox inbound request is
// one trace through gateway, session and dispatcher. For every span name the offsets from the
// trace's first span are summarised over all traces of a window, so a hop that waits (a queue, a
// pool, a batch) shows as a gap between one span's end and the next one's start.
import { ApiClient } from '../../support/http.ts';
import { startHttpsReceiver } from '../../support/https-receiver.ts';
import { startOtlpCollector, type CollectedSpan, type OtlpCollector } from '../../support/otlp-collector.ts';
import { connectedInstance } from '../api.ts';
import { startBenchCluster, type BenchCluster } from '../targets.ts';
import { driveInbound } from './webhook-latency.ts';

export interface HopFigures {
  /** Service and span name, e.g. "switchboard-session record event". */
  span: string;
  /** Traces of the window that hold this span (a span of a batch belongs to one trace only). */
  traces: number;
  startP50Ms: number;
  startP90Ms: number;
  endP50Ms: number;
  endP90Ms: number;
}

export interface HopWindow {
  ratePerSecond: number;
  traces: number;
  hops: HopFigures[];
}

/** Spans of a trace reach the collector up to the exporters' schedule delay after they end. */
const EXPORT_DELAY_MS = 200;
const INBOUND_ROUTE = '/sandbox/instances/:id/inbound';

/** The pipeline with every process tracing: a warm-up, then one window of `windowMs` per rate. */
export async function measurePipelineHops(rates: number[], windowMs: number, progress: (line: string) => void): Promise<HopWindow[]> {
  const collector = await startOtlpCollector();
  const receiver = await startHttpsReceiver();
  const bench = await startBenchCluster({ dispatchers: 1, env: tracingEnv(collector) }).catch(async (err) => {
    await Promise.all([receiver.close(), collector.close()]);
    throw err;
  });
  try {
    const admin = new ApiClient(bench.cluster.url, bench.cluster.adminKey);
    const inst = await connectedInstance(admin, (id) => bench.cluster.startSession(id), 'bench hops', receiver.url('/hops'), '5511955552222');
    // Warm-up, as in the pipeline scenario: JIT, pools and connections of every process.
    await driveInbound({ url: bench.cluster.url, adminKey: bench.cluster.adminKey, instanceId: inst.id, ratePerSecond: 50, durationMs: 2000 });
    const windows: HopWindow[] = [];
    for (const rate of rates) {
      const w = await measureHops(bench, collector, inst.id, rate, windowMs);
      for (const line of describeHops(w)) progress(line);
      windows.push(w);
    }
    return windows;
  } finally {
    await bench.stop();
    await receiver.close();
    await collector.close();
  }
}

/** The environment that makes every process of the cluster export its spans to the collector. */
function tracingEnv(collector: OtlpCollector): Record<string, string> {
  return { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: collector.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: String(EXPORT_DELAY_MS) };
}

/** One window of inbound messages at `ratePerSecond` for `durationMs`, summarised hop by hop. */
async function measureHops(bench: BenchCluster, collector: OtlpCollector, instanceId: string, ratePerSecond: number, durationMs: number): Promise<HopWindow> {
  collector.spans.length = 0;
  await driveInbound({ url: bench.cluster.url, adminKey: bench.cluster.adminKey, instanceId, ratePerSecond, durationMs });
  // The webhooks of the window's last messages, then their spans' export.
  await new Promise((resolve) => setTimeout(resolve, 2000 + 5 * EXPORT_DELAY_MS));
  const traces = inboundTraces(collector.spans);
  return { ratePerSecond, traces: traces.length, hops: summarise(traces) };
}

/** The traces that begin with a sandbox inbound request, each as its spans. */
function inboundTraces(spans: CollectedSpan[]): CollectedSpan[][] {
  const byTrace = new Map<string, CollectedSpan[]>();
  for (const s of spans) {
    const list = byTrace.get(s.traceId);
    if (list) list.push(s);
    else byTrace.set(s.traceId, [s]);
  }
  return [...byTrace.values()].filter((list) => list.some((s) => s.attributes['http.route'] === INBOUND_ROUTE));
}

function summarise(traces: CollectedSpan[][]): HopFigures[] {
  const offsets = new Map<string, { starts: number[]; ends: number[] }>();
  for (const trace of traces) {
    const t0 = Math.min(...trace.map((s) => s.startMs));
    for (const s of trace) {
      const key = `${s.service} ${s.name}`;
      const o = offsets.get(key) ?? { starts: [], ends: [] };
      o.starts.push(s.startMs - t0);
      o.ends.push(s.endMs - t0);
      offsets.set(key, o);
    }
  }
  return [...offsets]
    .map(([span, o]) => ({ span, traces: o.starts.length, startP50Ms: percentile(o.starts, 50), startP90Ms: percentile(o.starts, 90), endP50Ms: percentile(o.ends, 50), endP90Ms: percentile(o.ends, 90) }))
    .sort((a, b) => a.startP50Ms - b.startP50Ms || a.endP50Ms - b.endP50Ms);
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return Number(sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))].toFixed(1));
}

/** The window as lines of a table: offsets in ms from the trace's first span. */
function describeHops(w: HopWindow): string[] {
  const pad = (n: number) => n.toFixed(1).padStart(7);
  return [
    `${w.ratePerSecond} inbound/s, ${w.traces} traces; ms from the request's arrival: start p50 / p90, end p50 / p90, traces, span`,
    ...w.hops.map((h) => `${pad(h.startP50Ms)} ${pad(h.startP90Ms)} ${pad(h.endP50Ms)} ${pad(h.endP90Ms)} ${String(h.traces).padStart(6)}  ${h.span}`),
  ];
}
