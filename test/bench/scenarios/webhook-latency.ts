// End-to-end latency: sandbox inbound message (POST /sandbox/instances/{id}/inbound) → session →
// event row + outbox → NATS → dispatcher → signed POST arriving at a local HTTPS receiver.
// Latency is counted from the request's scheduled start (open loop) to the webhook's arrival.
import type { HttpsReceiver } from '../../support/https-receiver.ts';
import { LatencyHistogram } from '../histogram.ts';
import { runLoad, type LoadResult } from '../load.ts';

export interface InboundLoad {
  url: string;
  adminKey: string;
  instanceId: string;
  ratePerSecond: number;
  durationMs: number;
}

export interface WebhookLatency {
  sent: number;
  arrived: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  load: LoadResult;
}

/** Drives inbound messages; resolves with each network messageId and its scheduled start (epoch ms). */
export async function driveInbound(o: InboundLoad): Promise<{ started: Map<string, number>; load: LoadResult }> {
  const started = new Map<string, number>();
  const load = await runLoad({
    origin: o.url,
    ratePerSecond: o.ratePerSecond,
    durationMs: o.durationMs,
    connections: 64,
    request: (i) => ({
      method: 'POST',
      path: `/sandbox/instances/${o.instanceId}/inbound`,
      headers: { authorization: `Bearer ${o.adminKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ from: '5511977770000', type: 'text', text: `latency probe ${i}` }),
    }),
    onResponse: (_i, status, body, scheduledAt) => {
      if (status === 200) started.set(JSON.parse(body).messageId, scheduledAt);
    },
  });
  return { started, load };
}

/** Waits (up to waitMs) for the webhooks of every started message and computes the latencies. */
export async function collectLatency(receiver: HttpsReceiver, started: Map<string, number>, load: LoadResult, waitMs = 30_000): Promise<WebhookLatency> {
  const arrivedAt = new Map<string, number>();
  const scan = () => {
    for (const r of receiver.requests) {
      const event = JSON.parse(r.rawBody.toString('utf8'));
      const id = event?.data?.messageId;
      if (event.type === 'message.received' && started.has(id) && !arrivedAt.has(id)) arrivedAt.set(id, r.receivedAt);
    }
    return arrivedAt.size >= started.size;
  };
  const deadline = Date.now() + waitMs;
  while (!scan() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  const h = new LatencyHistogram();
  for (const [id, at] of arrivedAt) h.recordMs(at - started.get(id)!);
  // A webhook that never came counts as the whole wait: it must not improve the percentiles.
  for (let i = arrivedAt.size; i < started.size; i++) h.recordMs(waitMs);
  return { sent: started.size, arrived: arrivedAt.size, p50Ms: h.percentileMs(50), p99Ms: h.percentileMs(99), maxMs: h.maxMs(), load };
}
