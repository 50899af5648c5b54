// `make bench`: every figure of issue 10 measured in one run on this machine, each next to its
// baseline measured in the same run, the load generator included. Prints progress, then a table,
// and writes the figures as JSON (BENCH_OUT, default test/bench/results/latest.json).
// BENCH_SECONDS shortens or lengthens each measured window (default 8).
import { cpus } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '@switchboard/core';
import { startHttpsReceiver } from '../support/https-receiver.ts';
import { ApiClient } from '../support/http.ts';
import { REPO_ROOT } from '../support/cluster.ts';
import { createInstance, pairOnSandbox, setWebhook } from './api.ts';
import { printTable, writeJson, type Row } from './report.ts';
import { settleMachine } from './settle.ts';
import { measureAccept, prepareAcceptInstances, type AcceptFigures } from './scenarios/accept.ts';
import { measureDispatcher, PER_DESTINATION_CONCURRENCY } from './scenarios/dispatcher-throughput.ts';
import { measureFarReceiver, type FarReceiverFigures } from './scenarios/far-receiver.ts';
import { measureSessionMemory } from './scenarios/memory.ts';
import { collectLatency, driveInbound } from './scenarios/webhook-latency.ts';
import { measurePipelineHops } from './scenarios/pipeline-hops.ts';
import { startBareKoa, startBenchCluster, startDurableFloor, startEmbedded, type ServerUnderTest } from './targets.ts';
import { describeWakeUpCost, measureWakeUpCost, type WakeUpCost } from './wake-up-cost.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const OUT = process.env.BENCH_OUT ?? join(REPO_ROOT, 'test/bench/results/latest.json');
const ACCEPT = { durationMs: SECONDS * 1000, warmupMs: 1500, concurrencies: [32, 64, 128] };
// Events of the dispatcher scenario (BENCH_DISPATCH_EVENTS): enough that both rates are steady-state.
const DISPATCH_EVENTS = Number(process.env.BENCH_DISPATCH_EVENTS ?? 20_000);
// The far-receiver scenario's backlog (BENCH_FAR_EVENTS): 12 s to drain at a fixed 4 per URL.
const FAR_EVENTS = Number(process.env.BENCH_FAR_EVENTS ?? 1000);
const ACCEPT_INSTANCES = 600; // × 1000 queue slots each: nothing consumes them in the bench, and the queue limit must never cap the figure
// BENCH_ONLY=dispatcher,pipeline,accept-cluster,… runs only those scenarios (to compare one change
// before/after); the full table needs every scenario but `hops`, a diagnostic run only on request.
const SCENARIOS = ['baseline', 'floor', 'accept-embedded', 'accept-cluster', 'dispatcher', 'far-receiver', 'pipeline', 'hops'] as const;
// The rates of the `hops` scenario's windows (BENCH_HOPS_RATES, inbound messages a second).
const HOPS_RATES = (process.env.BENCH_HOPS_RATES ?? '20,200').split(',').map(Number);
type Scenario = (typeof SCENARIOS)[number];
const ONLY = process.env.BENCH_ONLY?.split(',').map((s) => s.trim()).filter(Boolean);
const unknown = ONLY?.filter((s) => !SCENARIOS.includes(s as Scenario));
if (unknown?.length) {
  console.error(`BENCH_ONLY: unknown scenario ${unknown.join(', ')}; choose from ${SCENARIOS.join(', ')}`);
  process.exit(2);
}
const wants = (scenario: Scenario) => !ONLY || ONLY.includes(scenario);

const started = Date.now();
function progress(step: string) {
  return (line: string) => console.log(`[${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s] ${step}: ${line}`);
}

/** Each scenario starts on a quiet machine: the previous one's leftovers are not in its window. */
async function settled<T>(scenario: () => Promise<T>): Promise<T> {
  await settleMachine(progress('settle'));
  return scenario();
}

