// What both bus adapters (JetStream and in-process) share: stream limits, defaults, subject
// routing and the RPC errors a requester sees. Keeping them here keeps the two twins identical.
import { RpcError, type StreamName } from './types.ts';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;

export const busDefaults = {
  /** A second publish with the same msgId inside this window is dropped. */
  duplicateWindowMs: 2 * MINUTE,
  /** Send commands older than this are dropped by the stream. Items expire after 24 h by
   *  default; with a longer SEND_EXPIRY_MS the session publishes older queued items again when it
   *  starts consuming and hourly while it consumes (SessionWorker.requeueOldItems). */
  commandsMaxAgeMs: 25 * HOUR,
  /** Recorded events are kept this long for (re)delivery. */
  eventsMaxAgeMs: 7 * 24 * HOUR,
  retryDelayMs: 1000,
  ackWaitMs: 30_000,
  maxAckPending: 1000,
} as const;

/** The stream a publishable subject belongs to, or undefined when it belongs to none. */
export function streamOfSubject(subject: string): StreamName | undefined {
  if (subject.startsWith('cmd.') && subject.length > 4) return 'commands';
  if (subject.startsWith('evt.') && subject.length > 4) return 'events';
  return undefined;
}

/** The subject filter that captures a whole stream. */
export const streamSubjects: Record<StreamName, string> = { commands: 'cmd.>', events: 'evt.>' };

/** NATS subject matching: `*` matches one token, a trailing `>` one or more tokens. */
export function subjectMatches(filter: string, subject: string): boolean {
  const f = filter.split('.');
  const s = subject.split('.');
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '>') return s.length > i;
    if (i >= s.length) return false;
    if (f[i] !== '*' && f[i] !== s[i]) return false;
  }
  return f.length === s.length;
}

const LITERAL_TOKEN = /^[A-Za-z0-9_\-:]+$/;

/** Subjects and durable names end up in NATS protocol lines and API subjects: reject what would
 *  break them. `wildcards` allows `*` tokens and a final `>` (consumer filters, serve subjects). */
export function assertSubject(subject: string, wildcards = false): void {
  const tokens = subject.split('.');
  const ok = tokens.every(
    (t, i) => LITERAL_TOKEN.test(t) || (wildcards && (t === '*' || (t === '>' && i === tokens.length - 1))),
  );
  if (!ok) throw new Error(`invalid subject: ${JSON.stringify(subject)}`);
}

export function assertDurableName(durable: string): void {
  if (!/^[A-Za-z0-9_-]{1,200}$/.test(durable)) throw new Error(`invalid durable name: ${JSON.stringify(durable)}`);
}

export const rpcErrors = {
  notRunning: (subject: string) => new RpcError(409, 'session_not_running', `nothing is serving ${subject}`),
  timeout: (subject: string, timeoutMs: number) =>
    new RpcError(504, 'session_timeout', `no reply on ${subject} within ${timeoutMs} ms`),
  /** A handler failed with something other than an RpcError: its message may hold internals, so it is not passed on. */
  internal: () => new RpcError(500, 'internal', 'the request handler failed'),
  /** Larger than one NATS message may be (the server's max_payload, 1 MiB unless configured). */
  tooLarge: (size: number, maxPayload: number) =>
    new RpcError(413, 'request_too_large', `The request (${size} bytes) is larger than the ${maxPayload} bytes the deployment carries to an instance session; send less.`),
  /** The bus itself could not carry the request (NATS disconnected, for example). */
  unavailable: () => new RpcError(503, 'bus_unavailable', 'the message bus is unavailable'),
};

/** Waits `ms`, or less when `signal` aborts first (resolves either way). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
