// Configuration from the environment (DESIGN §4). Every variable is validated at start; a bad
// one produces one line naming it, and the process exits non-zero.
import { isIP } from 'node:net';
import { natsServers } from './bus/nats-servers.ts';

export interface Config {
  port: number;
  host: string;
  publicBaseUrl: string;
  adminApiKey: string | undefined; // undefined → embedded server generates one in DATA_DIR
  dataDir: string;
  databaseUrl: string | undefined; // undefined → PGlite in DATA_DIR
  natsUrl: string | undefined; // undefined → in-process bus
  natsNamespace: string; // prefix of subjects, streams and buckets, so test runs never collide
  /** On how many servers of a NATS cluster each stream and the media bucket are kept. */
  natsStreamReplicas: number;
  networkDriver: 'baileys' | 'sandbox';
  encryptionKey: Buffer | undefined; // undefined → embedded server generates one in DATA_DIR
  webhookRetrySchedule: number[];
  webhookAllowPrivateTargets: boolean;
  rateLimitPerMinute: number;
  trustProxy: boolean;
  allowedOrigins: string[];
  sendExpiryMs: number;
  pairingCodeIntervalMs: number;
  /** How long an unpaired session shows QR codes before it stops (0: for ever). */
  pairingTimeoutMs: number;
  mediaLinkTtlSeconds: number;
  mediaRetentionMs: number;
  eventRetentionMs: number;
  /** Settled sends and received messages older than this are deleted (0: kept for ever). */
  messageRetentionMs: number;
  sandboxReceiptDelayMs: number;
  /** How long a stopping gateway keeps serving (its readiness 503) before it closes its port. */
  shutdownDelayMs: number;
  logLevel: string;
  instanceId: string | undefined; // cluster-mode session process: the one instance it serves
}