async function acceptOn(name: string, server: { url: string; adminKey: string }, results: Record<string, AcceptFigures>): Promise<void> {
  // Each run gets instances of its own: the first run's queued sends must not fill the second's queues.
  const fresh = () => prepareAcceptInstances(server.url, server.adminKey, ACCEPT_INSTANCES);
  results[`${name}`] = await measureAccept(server.url, await fresh(), false, { ...ACCEPT, progress: progress(`accept ${name}`) });
  results[`${name}+key`] = await measureAccept(server.url, await fresh(), true, { ...ACCEPT, progress: progress(`accept ${name} with Idempotency-Key`) });
}

function acceptOnEmbedded(results: Record<string, AcceptFigures>): Promise<void> {
  return withServer(() => startEmbedded(), (s: ServerUnderTest) => acceptOn('embedded', s, results));
}

function acceptOnCluster(results: Record<string, AcceptFigures>): Promise<void> {
  return withServer(() => startBenchCluster({ nodeArgs: benchNodeArgs() }), (b) => acceptOn('cluster', { url: b.cluster.url, adminKey: b.cluster.adminKey }, results));
}

/** The references the accept figures are compared with: bare Koa, and Koa + a group-commit INSERT. */
function acceptReference(name: 'baseline' | 'floor', accept: Record<string, AcceptFigures>): Promise<void> {
  const [start, label] = name === 'baseline' ? [startBareKoa, 'accept bare Koa baseline'] : [startDurableFloor, 'accept durability floor'];
  return withServer(start, async (s: ServerUnderTest) => {
    accept[name] = await measureAccept(s.url, undefined, false, { ...ACCEPT, progress: progress(label) });
  });
}

async function withServer<T>(start: () => Promise<ServerUnderTest | { stop(): Promise<void> }>, body: (s: any) => Promise<T>): Promise<T> {
  const s = await start();
  try {
    return await body(s);
  } finally {
    await s.stop();
  }
}

async function main(): Promise<void> {
  console.log(`bench: ${cpus().length} CPUs (${cpus()[0]?.model}), node ${process.version}, ${SECONDS} s windows`);
  const wakeUp = await settled(measureWakeUpCost);
  console.log(`bench: ${describeWakeUpCost(wakeUp)} (performance.md, section 32)`);
  const accept: Record<string, AcceptFigures> = {};
  if (ONLY) return runSelected(accept, wakeUp);
  await settled(() => acceptReference('baseline', accept));
  await settled(() => acceptReference('floor', accept));
  await settled(() => acceptOnEmbedded(accept));
  await settled(() => acceptOnCluster(accept));

  const dispatcher = await settled(measureDispatcherScenario);
  const farReceiver = await settled(measureFarReceiverScenario);
  const pipeline = await settled(measurePipeline);
  const rows = tableRows(accept, dispatcher, farReceiver, pipeline, wakeUp);
  console.log('');
  printTable(rows);
  const strip = ({ load, ...rest }: { load: unknown } & Record<string, unknown>) => (void load, rest);
  writeJson(OUT, {
    date: new Date().toISOString(),
    machine: { cpus: cpus().length, model: cpus()[0]?.model, node: process.version, ...wakeUp },
    windowSeconds: SECONDS,
    accept,
    dispatcher,
    farReceiver,
    e2e: strip(pipeline.e2e as any),
    e2eColdStart: strip(pipeline.coldStart as any),
    isolation: { single: strip(pipeline.isolation.single as any), alone: strip(pipeline.isolation.alone as any), withBlackHole: strip(pipeline.isolation.withBlackHole as any), ratio: pipeline.isolation.ratio },
    memory: pipeline.memory,
    table: rows,
  });
  console.log(`\nbench: results written to ${OUT}`);
}

