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
  // Not \b: a token right after a word character (`msg_sbi_…`) must go too.
  [/(?<![A-Za-z0-9])(sb[aik]|whsec)_[A-Za-z0-9_-]{8,}/g, '$1_[redacted]'],
  [/([?&]signature=)[0-9a-fA-F]+/g, '$1[redacted]'],
];

/** ... and, in logs, webhook signatures and Bearer credentials of any shape. */
const SECRET_PATTERNS: [RegExp, string][] = [
  ...CREDENTIAL_PATTERNS,
  [/\bsha256=[0-9a-fA-F]{16,}/g, 'sha256=[redacted]'],
  [/\b(Bearer\s+)[^\s"\\]+/gi, '$1[redacted]'],
];

/** Replaces our credentials in text a client sent that we repeat (a path in a span or in an
 *  error's detail): a token put in the wrong place must not travel further. `secrets`
 *  (from secretForms) are the ones no pattern knows. */
export function scrubCredentials(text: string, secrets: readonly string[] = []): string {
  return scrub(text, CREDENTIAL_PATTERNS, secrets);
}

/** A request path as a span may show it: scrubbed also where the client percent-encoded a
 *  credential (`sbi%5F…`, even twice), in which case the decoded path is what is shown. */
export function scrubPath(path: string, secrets: readonly string[] = []): string {
  const decoded = decodeEscapes(decodeEscapes(path));
  const scrubbed = scrubCredentials(decoded, secrets);
  return scrubbed === decoded ? scrubCredentials(path, secrets) : scrubbed;
}

/** Decodes each run of %XX escapes on its own, so one malformed escape elsewhere in the path
 *  (`…/100%`, a broken UTF-8 sequence) leaves the others decoded. */
function decodeEscapes(text: string): string {
  return text.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      return run;
    }
  });
}

/** Replaces every secret-shaped substring of a serialized log line, and the given secrets. */
export function scrubSecrets(line: string, secrets: readonly string[] = []): string {
  return scrub(line, SECRET_PATTERNS, secrets);
}

/** Secrets shorter than this are not replaced by value: a short one could match a number or a
 *  field name and break the line it is in (ADMIN_API_KEY warns below this length). */
export const MIN_SCRUBBED_SECRET_LENGTH = 16;

/** The ways a secret without a recognisable shape (an ADMIN_API_KEY chosen by the operator, no
 *  prefix) can appear in text: as written, as JSON writes it inside a string (it may hold `"` or
 *  `\`), and as a client percent-encodes it in a path. Never for text the client reads back:
 *  "[redacted]" where a guess stood would tell the client its guess was the key. */
export function secretForms(secrets: readonly string[]): string[] {
  const forms = new Set<string>();
  // A key of our own shape (a generated `sba_…`) is already replaced by the patterns.
  const unshaped = secrets.filter((s) => s.length >= MIN_SCRUBBED_SECRET_LENGTH && scrub(s, CREDENTIAL_PATTERNS, []) === s);
  for (const secret of unshaped) {
    for (const form of [secret, JSON.stringify(secret).slice(1, -1), encodeURIComponent(secret), encodeURI(secret)]) forms.add(form);
  }
  return [...forms];
}

function scrub(text: string, patterns: [RegExp, string][], secretForms: readonly string[]): string {
  let out = text;
  for (const [pattern, replacement] of patterns) out = out.replace(pattern, replacement);
  for (const form of secretForms) out = out.replaceAll(form, '[redacted]');
  return out;
}

export interface LoggerOptions {
  level?: string;
  name?: string;
  destination?: NodeJS.WritableStream;
  /** Secrets without a recognisable shape, replaced wherever they appear in a line (secretForms). */
  secrets?: readonly string[];
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const secrets = secretForms(opts.secrets ?? []);
  return pino(
    {
      level: opts.level ?? 'info',
      name: opts.name,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      base: { service: opts.name },
      mixin: () => activeTraceIds(),
      hooks: { streamWrite: (line) => scrubSecrets(line, secrets) },
    },
    opts.destination as any,
  );
}
