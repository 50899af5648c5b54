// The webhook egress client (DESIGN §5 "Webhook delivery"): one HTTPS POST per attempt, to public
// addresses only. The address check runs inside undici's connector, on the addresses actually
// dialled, so a hostname that resolves to a private address at delivery time (DNS rebinding) is
// refused just like an IP literal. Redirects are never followed; the response body is read up to
// a cap and discarded.
import { EventEmitter } from 'node:events';
import { isIP } from 'node:net';
import { Agent, buildConnector, errors as undiciErrors, type Dispatcher } from 'undici';
import { isPublicAddress, resolveHostAddresses } from '@switchboard/core';
import { RecentValues } from './recent-values.ts';

export { isPublicAddress };

export type EgressErrorKind = 'invalid_url' | 'refused_address' | 'timeout' | 'connection' | 'tls';

/** A failed attempt that got no HTTP response. `message` never contains the URL or a secret. */
export class EgressError extends Error {
  constructor(
    public readonly kind: EgressErrorKind,
    message: string,
  ) {
    super(message);
    this.name = 'EgressError';
  }
}

export interface EgressOptions {
  /** Tests only: allow loopback/private addresses and any port (HTTPS is still required). */
  allowPrivateTargets?: boolean;
  /** Whole attempt: connect and status within it; a body still arriving then is cut off (DESIGN: 15 s). */
  timeoutMs?: number;
  /** Bytes of the response body read before the rest is discarded. */
  maxResponseBytes?: number;
  /** Host name resolution; replaceable so tests can simulate DNS answers. */
  resolve?: (hostname: string) => Promise<string[]>;
}

export interface EgressResponse {
  statusCode: number;
  /** From a Retry-After header (seconds or HTTP date), when present and valid. */
  retryAfterMs?: number;
}

export interface EgressClient {
  /** POSTs the body; resolves with any HTTP response (3xx included), rejects with EgressError. */
  post(url: string, headers: Record<string, string>, body: string): Promise<EgressResponse>;
  close(): Promise<void>;
}

const DEFAULT_TIMEOUT_MS = 15_000;
const DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024;

/** Checks a URL before any connection: https, and port 443 unless private targets are allowed. */
export function checkWebhookUrl(url: string, allowPrivateTargets: boolean): URL {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new EgressError('invalid_url', 'the webhook URL is not a valid URL');
  }
  if (parsed.protocol !== 'https:') throw new EgressError('invalid_url', 'the webhook URL must use https');
  if (!allowPrivateTargets && parsed.port !== '' && parsed.port !== '443') {
    throw new EgressError('invalid_url', 'the webhook URL must use port 443');
  }
  if (parsed.username || parsed.password) throw new EgressError('invalid_url', 'the webhook URL must not contain credentials');
  return parsed;
}

export function createEgressClient(opts: EgressOptions = {}): EgressClient {
  const allowPrivate = opts.allowPrivateTargets ?? false;
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const maxBytes = opts.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  const resolve = opts.resolve ?? resolveHostAddresses;
  const targets = new RecentValues((url) => checkWebhookUrl(url, allowPrivate));
  const agent = new Agent({
    connect: checkedConnector(resolve, allowPrivate, timeoutMs),
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    // No cap per origin: the scheduler's caps (per URL, and overall) bound the requests in flight.
    // A cap here would be one per host, and a few hanging URLs of a shared host would hold every
    // connection to it until their time-outs, stalling its other URLs (other tenants).
    connections: null,
    pipelining: 1,
    keepAliveTimeout: 10_000,
  });

  return {
    async post(url, headers, body) {
      const target = targets.get(url);
      const deadline = new AttemptDeadline(timeoutMs);
      try {
        let response: Dispatcher.ResponseData;
        try {
          response = await agent.request({ origin: target.origin, path: `${target.pathname}${target.search}`, method: 'POST', headers, body, signal: deadline });
        } catch (err) {
          throw classify(err, deadline.aborted);
        }
        // Reads up to the cap, then drops the connection rather than read a huge body; the deadline
        // cuts a body still arriving, so it cannot hold the slot. The status arrived in time, so
        // neither changes the verdict: a 2xx within the limit is a success (DESIGN §5).
        await response.body.dump({ limit: maxBytes }).catch(() => undefined);
        return { statusCode: response.statusCode, retryAfterMs: parseRetryAfter(response.headers['retry-after']) };
      } finally {
        deadline.clear();
      }
    },
    close: () => agent.close(),
  };
}