/** BENCH_ONLY: the selected scenarios, printed as JSON (no table, nothing written). */
async function runSelected(accept: Record<string, AcceptFigures>, wakeUp: WakeUpCost): Promise<void> {
  const out: Record<string, unknown> = { machine: wakeUp };
  if (wants('baseline')) await settled(() => acceptReference('baseline', accept));
  if (wants('floor')) await settled(() => acceptReference('floor', accept));
  if (wants('accept-embedded')) await settled(() => acceptOnEmbedded(accept));
  if (wants('accept-cluster')) await settled(() => acceptOnCluster(accept));
  const strip = (a: AcceptFigures) => Object.fromEntries(Object.entries(a).filter(([k]) => k !== 'load' && !k.endsWith('Load')));
  out.accept = Object.fromEntries(Object.entries(accept).map(([k, v]) => [k, strip(v)]));
  if (wants('dispatcher')) out.dispatcher = await settled(measureDispatcherScenario);
  if (wants('far-receiver')) out.farReceiver = await settled(measureFarReceiverScenario);
  if (wants('pipeline')) {
    const p = await settled(measurePipeline);
    const brief = (w: { p50Ms: number; p99Ms: number; arrived: number; sent: number }) => ({ p50Ms: w.p50Ms, p99Ms: w.p99Ms, arrived: w.arrived, sent: w.sent });
    out.pipeline = { e2e: brief(p.e2e), e2eColdStart: brief(p.coldStart), isolation: { single: brief(p.isolation.single), alone: brief(p.isolation.alone), withBlackHole: brief(p.isolation.withBlackHole), ratio: p.isolation.ratio }, memory: p.memory };
  }
  if (wants('hops')) out.hops = await settled(() => measurePipelineHops(HOPS_RATES, SECONDS * 1000, progress('hops')));
  console.log(JSON.stringify(out, null, 2));
}

/** BENCH_NODE_ARGS (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof") is passed to every process of the
 *  accept-cluster and dispatcher scenarios, to profile them. */
function benchNodeArgs(): string[] | undefined {
  return process.env.BENCH_NODE_ARGS?.split(' ').filter(Boolean);
}

function measureDispatcherScenario() {
  const nodeArgs = benchNodeArgs();
  // BENCH_DISPATCH_CONCURRENCY sets the dispatcher's per-destination slots and the loop's alike;
  // the dispatcher keeps them (earns none: destination-concurrency.ts), so both post as many at once.
  const slots = String(PER_DESTINATION_CONCURRENCY);
  const env = { DISPATCHER_PER_DESTINATION_CONCURRENCY: slots, DISPATCHER_PER_DESTINATION_MAX_CONCURRENCY: process.env.BENCH_DISPATCH_MAX_CONCURRENCY ?? slots };
  return withServer(() => startBenchCluster({ dispatchers: 0, nodeArgs, env }), (b) => measureDispatcher(b, DISPATCH_EVENTS, progress('dispatcher')));
}

function measureFarReceiverScenario() {
  return withServer(() => startBenchCluster({ dispatchers: 0 }), (b) => measureFarReceiver(b, FAR_EVENTS, progress('far receiver')));
}

