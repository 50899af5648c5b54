// The life cycle every Switchboard process shares: start, then stop once on SIGTERM/SIGINT.
// A bad configuration exits 2 with one line per problem; any other start failure exits 1 with
// one line saying what failed (never a stack trace on the console of an operator).
import { ConfigError } from './config.ts';

/**
 * Runs one step of a start that depends on a configured variable, so its failure names that
 * variable: "DATABASE_URL: cannot connect (connect ECONNREFUSED 127.0.0.1:1)".
 */
export async function startStep<T>(variable: string, what: string, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (err) {
    throw new Error(`${variable}: ${what} (${err instanceof Error ? err.message : String(err)})`);
  }
}

/** How long a stop may take before the process exits anyway. */
export const STOP_TIMEOUT_MS = 20_000;

/** How long a session process may take to stop. It records what the network already handed
 *  over first (a media download, a database that is away for a moment): killed sooner, those
 *  messages and receipts would be lost, as WhatsApp sends none again. Session pods get it, with a
 *  margin, as their grace period, which also delays replacing a session on a lost node. */
export const SESSION_STOP_TIMEOUT_MS = 60_000;

/** What `start` returns: the function that stops what it started, with the time its stop needs
 *  when that is longer than STOP_TIMEOUT_MS (a gateway's drain comes first). */
export type StopService = (() => Promise<void>) & { timeoutMs?: number };

/** A SIGTERM/SIGINT that comes while the service is still starting (a pod stopped during
 *  start-up) stops it as soon as it has started, rather than killing it half-way; either way the
 *  stop's time-out bounds the wait. A second SIGINT (Ctrl-C again) exits at once, leaving what
 *  the stop was still doing as a kill -9 would. A repeated SIGTERM changes nothing: make and
 *  stops of a whole process group deliver it twice at once, and supervisors send SIGKILL later.
 *  `stopTimeoutMs` is the limit of a stop that asks for none (tests shorten it). */
export function runService(name: string, start: () => Promise<StopService>, stopTimeoutMs = STOP_TIMEOUT_MS): void {
  let stop: StopService | undefined;
  let signalled: string | undefined;
  let signalledAt = 0;
  let force: NodeJS.Timeout | undefined;
  /** Exits once the stop has taken its time since the signal (armed again when a stop that
   *  needs longer is known only after the signal, at the end of the start). */
  const limitStop = (signal: string, timeoutMs: number) => {
    clearTimeout(force);
    force = setTimeout(
      () => {
        console.error(`${name}: stop after ${signal} took too long; exiting`);
        process.exit(1);
      },
      Math.max(0, signalledAt + timeoutMs - Date.now()),
    );
    force.unref();
  };
  const stopNow = (signal: string, stopService: StopService) => {
    limitStop(signal, stopService.timeoutMs ?? stopTimeoutMs);
    stopService().then(
      () => process.exit(0),
      (err) => {
        console.error(`${name}: stop after ${signal} failed: ${err instanceof Error ? err.message : String(err)}`);
        process.exit(1);
      },
    );
  };
  const onSignal = (signal: string) => {
    if (signalled && signal === 'SIGINT') {
      console.error(`${name}: ${signal} again; exiting without waiting for the stop`);
      process.exit(1);
    }
    if (signalled) return;
    signalled = signal;
    signalledAt = Date.now();
    if (stop) stopNow(signal, stop);
    else limitStop(signal, stopTimeoutMs); // still starting
  };
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  process.on('SIGINT', () => onSignal('SIGINT'));
  start().then(
    (started) => {
      stop = started;
      if (signalled) stopNow(signalled, started);
    },
    (err) => {
      if (err instanceof ConfigError) {
        for (const line of err.problems) console.error(`configuration error: ${line}`);
        process.exit(2);
      }
      console.error(`${name} failed to start: ${err instanceof Error ? err.message : String(err)}`);
      process.exit(1);
    },
  );
}
