// Structured JSON logs (pino). Secrets are redacted by path; code must also never put a secret
// in a message string. As a second line of defence every line is scrubbed of anything shaped like
// one of our secrets (tokens and keys by their prefixes, webhook secrets, signatures, bearer
// credentials) before it is written. Lines logged inside a span carry its trace_id/span_id.
import { pino, type Logger as PinoLogger } from 'pino';
import { activeTraceIds } from './telemetry/spans.ts';

export type Logger = PinoLogger;

/** Field names whose values are secrets, wherever they appear (top level or one/two levels down). */
const SECRET_FIELDS = [
  'authorization',
  'cookie',
  'token',
  'apiToken',
  'key',
  'adminKey',
  'apiKey',
  'encryptionKey',
  'secret',
  'webhookSecret',
  'code',
  'pairingCode',
  'password',
  'signature',
];

export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'headers.cookie',
  'headers["x-service-signature"]',
  ...SECRET_FIELDS,
  ...SECRET_FIELDS.map((f) => `*.${f}`),
  ...SECRET_FIELDS.map((f) => `*.*.${f}`),
];

/** Patterns of our own credentials: instance tokens (sbi_), integration keys (sbk_), the admin
 *  key (sba_), webhook secrets (whsec_), media-link signatures. */
const CREDENTIAL_PATTERNS: [RegExp, string][] = [
  [/\b(sb[aik]|whsec)_[A-Za-z0-9_-]{8,}/g, '$1_[redacted]'],
  [/([?&]signature=)[0-9a-fA-F]+/g, '$1[redacted]'],
];

/** ... and, in logs, webhook signatures and Bearer credentials of any shape. */
const SECRET_PATTERNS: [RegExp, string][] = [
  ...CREDENTIAL_PATTERNS,
  [/\bsha256=[0-9a-fA-F]{16,}/g, 'sha256=[redacted]'],
  [/\b(Bearer\s+)[^\s"\\]+/gi, '$1[redacted]'],
];

/** Replaces our credentials in text a client sent that we repeat (a path in a span or in an
 *  error's detail): a token put in the wrong place must not travel further. */
export function scrubCredentials(text: string): string {
  let out = text;
  for (const [pattern, replacement] of CREDENTIAL_PATTERNS) out = out.replace(pattern, replacement);
  return out;
}

/** Replaces every secret-shaped substring of a serialized log line. */
export function scrubSecrets(line: string): string {
  let out = line;
  for (const [pattern, replacement] of SECRET_PATTERNS) out = out.replace(pattern, replacement);
  return out;
}

export function createLogger(opts: { level?: string; name?: string; destination?: NodeJS.WritableStream } = {}): Logger {
  return pino(
    {
      level: opts.level ?? 'info',
      name: opts.name,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      base: { service: opts.name },
      mixin: () => activeTraceIds(),
      hooks: { streamWrite: scrubSecrets },
    },
    opts.destination as any,
  );
}