function measurePipeline() {
  return withServer(() => startBenchCluster({ dispatchers: 1, nodeArgs: benchNodeArgs() }), async (b) => {
    const admin = new ApiClient(b.cluster.url, b.cluster.adminKey);
    const healthy = await startHttpsReceiver();
    const otherHealthy = await startHttpsReceiver();
    const blackHole = await startHttpsReceiver(() => ({ blackHole: true }));
    const db = openDatabase({ databaseUrl: b.databaseUrl, dataDir: '/nonexistent' });
    try {
      const a = await createInstance(admin, 'bench healthy');
      const other = await createInstance(admin, 'bench black-holed');
      for (const [inst, receiver, phone] of [[a, healthy, '5511955550000'], [other, blackHole, '5511955551111']] as const) {
        await setWebhook(admin, inst.id, receiver.url('/e2e'));
        b.cluster.startSession(inst.id);
        await pairOnSandbox(admin, inst.id, phone);
      }
      const base = { url: b.cluster.url, adminKey: b.cluster.adminKey, durationMs: SECONDS * 1000 };
      const log = progress('webhook latency');
      const atTargetRate = async () => {
        healthy.requests.length = 0;
        const run = await driveInbound({ ...base, instanceId: a.id, ratePerSecond: 200 });
        return collectLatency(healthy, run.started, run.load);
      };
      // Warm-up: connections of every process on the path, then two windows at the measured rate
      // (section 38: the processes' first seconds at 200/s are several times slower than the rest,
      // JIT and pools growing on a saturated machine). The first is reported on its own.
      await driveInbound({ ...base, instanceId: a.id, ratePerSecond: 50, durationMs: 2000 });
      const coldStart = await atTargetRate();
      log(`first window at 200 events/s after the start: p50 ${coldStart.p50Ms.toFixed(1)} ms, p99 ${coldStart.p99Ms.toFixed(1)} ms (${coldStart.arrived}/${coldStart.sent} arrived)`);
      await atTargetRate();
      const e2e = await atTargetRate();
      log(`200 events/s: p50 ${e2e.p50Ms.toFixed(1)} ms, p99 ${e2e.p99Ms.toFixed(1)} ms (${e2e.arrived}/${e2e.sent} arrived)`);

      const iso = progress('isolation');
      healthy.requests.length = 0;
      const singleRun = await driveInbound({ ...base, instanceId: a.id, ratePerSecond: 100 });
      const single = await collectLatency(healthy, singleRun.started, singleRun.load);
      iso(`healthy instance on its own: p99 ${single.p99Ms.toFixed(1)} ms`);
      // The ratio compares the same two-instance load with the other destination healthy, then
      // black-holed: it measures what the black hole costs, not what doubling the load costs.
      // Windows twice as long: a p99 of 800 deliveries is their 8th slowest, which one pause moves.
      const both = async () => {
        healthy.requests.length = 0;
        const window = { ...base, durationMs: base.durationMs * 2, ratePerSecond: 100 };
        const [run] = await Promise.all([driveInbound({ ...window, instanceId: a.id }), driveInbound({ ...window, instanceId: other.id })]);
        return collectLatency(healthy, run.started, run.load);
      };
      await setWebhook(admin, other.id, otherHealthy.url('/e2e'));
      const alone = await both();
      iso(`healthy next to another healthy destination: p99 ${alone.p99Ms.toFixed(1)} ms`);
      await setWebhook(admin, other.id, blackHole.url('/e2e'));
      const withBlackHole = await both();
      iso(`healthy next to a black-holed destination: p99 ${withBlackHole.p99Ms.toFixed(1)} ms (the black hole held up to ${blackHole.maxInFlight} requests at once, ${blackHole.requests.length} in all)`);

      const memory = await measureSessionMemory(b.cluster, db, progress('memory'));
      return { e2e, coldStart, isolation: { single, alone, withBlackHole, ratio: withBlackHole.p99Ms / Math.max(alone.p99Ms, 0.001) }, memory };
    } finally {
      await db.destroy();
      await healthy.close();
      await otherHealthy.close();
      await blackHole.close();
    }
  });
}

