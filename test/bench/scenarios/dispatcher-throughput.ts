// Dispatcher throughput to one healthy receiver, against a bare undici loop that signs and posts
// the same bodies with the same concurrency from its own process (signing-loop.ts), as the
// dispatcher does. Events are recorded and published to NATS first; the loop runs next, then the
// dispatcher starts. Both rates are counted from the arrival that ends the warm-up share (below)
// to the last one, so neither process start-up nor warm-up is part of either figure.
import { createLogger, openBus, openDatabase, OutboxRelay, recordEvent, type Bus } from '@switchboard/core';
import type { Knex } from 'knex';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startHttpsReceiver, TEST_CA_PATH, type HttpsReceiver } from '../../support/https-receiver.ts';
import { ApiClient } from '../../support/http.ts';
import { spawnManaged, waitUntil } from '../../support/cluster.ts';
import { createInstance, setWebhook } from '../api.ts';
import type { BenchCluster } from '../targets.ts';
import type { SigningLoopJob } from '../signing-loop.ts';

export interface DispatcherFigures {
  events: number;
  replicas: number;
  dispatcherPerSecond: number;
  baselinePerSecond: number;
  ratio: number;
}

/** The dispatcher's default per-destination concurrency (scheduler.ts); the loop uses the same. */
export const PER_DESTINATION_CONCURRENCY = Number(process.env.BENCH_DISPATCH_CONCURRENCY ?? 4);
/** Dispatcher replicas (BENCH_DISPATCHERS, default 1; the chart deploys 2). The cap is per replica,
 *  so the loop then posts with as many requests in flight as all replicas together may. */
export const DISPATCHER_REPLICAS = Number(process.env.BENCH_DISPATCHERS ?? 1);
/** Destinations that keep failing (BENCH_FAILING_DESTINATIONS, default 0): one open delivery
 *  each, not due while the scenario runs, for what they cost the claims (performance.md §35). */
const FAILING_DESTINATIONS = Number(process.env.BENCH_FAILING_DESTINATIONS ?? 0);

export async function measureDispatcher(bench: BenchCluster, events: number, progress: (l: string) => void): Promise<DispatcherFigures> {
  const receiver = await startHttpsReceiver();
  const db = openDatabase({ databaseUrl: bench.databaseUrl, dataDir: '/nonexistent' });
  const log = createLogger({ level: 'silent', name: 'bench' });
  const bus = await openBus({ natsUrl: bench.natsUrl, namespace: bench.namespace, log });
  try {
    const admin = new ApiClient(bench.cluster.url, bench.cluster.adminKey);
    const inst = await createInstance(admin, 'bench dispatcher');
    const secret = await setWebhook(admin, inst.id, receiver.url('/dispatch'));
    await recordSentEvents(db, bus, inst.id, events);
    if (FAILING_DESTINATIONS > 0) await recordFailingDestinations(db, (await createInstance(admin, 'bench failing')).id, FAILING_DESTINATIONS);
    // The baseline first, while nothing else runs: after the dispatcher has delivered, it is still
    // writing results, which would slow a loop measured then.
    const bodies = (await db('events').where({ instance_id: inst.id }).orderBy('created_at').select('id', 'body')) as { id: string; body: string }[];
    const baseline = await startHttpsReceiver();
    let baselinePerSecond: number;
    try {
      await signAndPost(baseline, bodies, secret);
      baselinePerSecond = ratePerSecond(baseline, bodies.length);
    } finally {
      await baseline.close();
    }
    progress(`bare undici loop: ${baselinePerSecond.toFixed(0)} posts/s`);

    progress(`${events} events recorded and published; starting ${DISPATCHER_REPLICAS} dispatcher replica(s)`);
    for (let i = 0; i < DISPATCHER_REPLICAS; i++) bench.cluster.startDispatcher();
    await receiver.waitForRequests(events, 300_000);
    const dispatcherPerSecond = ratePerSecond(receiver, events);
    progress(`dispatcher: ${dispatcherPerSecond.toFixed(0)} deliveries/s (${describeGaps(receiver, events)})`);
    const lastArrival = receiver.requests.reduce((latest, r) => Math.max(latest, r.receivedAt), 0);
    // The bench's own events only: the instance may have recorded a connection.update of its own.
    const ours = () => db('deliveries').join('events', 'events.id', 'deliveries.event_id').where({ 'deliveries.instance_id': inst.id, 'events.type': 'message.sent' });
    await waitUntil('deliveries recorded', async () => Number((await ours().where('deliveries.status', 'delivered').count({ n: '*' }).first())!.n) === events, 30_000).catch(async (err) => {
      const statuses = await ours().groupBy('deliveries.status').select('deliveries.status').count({ n: '*' });
      throw new Error(`${err.message}; deliveries by status: ${JSON.stringify(statuses)}; ${receiver.requests.length} requests arrived`);
    });
    // Results are written in batches behind the posts; a long lag would mean the rate above is
    // not one the dispatcher can keep up.
    progress(`every result recorded ${Date.now() - lastArrival} ms after the last arrival`);
    return { events, replicas: DISPATCHER_REPLICAS, dispatcherPerSecond, baselinePerSecond, ratio: dispatcherPerSecond / baselinePerSecond };
  } finally {
    await bus.close();
    await db.destroy();
    await receiver.close();
  }
}

