// Starting OpenTelemetry in a Switchboard process. Configuration is only the standard OTEL_*
// variables: with neither OTEL_EXPORTER_OTLP_ENDPOINT nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set
// (or with OTEL_SDK_DISABLED=true) nothing is started and every span is a no-op. The exporter
// follows OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_PROTOCOL (OTLP over HTTP by default).
// Tests pass their own exporter (an InMemorySpanExporter) instead.
//
// The SDK is imported only when tracing starts: a process that does not trace (the default) is
// spared its modules, about 16 MiB of memory in every session process.
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { Instrumentation } from '@opentelemetry/instrumentation';
import type { Attributes, Span } from '@opentelemetry/api';
import { ConfigError } from '../config.ts';

export interface TelemetryOptions {
  /** service.name (OTEL_SERVICE_NAME wins when set, as the standard says). */
  serviceName: string;
  serviceVersion?: string;
  /** The instance a session process serves (resource attribute `switchboard.instance_id`). */
  instanceId?: string;
  /** Tests: export every span here, synchronously, whatever the environment says. */
  spanExporter?: SpanExporter;
  /** Auto-instrumentation of http, koa, pg and undici (default true). */
  autoInstrument?: boolean;
  env?: NodeJS.ProcessEnv;
}

export interface Telemetry {
  /** False when no endpoint is configured: spans are no-ops. */
  readonly enabled: boolean;
  /** Flushes pending spans and unregisters the SDK. */
  shutdown(): Promise<void>;
}

/** The release: every workspace package carries this version (telemetry.test.ts holds it to
 *  package.json). A constant, since a built process (dist/) lives away from the package files. */
const SWITCHBOARD_VERSION = '0.2.0';

const DISABLED: Telemetry = { enabled: false, shutdown: async () => undefined };

export function telemetryConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim());
}

const PROTOCOLS = ['grpc', 'http/protobuf', 'http/json'];
const EXPORTERS = ['otlp', 'console', 'none'];
const SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'];

/** The OTEL_* values the SDK would otherwise drop without a word, turning tracing off: refused at
 *  start, as every other setting is (only when tracing is configured; otherwise none is read).
 *  Processes call it with the rest of their environment (readEnvironment), then startTelemetry. */
export function checkTelemetryEnv(env: NodeJS.ProcessEnv = process.env): void {
  if (!telemetryConfigured(env)) return;
  const problems: string[] = [];
  const value = (name: string) => env[name]?.trim() || undefined;
  for (const name of ['OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']) {
    const url = value(name);
    if (url && !(/^https?:\/\//i.test(url) && URL.canParse(url))) problems.push(`${name}: must be an http(s) URL such as http://otel-collector:4318`);
  }
  const oneOf = (name: string, allowed: string[], list = false) => {
    const raw = value(name);
    const given = list ? (raw?.split(',').map((v) => v.trim()) ?? []) : raw ? [raw] : [];
    if (given.some((v) => !allowed.includes(v))) problems.push(`${name}: must be ${list ? 'any of' : 'one of'} ${allowed.join(', ')} (got "${raw}")`);
  };
  oneOf('OTEL_EXPORTER_OTLP_PROTOCOL', PROTOCOLS);
  oneOf('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', PROTOCOLS);
  oneOf('OTEL_TRACES_EXPORTER', EXPORTERS, true);
  oneOf('OTEL_TRACES_SAMPLER', SAMPLERS);
  if (problems.length) throw new ConfigError(problems);
}

export async function startTelemetry(opts: TelemetryOptions): Promise<Telemetry> {
  const env = opts.env ?? process.env;
  if (!opts.spanExporter && !telemetryConfigured(env)) return DISABLED;
  checkTelemetryEnv(env);
  const instrumentations = opts.autoInstrument === false ? [] : await autoInstrumentations();
  const [{ NodeSDK }, { defaultResource, resourceFromAttributes }, { SimpleSpanProcessor }, { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION }] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/semantic-conventions'),
  ]);
  const sdk = new NodeSDK({
    serviceName: env.OTEL_SERVICE_NAME?.trim() || opts.serviceName,
    // The SDK's default resource (telemetry.sdk.*) is kept: a `resource` option replaces it.
    resource: defaultResource().merge(
      resourceFromAttributes({
        [ATTR_SERVICE_NAME]: opts.serviceName,
        [ATTR_SERVICE_VERSION]: opts.serviceVersion ?? SWITCHBOARD_VERSION,
        ...(opts.instanceId ? { 'switchboard.instance_id': opts.instanceId } : {}),
      }),
    ),
    // Environment resource attributes (OTEL_RESOURCE_ATTRIBUTES) and the host/process basics;
    // cloud detectors are left out (they probe metadata servers at start).
    resourceDetectors: await basicDetectors(),
    // undefined → NodeSDK builds the exporter from the OTEL_* variables.
    ...(opts.spanExporter ? { spanProcessors: [new SimpleSpanProcessor(opts.spanExporter)] } : {}),
    // Only traces: no metric readers (Prometheus is served by prom-client) and no log exporter.
    metricReaders: [],
    logRecordProcessors: [],
    instrumentations,
  });
  sdk.start();
  let stopped = false;
  return {
    enabled: true,
    async shutdown() {
      if (stopped) return;
      stopped = true;
      // Spans the collector did not take are lost, but the process still stops as it should (exit
      // 0), saying where to look instead of failing the stop.
      await sdk.shutdown().catch((err: unknown) => {
        const reason = err instanceof Error ? err.message : String(err);
        process.stderr.write(`${opts.serviceName}: the last traces could not be exported (${reason}); check OTEL_EXPORTER_OTLP_ENDPOINT and that the collector runs\n`);
      });
      for (const instrumentation of instrumentations) instrumentation.disable(); // unpatch pg, undici…
      const api = await import('@opentelemetry/api');
      // Unregister so that a later start (another test) can register again.
      api.trace.disable();
      api.context.disable();
      api.propagation.disable();
    },
  };
}