function tableRows(accept: Record<string, AcceptFigures>, dispatcher: Awaited<ReturnType<typeof measureDispatcher>>, far: FarReceiverFigures, p: any, wakeUp: WakeUpCost): Row[] {
  const base = accept.baseline.peakRps;
  const rows: Row[] = [
    { figure: 'machine: CPU per process wake-up / loopback round trip', value: `${wakeUp.timerWakeUpUs.toFixed(0)} / ${wakeUp.loopbackRoundTripUs.toFixed(0)} µs` },{ figure: 'accept: bare Koa 202 (baseline)', value: `${base.toFixed(0)} req/s at ${accept.baseline.peakConcurrency} in flight, p50 ${accept.baseline.peakP50Ms.toFixed(1)} ms, p99 ${accept.baseline.peakP99Ms.toFixed(1)} ms` }];
  const floor = accept.floor;
  rows.push({
    figure: 'accept: Koa + group-commit INSERT (durability floor)',
    value: `${floor.peakRps.toFixed(0)} req/s (${((floor.peakRps / base) * 100).toFixed(1)} %) at ${floor.peakConcurrency} in flight; at 80 %: p50 ${floor.atLoadP50Ms.toFixed(1)} ms, p99 ${floor.atLoadP99Ms.toFixed(1)} ms`,
    baseline: `${base.toFixed(0)} req/s`,
  });
  for (const name of ['embedded', 'embedded+key', 'cluster', 'cluster+key']) {
    const a = accept[name];
    const share = a.peakRps / base;
    const cluster = name.startsWith('cluster');
    rows.push({
      figure: `accept peak: ${name}`,
      value: `${a.peakRps.toFixed(0)} req/s (${(share * 100).toFixed(1)} %) at ${a.peakConcurrency} in flight`,
      baseline: `${base.toFixed(0)} req/s`,
      target: cluster ? '≥ 40 %' : undefined,
      pass: cluster ? share >= 0.4 : undefined,
    });
    rows.push({
      figure: `accept at 80 % of peak: ${name}`,
      value: `p50 ${a.atLoadP50Ms.toFixed(1)} ms, p99 ${a.atLoadP99Ms.toFixed(1)} ms`,
      target: cluster ? 'p99 ≤ 25 ms' : undefined,
      pass: cluster ? a.atLoadP99Ms <= 25 : undefined,
    });
  }
  rows.push({ figure: 'inbound → signed webhook, 200 events/s (third window at that rate)', value: `p50 ${p.e2e.p50Ms.toFixed(1)} ms, p99 ${p.e2e.p99Ms.toFixed(1)} ms (${p.e2e.arrived}/${p.e2e.sent})`, target: 'p99 ≤ 100 ms', pass: p.e2e.p99Ms <= 100 && p.e2e.arrived === p.e2e.sent });
  rows.push({ figure: 'inbound → signed webhook, first window at 200 events/s after the start', value: `p50 ${p.coldStart.p50Ms.toFixed(1)} ms, p99 ${p.coldStart.p99Ms.toFixed(1)} ms (${p.coldStart.arrived}/${p.coldStart.sent})` });
  rows.push({ figure: 'dispatcher → healthy receiver', value: `${dispatcher.dispatcherPerSecond.toFixed(0)} /s (${(dispatcher.ratio * 100).toFixed(0)} %)`, baseline: `${dispatcher.baselinePerSecond.toFixed(0)} /s undici loop`, target: '≥ 60 %', pass: dispatcher.ratio >= 0.6 });
  rows.push({
    figure: `dispatcher → receiver ${far.receiverDelayMs} ms away, backlog of ${far.events}`,
    value: `${far.earned.perSecond.toFixed(0)} /s (${far.ratio.toFixed(1)} ×), at most ${far.earned.maxInFlight} at once`,
    baseline: `${far.fixed.perSecond.toFixed(0)} /s at a fixed ${far.fixed.maxInFlight} per URL`,
  });
  rows.push({ figure: 'isolation: healthy p99 next to a black-holed / a healthy destination', value: `${p.isolation.ratio.toFixed(2)} (${p.isolation.withBlackHole.p99Ms.toFixed(1)} / ${p.isolation.alone.p99Ms.toFixed(1)} ms)`, target: '≤ 1.5', pass: p.isolation.ratio <= 1.5 });
  rows.push({ figure: 'session worker RSS idle', value: `${p.memory.idleRssMiB.toFixed(1)} MiB` });
  rows.push({ figure: 'session worker RSS after 1000 sends', value: `${p.memory.after1000SendsRssMiB.toFixed(1)} MiB` });
  return rows;
}

main().catch((err) => {
  console.error(`bench failed: ${err instanceof Error ? err.stack : String(err)}`);
  process.exit(1);
});