export class ConfigError extends Error {
  constructor(public readonly problems: string[]) {
    super(problems.join('\n'));
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

/** Each process reads its whole environment before it starts anything: every reader runs, and the
 *  problems of those that throw a ConfigError are thrown together, so a failed start names every
 *  bad or missing variable at once rather than one per attempt. */
export function readEnvironment<R extends Record<string, () => unknown>>(readers: R): { [K in keyof R]: ReturnType<R[K]> } {
  const problems: string[] = [];
  const read: Record<string, unknown> = {};
  for (const [name, reader] of Object.entries(readers)) {
    try {
      read[name] = reader();
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      problems.push(...err.problems);
    }
  }
  if (problems.length) throw new ConfigError(problems);
  return read as { [K in keyof R]: ReturnType<R[K]> };
}

/** Throws a ConfigError naming each variable of `required` (name → why it is needed) that is unset or blank. */
export function requireSettings(env: Env, required: Record<string, string>): void {
  const missing = Object.entries(required).filter(([name]) => !env[name]?.trim());
  if (missing.length) throw new ConfigError(missing.map(([name, why]) => `${name}: required ${why}`));
}

const DEFAULT_RETRY_SCHEDULE = '0,5000,300000,1800000,7200000,18000000,36000000,36000000';
/** The longest delay WEBHOOK_RETRY_SCHEDULE may hold. */
const MAX_RETRY_DELAY_MS = 30 * 86_400_000;
/** A DNS name (RFC 1123 labels, and `_`, which container DNS gives service names), as HOST may give one. */
const HOST_NAME = /^(?=.{1,253}\.?$)[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$/i;
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** Reads and validates the configuration; throws ConfigError listing every bad variable. */
export function loadConfig(env: Env = process.env): Config {
  const problems: string[] = [];
  const read = new EnvReader(env, problems);

  const port = read.int('PORT', 8080, 0, 65535);
  const config: Config = {
    port,
    // Whether the name resolves shows only when the port opens (named then too, as HOST/PORT).
    host: read.optional('HOST', (v) => (isIP(v) || HOST_NAME.test(v) ? v : 'must be an IP address or a host name (no scheme or port)')) ?? '0.0.0.0',
    publicBaseUrl: read.url('PUBLIC_BASE_URL', `http://localhost:${port}`).replace(/\/+$/, ''),
    // Sent as a Bearer token: one of blanks or non-ASCII characters could never be presented.
    adminApiKey: read.optional('ADMIN_API_KEY', (v) => (/^[\x21-\x7e]+$/.test(v) ? v : 'must be visible ASCII characters without spaces (it is sent as a Bearer token)')),
    dataDir: read.str('DATA_DIR', './data'),
    databaseUrl: read.optional('DATABASE_URL', (v) =>
      /^postgres(ql)?:\/\//.test(v) && URL.canParse(v) ? v : 'must be a postgres:// or postgresql:// URL',
    ),
    natsUrl: read.optional('NATS_URL', (v) => (isNatsServerList(v) ? v : 'must be a nats:// URL, or several separated by commas')),
    natsNamespace: read.str('NATS_NAMESPACE', '', {
      pattern: /^[A-Za-z0-9_-]*$/,
      words: 'letters, digits, "_" and "-" only',
    }),
    natsStreamReplicas: read.int('NATS_STREAM_REPLICAS', 1, 1, 5), // JetStream's own limit is 5
    networkDriver: read.oneOf('NETWORK_DRIVER', 'baileys', ['baileys', 'sandbox'] as const),
    encryptionKey: read.key('ENCRYPTION_KEY'),
    webhookRetrySchedule: read.schedule('WEBHOOK_RETRY_SCHEDULE', DEFAULT_RETRY_SCHEDULE),
    webhookAllowPrivateTargets: read.bool('WEBHOOK_ALLOW_PRIVATE_TARGETS', false),
    rateLimitPerMinute: read.int('RATE_LIMIT_PER_MINUTE', 300, 1, 1_000_000),
    trustProxy: read.bool('TRUST_PROXY', false),
    allowedOrigins: read.origins('ALLOWED_ORIGINS'),
    sendExpiryMs: read.int('SEND_EXPIRY_MS', 86_400_000, 1, 365 * 86_400_000),
    pairingCodeIntervalMs: read.int('PAIRING_CODE_INTERVAL_MS', 60_000, 0, 86_400_000),
    pairingTimeoutMs: read.int('PAIRING_TIMEOUT_MS', 600_000, 0, MAX_TIMER_MS),
    mediaLinkTtlSeconds: read.int('MEDIA_LINK_TTL_SECONDS', 3600, 1, 30 * 86_400),
    mediaRetentionMs: read.int('MEDIA_RETENTION_MS', 30 * 86_400_000, 1, 3650 * 86_400_000),
    eventRetentionMs: read.int('EVENT_RETENTION_MS', 30 * 86_400_000, 1, 3650 * 86_400_000),
    messageRetentionMs: read.int('MESSAGE_RETENTION_MS', 0, 0, 3650 * 86_400_000),
    sandboxReceiptDelayMs: read.int('SANDBOX_RECEIPT_DELAY_MS', 50, 0, 3_600_000),
    shutdownDelayMs: read.int('SHUTDOWN_DELAY_MS', 0, 0, 120_000),
    logLevel: read.oneOf('LOG_LEVEL', 'info', LOG_LEVELS),
    instanceId: read.optional('INSTANCE_ID', (v) => (/^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$/.test(v) ? v : 'must be an instance id')),
  };
  // Received messages are the record that a message was taken (a redelivery is dropped by it), and
  // sends the record a late echo or receipt is matched to: kept a day at least.
  if (config.messageRetentionMs > 0 && config.messageRetentionMs < 86_400_000) problems.push('MESSAGE_RETENTION_MS: must be 0 (kept) or at least 86400000 (a day)');
  // A queued media send needs its file until the send expires (and the hour between two sweeps).
  config.mediaRetentionMs = Math.max(config.mediaRetentionMs, config.sendExpiryMs + 3_600_000);
  if (problems.length) throw new ConfigError(problems);
  return config;
}

/** The longest delay a Node.js timer takes; a longer one fires after 1 ms, so a tuning variable
 *  above it would turn its loop into a busy one. */
export const MAX_TIMER_MS = 2_147_483_647;

/** Reads environment variables, collecting a problem (named by the variable) for each bad value. */
export class EnvReader {
  constructor(
    private readonly env: Env,
    private readonly problems: string[],
  ) {}

  private raw(name: string): string | undefined {
    const v = this.env[name];
    return v === undefined || v.trim() === '' ? undefined : v.trim();
  }

  private fail<T>(name: string, message: string, fallback: T): T {
    this.problems.push(`${name}: ${message}`);
    return fallback;
  }

  /** `allowed` says in words what `pattern` accepts, for the start-up line. */
  str(name: string, fallback: string, allowed?: { pattern: RegExp; words: string }): string {
    const v = this.raw(name) ?? fallback;
    if (allowed && !allowed.pattern.test(v)) return this.fail(name, `must be ${allowed.words} (got "${v}")`, fallback);
    return v;
  }

  optional(name: string, check: (v: string) => string): string | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    const result = check(v);
    return result === v ? v : this.fail(name, result, undefined);
  }

  int(name: string, fallback: number, min: number, max: number): number {
    const v = this.raw(name);
    if (v === undefined) return fallback;
    const n = Number(v);
    if (!/^-?\d+$/.test(v) || n < min || n > max) return this.fail(name, `must be a whole number from ${min} to ${max} (got "${v}")`, fallback);
    return n;
  }

  bool(name: string, fallback: boolean): boolean {
    const v = this.raw(name)?.toLowerCase();
    if (v === undefined) return fallback;
    if (['true', '1', 'yes'].includes(v)) return true;
    if (['false', '0', 'no'].includes(v)) return false;
    return this.fail(name, `must be true or false (got "${v}")`, fallback);
  }

  oneOf<T extends string>(name: string, fallback: T, values: readonly T[]): T {
    const v = this.raw(name) ?? fallback;
    return values.includes(v as T) ? (v as T) : this.fail(name, `must be one of ${values.join(', ')} (got "${v}")`, fallback);
  }

  /** A base URL the API appends paths to and hands to every tenant in links: http(s), without a
   *  user name or password (never echoed), query or fragment. */
  url(name: string, fallback: string): string {
    const v = this.raw(name) ?? fallback;
    const u = URL.canParse(v) ? new URL(v) : undefined;
    if (!u) return this.fail(name, 'must be an http(s) URL such as https://wa.example.com', fallback);
    if (u.username || u.password) return this.fail(name, 'must not carry a user name or password: every link the API gives out would show it', fallback);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') return this.fail(name, `must be an http(s) URL (got "${v}")`, fallback);
    if (u.search || u.hash || v.includes('?') || v.includes('#')) return this.fail(name, `must have no query or fragment: paths are appended to it (got "${v}")`, fallback);
    return v;
  }

  key(name: string): Buffer | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    // Buffer.from skips characters that are not base64, so check the characters first. Standard or
    // URL-safe base64, padded or not, as earlier versions took; a new key would not read old data.
    const bytes = Buffer.from(v, 'base64');
    if (!/^[A-Za-z0-9+/_-]{43}=?$/.test(v) || bytes.length !== 32) {
      return this.fail(name, 'must be 32 bytes encoded in base64 (a new deployment: openssl rand -base64 32; an existing key must be kept, or its data cannot be read)', undefined);
    }
    return bytes;
  }

  schedule(name: string, fallback: string): number[] {
    const v = this.raw(name) ?? fallback;
    const parts = v.split(',').map((p) => p.trim());
    if (parts.length !== 8 || parts.some((p) => !/^\d+$/.test(p))) {
      return this.fail(name, 'must list 8 comma-separated delays in milliseconds', fallback.split(',').map(Number));
    }
    // A delay must still make a date when added to now: bound it well below that (30 days).
    if (parts.some((p) => Number(p) > MAX_RETRY_DELAY_MS)) {
      return this.fail(name, `each delay must be at most ${MAX_RETRY_DELAY_MS} ms (30 days)`, fallback.split(',').map(Number));
    }
    return parts.map(Number);
  }

  origins(name: string): string[] {
    const v = this.raw(name);
    if (v === undefined) return [];
    const origins: string[] = [];
    for (const part of v.split(',').map((p) => p.trim()).filter(Boolean)) {
      // `new URL('localhost:3000')` parses, with scheme `localhost:` and the opaque origin "null",
      // which would let every `Origin: null` request in instead of the one meant.
      const origin = URL.canParse(part) ? new URL(part) : undefined;
      if (origin && (origin.protocol === 'http:' || origin.protocol === 'https:')) origins.push(origin.origin);
      else this.fail(name, `"${part}" is not an origin such as https://app.example.com (scheme http or https)`, undefined);
    }
    return origins;
  }
}

/** One NATS server or a seed list, each a NATS URL or host:port. */
function isNatsServerList(value: string): boolean {
  const servers = natsServers(value);
  return servers.length > 0 && servers.every((s) => /^(nats|tls|wss?):\/\/\S+$/.test(s) || /^[\w.-]+:\d+$/.test(s));
}
