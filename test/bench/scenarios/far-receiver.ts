// A backlog for a far receiver: how fast one dispatcher replica drains it when the URL earns
// concurrency (destination-concurrency.ts), against the same replica keeping a fixed 4 per URL,
// measured in the same run. The receiver answers every request after RECEIVER_DELAY_MS, as one
// across a continent would; nothing else in the scenario is far.
import { createLogger, openBus, openDatabase } from '@switchboard/core';
import { startHttpsReceiver } from '../../support/https-receiver.ts';
import { ApiClient } from '../../support/http.ts';
import { createInstance, setWebhook } from '../api.ts';
import type { BenchCluster } from '../targets.ts';
import { recordSentEvents } from './dispatcher-throughput.ts';

export const RECEIVER_DELAY_MS = 50;
const BASE = 4;

export interface FarReceiverRun {
  perSecond: number;
  drainedInMs: number;
  maxInFlight: number;
}

export interface FarReceiverFigures {
  events: number;
  receiverDelayMs: number;
  fixed: FarReceiverRun;
  earned: FarReceiverRun;
  ratio: number;
}

export async function measureFarReceiver(bench: BenchCluster, events: number, progress: (l: string) => void): Promise<FarReceiverFigures> {
  const fixed = await drainBacklog(bench, events, String(BASE));
  progress(`fixed ${BASE} per URL: ${describe(fixed)}`);
  const earned = await drainBacklog(bench, events, undefined);
  progress(`earned (up to the default most): ${describe(earned)}`);
  return { events, receiverDelayMs: RECEIVER_DELAY_MS, fixed, earned, ratio: earned.perSecond / fixed.perSecond };
}

function describe(run: FarReceiverRun): string {
  return `${run.perSecond.toFixed(0)} deliveries/s, drained in ${run.drainedInMs} ms, at most ${run.maxInFlight} at once`;
}

/** Records `events` for a fresh instance whose URL answers after RECEIVER_DELAY_MS, then starts
 *  one dispatcher (the most per URL set to `maxPerUrl`, or its default) and times the drain. */
async function drainBacklog(bench: BenchCluster, events: number, maxPerUrl: string | undefined): Promise<FarReceiverRun> {
  const receiver = await startHttpsReceiver(() => ({ status: 200, delayMs: RECEIVER_DELAY_MS }));
  const db = openDatabase({ databaseUrl: bench.databaseUrl, dataDir: '/nonexistent' });
  const log = createLogger({ level: 'silent', name: 'bench' });
  const bus = await openBus({ natsUrl: bench.natsUrl, namespace: bench.namespace, log });
  const env: Record<string, string> = { DISPATCHER_PER_DESTINATION_CONCURRENCY: String(BASE) };
  if (maxPerUrl) env.DISPATCHER_PER_DESTINATION_MAX_CONCURRENCY = maxPerUrl;
  try {
    const admin = new ApiClient(bench.cluster.url, bench.cluster.adminKey);
    const inst = await createInstance(admin, 'bench far receiver');
    await setWebhook(admin, inst.id, receiver.url('/far'));
    await recordSentEvents(db, bus, inst.id, events);
    const dispatcher = bench.cluster.startDispatcher(env);
    try {
      await receiver.waitForRequests(events, 300_000, (r) => r.path === '/far');
    } finally {
      await dispatcher.stop();
    }
    const times = receiver.requests.filter((r) => r.path === '/far').map((r) => r.receivedAt).sort((a, b) => a - b);
    const drainedInMs = times[events - 1] - times[0];
    return { perSecond: ((events - 1) / Math.max(1, drainedInMs)) * 1000, drainedInMs, maxInFlight: receiver.maxInFlight };
  } finally {
    await bus.close();
    await db.destroy();
    await receiver.close();
  }
}