async function basicDetectors() {
  const { envDetector, hostDetector, processDetector } = await import('@opentelemetry/resources');
  return [envDetector, hostDetector, processDetector];
}

/** http (outgoing requests), pg and undici. Of the bundle's other instrumentations, those for
 *  modules this project loads are switched off: they would only add noise (fs, dns, net, knex
 *  duplicating pg, pino — trace ids come from our own logger mixin, koa — a span per middleware
 *  beside the gateway's own server span). */
async function autoInstrumentations(): Promise<Instrumentation[]> {
  const { getNodeAutoInstrumentations } = await import('@opentelemetry/auto-instrumentations-node');
  const off = { enabled: false };
  return getNodeAutoInstrumentations({
    '@opentelemetry/instrumentation-http': {
      // The OTLP exporter's own requests would otherwise be traced too.
      ignoreOutgoingRequestHook: (req) => String(req.path ?? '').startsWith('/v1/traces'),
      // Server spans are the gateway's own (http/observability.ts): named by route, with the path
      // scrubbed of credentials. This instrumentation's would record the raw path and query (a
      // signed media link's signature, a token put in a path), and whether it got to patch the
      // server would depend on the order modules load in; so it traces outgoing requests only.
      disableIncomingRequestInstrumentation: true,
      requestHook: (span) => redactQueryValues(span),
    },
    '@opentelemetry/instrumentation-pg': { enhancedDatabaseReporting: false },
    // A webhook attempt is already our own CLIENT span and sets the traceparent the receiver sees;
    // a second (undici) span would add a second traceparent header to the signed request.
    '@opentelemetry/instrumentation-undici': { ignoreRequestHook: (req) => hasHeader(req.headers, 'x-service-signature'), requestHook: (span) => redactQueryValues(span) },
    '@opentelemetry/instrumentation-fs': off,
    '@opentelemetry/instrumentation-dns': off,
    '@opentelemetry/instrumentation-net': off,
    '@opentelemetry/instrumentation-knex': off,
    '@opentelemetry/instrumentation-koa': off,
    '@opentelemetry/instrumentation-pino': off,
    '@opentelemetry/instrumentation-generic-pool': off,
    '@opentelemetry/instrumentation-runtime-node': off,
  });
}

/** The attributes in which the http and undici instrumentations record an outgoing URL. */
const URL_ATTRIBUTES = ['url.full', 'url.query', 'http.url', 'http.target'];

/** An outgoing request's span shows its query values as REDACTED (the names stay, as the semantic
 *  conventions suggest): WhatsApp's media links carry their access tokens there (`oh=`, `auth=`),
 *  and so may any other service's. Spans leave the process unscrubbed, unlike log lines. */
function redactQueryValues(span: Span): void {
  const attributes = (span as Span & { attributes?: Attributes }).attributes ?? {};
  for (const key of URL_ATTRIBUTES) {
    const value = attributes[key];
    if (typeof value === 'string' && value.includes('?')) span.setAttribute(key, redactQuery(value));
  }
}

/** `…?a=1&b` → `…?a=REDACTED&REDACTED`: every value after the first `?` replaced, and a
 *  parameter without a name (`?<token>`) as a whole. */
function redactQuery(url: string): string {
  const start = url.indexOf('?');
  if (start < 0) return url;
  const parameters = url.slice(start + 1).split('&').map((p) => (p.includes('=') ? `${p.slice(0, p.indexOf('='))}=REDACTED` : p && 'REDACTED'));
  return `${url.slice(0, start)}?${parameters.join('&')}`;
}

/** Whether undici's request headers (a `name: value\r\n` string in v5, a flat array in v6+) hold `name`. */
function hasHeader(headers: string | (string | string[])[], name: string): boolean {
  if (typeof headers === 'string') return headers.toLowerCase().includes(`${name}:`);
  return headers.some((h, i) => i % 2 === 0 && typeof h === 'string' && h.toLowerCase() === name);
}
