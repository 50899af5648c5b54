// What one inbound event costs each process, in CPU (performance.md, sections 18–19): the cluster
// of the pipeline scenario (gateway, one session, one dispatcher, PostgreSQL, a private NATS, an
// HTTPS receiver), one paired instance, sandbox inbound messages at fixed rates. For each rate it
// prints the webhook latency and the CPU time each process spent per event, read from /proc over
// the window; a rate of 0 prints what each process spends idle, in % of a core.
//
//   node --import tsx test/bench/event-cost.ts            # RATES=100,200 WARM_MS=3000 WINDOW_S=8
//   RATES=0,50,100,200 WARM_MS=30000 node --import tsx test/bench/event-cost.ts
//
// PostgreSQL's figure is the sum over every `postgres` process of the machine: run it on a
// machine where nothing else uses the database. BENCH_NODE_ARGS reaches the cluster's processes.
import { readFileSync, readdirSync } from 'node:fs';
import { ApiClient } from '../support/http.ts';
import { startHttpsReceiver } from '../support/https-receiver.ts';
import { connectedInstance } from './api.ts';
import { collectLatency, driveInbound } from './scenarios/webhook-latency.ts';
import { startBenchCluster } from './targets.ts';

const CLOCK_TICKS = 100; // USER_HZ, the unit of /proc's CPU times
const RATES = (process.env.RATES ?? '100,200').split(',').map(Number);
const WARM_MS = Number(process.env.WARM_MS ?? 3000);
const WINDOW_S = Number(process.env.WINDOW_S ?? 8);

/** Seconds of CPU (user + system) a process has used. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

/** CPU seconds of every process with this command name (those that end meanwhile drop out). */
function cpuSecondsOfAll(command: string): number {
  let total = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === command) total += cpuSeconds(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return total;
}

/** CPU seconds the whole machine has used (every core, idle and I/O wait excluded). */
function machineCpuSeconds(): number {
  const [user, nice, system, , , irq, softirq] = readFileSync('/proc/stat', 'utf8').split('\n')[0].split(/\s+/).slice(1).map(Number);
  return (user + nice + system + irq + softirq) / CLOCK_TICKS;
}

async function main(): Promise<void> {
  const bench = await startBenchCluster({ dispatchers: 1, nodeArgs: process.env.BENCH_NODE_ARGS?.split(' ').filter(Boolean) });
  const receiver = await startHttpsReceiver();
  try {
    const admin = new ApiClient(bench.cluster.url, bench.cluster.adminKey);
    const instance = await connectedInstance(admin, (id) => bench.cluster.startSession(id), 'event cost', receiver.url('/events'), '5511955550000');
    const load = { url: bench.cluster.url, adminKey: bench.cluster.adminKey, instanceId: instance.id };
    console.log(`warming up: 50 events/s for ${WARM_MS} ms`);
    await driveInbound({ ...load, ratePerSecond: 50, durationMs: WARM_MS });
    await new Promise((r) => setTimeout(r, 1000));

    const meters: Record<string, () => number> = {
      gateway: () => cpuSeconds(bench.cluster.gateway.pid!),
      session: () => cpuSeconds([...bench.cluster.sessions.values()][0].pid!),
      dispatcher: () => cpuSeconds(bench.cluster.dispatchers[0].pid!),
      postgres: () => cpuSecondsOfAll('postgres'),
      nats: () => cpuSecondsOfAll('nats-server'),
      'load + receiver': () => cpuSeconds(process.pid),
      machine: machineCpuSeconds,
    };
    const read = () => Object.fromEntries(Object.entries(meters).map(([name, meter]) => [name, meter()]));
    const spent = (before: Record<string, number>, after: Record<string, number>, per: number, scale: number) =>
      Object.keys(meters).map((name) => `${name} ${(((after[name] - before[name]) * scale) / per).toFixed(2)}`).join(', ');

    for (const rate of RATES) {
      const before = read();
      if (rate === 0) {
        await new Promise((r) => setTimeout(r, WINDOW_S * 1000));
        console.log(`idle, % of a core: ${spent(before, read(), WINDOW_S, 100)}`);
        continue;
      }
      receiver.requests.length = 0;
      const run = await driveInbound({ ...load, ratePerSecond: rate, durationMs: WINDOW_S * 1000 });
      const latency = await collectLatency(receiver, run.started, run.load);
      const events = run.started.size;
      console.log(`${rate} events/s: webhook p50 ${latency.p50Ms.toFixed(1)} ms, p99 ${latency.p99Ms.toFixed(1)} ms (${latency.arrived}/${events})`);
      console.log(`  ms of CPU per event: ${spent(before, read(), events, 1000)}`);
    }
  } finally {
    await receiver.close();
    await bench.stop();
  }
}

main().catch((err) => {
  console.error(`event-cost failed: ${err instanceof Error ? err.stack : String(err)}`);
  process.exit(1);
});
