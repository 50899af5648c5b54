// What this machine charges for waking a process, measured before the scenarios (performance.md,
// section 32). An inbound event crosses about seventeen process boundaries at low rates, each a
// wake-up; on some VMs a wake-up costs twenty times the work around it, and the pipeline and
// isolation scenarios then saturate two cores whatever the code does. Two probes, 100 a second
// each, CPU read from the kernel (getrusage), so the figure is CPU, not wall-clock time:
//   - an empty timer: what one wake-up of an idle Node process costs;
//   - a TCP loopback round trip with a second process: both processes' CPU, a hop's cost.
// Run on its own: node --import tsx test/bench/wake-up-cost.ts
import { fork } from 'node:child_process';
import { connect, createServer } from 'node:net';
import { cpuUsage } from 'node:process';

const RATE = 100;
const WINDOW_MS = 2000;

export interface WakeUpCost {
  /** CPU of one wake-up of an idle process by a timer. */
  timerWakeUpUs: number;
  /** CPU of both processes for one small message there and back over TCP loopback. */
  loopbackRoundTripUs: number;
}

const cpuMicros = (since?: NodeJS.CpuUsage) => {
  const u = cpuUsage(since);
  return u.user + u.system;
};

async function timerWakeUp(): Promise<number> {
  await new Promise((r) => setTimeout(r, 500)); // what loading the module left to compile and collect
  let wakeUps = 0;
  const before = cpuUsage();
  const timer = setInterval(() => wakeUps++, 1000 / RATE);
  await new Promise((r) => setTimeout(r, WINDOW_MS));
  clearInterval(timer);
  return cpuMicros(before) / Math.max(wakeUps, 1);
}

async function loopbackRoundTrip(): Promise<number> {
  const echo = fork(import.meta.filename, ['echo'], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  const ask = <T>(message: string) => new Promise<T>((resolve) => (echo.once('message', resolve), echo.send(message)));
  try {
    const port = await new Promise<number>((resolve, reject) => {
      echo.once('message', (m) => resolve(m as number));
      echo.once('exit', (code) => reject(new Error(`the echo process of the wake-up probe exited (${code})`)));
    });
    const socket = connect(port, '127.0.0.1').setNoDelay(true);
    await new Promise((r) => socket.once('connect', r));
    let answers = 0;
    socket.on('data', () => answers++);
    const echoBefore = await ask<number>('cpu');
    const before = cpuUsage();
    const timer = setInterval(() => socket.write('x'), 1000 / RATE);
    await new Promise((r) => setTimeout(r, WINDOW_MS));
    clearInterval(timer);
    const own = cpuMicros(before);
    const echoCpu = (await ask<number>('cpu')) - echoBefore;
    socket.destroy();
    // The sender's share includes its timer's wake-up, which the round trip replaces in a real hop.
    return (own + echoCpu) / Math.max(answers, 1);
  } finally {
    echo.kill();
  }
}

/** The figures in words, as `make bench` and a run of this file print them. */
export function describeWakeUpCost(cost: WakeUpCost): string {
  return `this machine spends ${cost.timerWakeUpUs.toFixed(0)} µs of CPU on a process's wake-up, ${cost.loopbackRoundTripUs.toFixed(0)} µs on a loopback round trip`;
}

export async function measureWakeUpCost(): Promise<WakeUpCost> {
  return { timerWakeUpUs: await timerWakeUp(), loopbackRoundTripUs: await loopbackRoundTrip() };
}

/** The echo process of the round-trip probe. */
function runEcho(): void {
  const server = createServer((c) => c.setNoDelay(true).on('data', (d) => c.write(d)));
  server.listen(0, '127.0.0.1', () => process.send!((server.address() as { port: number }).port));
  process.on('message', () => process.send!(cpuMicros()));
  process.on('disconnect', () => process.exit(0));
}

if (process.argv[2] === 'echo') runEcho();
else if (import.meta.filename === process.argv[1]) {
  console.log(describeWakeUpCost(await measureWakeUpCost()));
}