/** undici connector that resolves the host itself, refuses non-public addresses, then dials. */
function checkedConnector(resolve: (hostname: string) => Promise<string[]>, allowPrivate: boolean, timeoutMs: number): buildConnector.connector {
  const dial = buildConnector({ timeout: timeoutMs });
  const resolveInTime = boundedResolver(resolve, timeoutMs);
  return (options, callback) => {
    const hostname = options.hostname.replace(/^\[|\]$/g, '');
    const addresses = isIP(hostname) ? Promise.resolve([hostname]) : resolveInTime(hostname);
    addresses.then(
      (list) => {
        if (list.length === 0) return callback(new EgressError('connection', 'the webhook host did not resolve'), null);
        if (!allowPrivate && !list.every(isPublicAddress)) {
          return callback(new EgressError('refused_address', 'the webhook host resolves to a non-public address'), null);
        }
        // Dial the checked address; TLS still verifies the certificate against the host name.
        const servername = isIP(hostname) ? undefined : hostname;
        dial({ ...options, hostname: list[0], servername }, callback);
      },
      (err) => callback(err instanceof EgressError ? err : new EgressError('connection', 'the webhook host name could not be resolved'), null),
    );
  };
}

/**
 * Host name resolution within an attempt's time: the system resolver runs on libuv's few worker
 * threads and may hang for long, which the attempt's deadline alone would not cut short (the
 * connect waits for it). A look-up that takes longer fails the attempt as a time-out, so the
 * host's breaker opens; and a host has one look-up under way at a time, so a hanging one holds one
 * worker thread, not one per attempt, and other tenants' hosts still resolve.
 */
function boundedResolver(resolve: (hostname: string) => Promise<string[]>, timeoutMs: number): (hostname: string) => Promise<string[]> {
  const underWay = new Map<string, Promise<string[]>>();
  return (hostname) => {
    let lookup = underWay.get(hostname);
    if (!lookup) {
      lookup = resolve(hostname).finally(() => underWay.delete(hostname));
      underWay.set(hostname, lookup);
    }
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new EgressError('timeout', 'the webhook host name did not resolve in time')), timeoutMs);
    });
    return Promise.race([lookup, late]).finally(() => clearTimeout(timer));
  };
}

/**
 * The whole attempt's deadline, as the abort signal undici takes, which may be an EventEmitter.
 * Not AbortSignal.timeout(): undici's EventTarget listeners cost ≈ 25 µs of CPU per request
 * (measured; the request itself ≈ 85 µs). On expiry undici aborts the request, or the body being
 * read.
 */
class AttemptDeadline extends EventEmitter {
  aborted = false;
  private readonly timer: NodeJS.Timeout;

  constructor(ms: number) {
    super();
    this.timer = setTimeout(() => this.expire(), ms);
  }

  clear(): void {
    clearTimeout(this.timer);
  }

  private expire(): void {
    this.aborted = true;
    this.emit('abort');
  }
}

function classify(err: unknown, timedOut: boolean): EgressError {
  if (err instanceof EgressError) return err;
  const cause = (err as { cause?: unknown })?.cause;
  if (cause instanceof EgressError) return cause;
  if (
    timedOut ||
    err instanceof undiciErrors.ConnectTimeoutError ||
    err instanceof undiciErrors.HeadersTimeoutError ||
    err instanceof undiciErrors.BodyTimeoutError
  ) {
    return new EgressError('timeout', 'the webhook did not answer in time');
  }
  const code = String((err as { code?: unknown })?.code ?? '');
  if (code.startsWith('ERR_TLS') || /CERT|SSL|TLS/.test(code)) return new EgressError('tls', `TLS handshake failed (${code})`);
  if (code) return new EgressError('connection', `connection failed (${code})`);
  return new EgressError('connection', 'connection failed');
}

const MAX_RETRY_AFTER_MS = 24 * 3600_000;

/** Retry-After as milliseconds from now: delta-seconds or an HTTP date. */
export function parseRetryAfter(value: string | string[] | undefined, nowMs = Date.now()): number | undefined {
  const raw = Array.isArray(value) ? value[0] : value;
  if (raw === undefined) return undefined;
  const text = raw.trim();
  if (/^\d+$/.test(text)) return Math.min(Number(text) * 1000, MAX_RETRY_AFTER_MS);
  const date = Date.parse(text);
  if (Number.isNaN(date)) return undefined;
  return Math.min(Math.max(0, date - nowMs), MAX_RETRY_AFTER_MS);
}