/** Records `count` message.sent events for the instance, 100 to a transaction, and publishes them
 *  to the bus (the dispatcher consumes them from there). */
export async function recordSentEvents(db: Knex, bus: Bus, instanceId: string, count: number): Promise<void> {
  for (let done = 0; done < count; done += 100) {
    await db.transaction(async (trx) => {
      for (let i = done; i < Math.min(count, done + 100); i++) await recordEvent(trx, { instanceId, type: 'message.sent', data: { messageId: `msg_${i}`, messengerId: `3EB0${i}`, phone: '5511900000005', type: 'text' } });
    });
  }
  await new OutboxRelay(db, bus, createLogger({ level: 'silent', name: 'bench' })).flush();
}

/** `count` deliveries to as many URLs, retrying in an hour, as destinations that keep failing leave. */
async function recordFailingDestinations(db: ReturnType<typeof openDatabase>, instanceId: string, count: number): Promise<void> {
  await db.raw(`INSERT INTO events (id, instance_id, type, body) SELECT 'evt_failing_' || g, ?, 'message.sent', '{}' FROM generate_series(1, ?) g`, [instanceId, count]);
  await db.raw(
    `INSERT INTO deliveries (event_id, instance_id, status, url, attempts, next_attempt_at)
     SELECT 'evt_failing_' || g, ?, 'retrying', 'https://failing-' || g || '.example/hook', 3, now() + interval '1 hour' FROM generate_series(1, ?) g`,
    [instanceId, count],
  );
  await db.raw('ANALYZE deliveries');
}

/** Where the time between first and last arrival went: the longest pauses between arrivals. */
function describeGaps(receiver: HttpsReceiver, count: number): string {
  const times = receiver.requests.slice(0, count).map((r) => r.receivedAt).sort((a, b) => a - b);
  const gaps = times.slice(1).map((t, i) => t - times[i]).sort((a, b) => b - a);
  const span = times[times.length - 1] - times[0];
  return `span ${span} ms, longest pauses ${gaps.slice(0, 5).join(', ')} ms, pauses over 20 ms total ${gaps.filter((g) => g > 20).reduce((a, b) => a + b, 0)} ms`;
}

/** Arrivals left out of both rates: JIT warm-up, TLS handshakes and pools filling up. Over a short
 *  run that start dominates — the loop measured 9,000–10,000 posts/s over 5000 bodies and
 *  24,000–44,000 once warm — so both figures are steady-state rates. */
const WARM_UP_SHARE = 0.2;

/** Arrivals per second after the warm-up share, up to the last of `count`. */
function ratePerSecond(receiver: HttpsReceiver, count: number): number {
  const times = receiver.requests.slice(0, count).map((r) => r.receivedAt).sort((a, b) => a - b);
  const from = Math.floor(count * WARM_UP_SHARE);
  const span = Math.max(1, times[count - 1] - times[from]);
  return ((count - 1 - from) / span) * 1000;
}

/** Runs signing-loop.ts over the bodies against the receiver; resolves once all arrived. */
async function signAndPost(receiver: HttpsReceiver, bodies: { id: string; body: string }[], secret: string): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'sb-signing-loop-'));
  const job: SigningLoopJob = { origin: `https://127.0.0.1:${receiver.port}`, caPath: TEST_CA_PATH, secret, concurrency: PER_DESTINATION_CONCURRENCY * DISPATCHER_REPLICAS, bodies };
  writeFileSync(join(dir, 'job.json'), JSON.stringify(job));
  const loop = spawnManaged({ name: 'signing-loop', args: ['--import', 'tsx', 'test/bench/signing-loop.ts'], env: { SIGNING_LOOP_JOB: join(dir, 'job.json') }, supervise: false });
  try {
    await receiver.waitForRequests(bodies.length, 120_000);
  } catch (err) {
    throw new Error(`${String(err)}\n${loop.output()}`);
  } finally {
    await loop.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
