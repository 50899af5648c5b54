// runService: the stop's time limit, counted from the signal, is the one the started service asks
// for, also when the signal came while it was still starting (a pod stopped during start-up).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const SERVICE_MAIN = fileURLToPath(new URL('../src/service-main.ts', import.meta.url));
const TELEMETRY = fileURLToPath(new URL('../src/telemetry/index.ts', import.meta.url));

/** A service that says "starting", starts in `startMs`, then says "started"; its stop takes
 *  `stopMs` and asks for `timeoutMs` (a stop asking for none is limited to `defaultTimeoutMs`). */
function serviceScript(startMs: number, stopMs: number, timeoutMs: number, defaultTimeoutMs?: number): string {
  return `
    import { runService } from ${JSON.stringify(SERVICE_MAIN)};
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    runService('probe', async () => {
      console.log('starting');
      await sleep(${startMs});
      console.log('started');
      return Object.assign(async () => sleep(${stopMs}), { timeoutMs: ${timeoutMs} });
    }${defaultTimeoutMs === undefined ? '' : `, ${defaultTimeoutMs}`});
    setInterval(() => undefined, 1000); // a running service keeps its process alive`;
}

/** Runs the script and sends SIGTERM once it printed `signalAt` (then `again` too, 200 ms later);
 *  resolves with its exit code and stderr. */
function runAndSignal(script: string, signalAt: 'starting' | 'started', again?: NodeJS.Signals, env: NodeJS.ProcessEnv = process.env): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'], env });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    child.stdout!.on('data', (d: Buffer) => {
      if (!d.toString('utf8').includes(signalAt)) return;
      child.kill('SIGTERM');
      if (again) setTimeout(() => child.kill(again), 200);
    });
    child.on('exit', (code) => resolve({ code, stderr }));
  });
}

describe('runService', function () {
  this.timeout(40_000);

  it('gives a stop signalled during start-up the time the service asks for, not the default', async () => {
    // The default limit is shortened to 1 s: the stop takes 2 s of the 4 s it asks for.
    const run = await runAndSignal(serviceScript(500, 2_000, 4_000, 1_000), 'starting');
    assert.equal(run.code, 0, run.stderr);
  });

  it('exits 1 when a stop takes longer than the time it asked for', async () => {
    const run = await runAndSignal(serviceScript(0, 5_000, 1_000), 'started');
    assert.equal(run.code, 1);
    assert.match(run.stderr, /probe: stop after SIGTERM took too long; exiting/);
  });

  it('exits at once on a SIGINT during the stop (Ctrl-C again), without waiting for it', async () => {
    // The stop would take a minute, longer than this test may.
    const run = await runAndSignal(serviceScript(0, 60_000, 60_000), 'started', 'SIGINT');
    assert.equal(run.code, 1);
    assert.match(run.stderr, /probe: SIGINT again; exiting without waiting for the stop/);
  });

  it('stops with exit 0 when the trace collector is away, saying which variable to check', async () => {
    const script = `
      import { runService } from ${JSON.stringify(SERVICE_MAIN)};
      import { startTelemetry } from ${JSON.stringify(TELEMETRY)};
      import { trace } from '@opentelemetry/api';
      runService('probe', async () => {
        const telemetry = await startTelemetry({ serviceName: 'probe', autoInstrument: false });
        trace.getTracer('probe').startSpan('work').end(); // waits for export when the stop comes
        console.log('started');
        return Object.assign(() => telemetry.shutdown(), { timeoutMs: 20_000 });
      });
      setInterval(() => undefined, 1000);`;
    const run = await runAndSignal(script, 'started', undefined, { ...process.env, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_TIMEOUT: '1000' });
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /^probe: the last traces could not be exported \(.+\); check OTEL_EXPORTER_OTLP_ENDPOINT/m);
  });

  it('finishes the stop when SIGTERM comes twice (make forwards it to a process group that got it too)', async () => {
    const run = await runAndSignal(serviceScript(0, 1_000, 20_000), 'started', 'SIGTERM');
    assert.equal(run.code, 0, run.stderr);
  });
});
