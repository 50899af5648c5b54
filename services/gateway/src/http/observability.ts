// Observability of the HTTP API: a SERVER span per request (continuing a client's traceparent),
// request metrics by route template, one log line per request with its id, and GET /metrics.
//
// Why our own server span: the OpenTelemetry http/koa auto-instrumentation patches modules as they
// are loaded, and under tsx/ESM the gateway's `node:http` and `koa` imports are loaded before (and
// outside) those patches. When the auto-instrumentation did create a span for the request, this
// middleware reuses it instead of nesting a second one.
import type { Context, Next } from 'koa';
import { context, trace } from '@opentelemetry/api';
import { contextFromHeaders, markFailed, scrubCredentials, scrubPath, secretForms, SpanKind, tracer, type Logger, type Metrics } from '@switchboard/core';

/** Route label of requests that matched no route (bounded: never the raw path). */
const UNMATCHED = 'unmatched';

/** `secrets`: credentials without a recognisable shape (the admin key) never put in a span. */
export function observeRequests(metrics: Metrics, log: Logger, secrets: readonly string[] = []) {
  const forms = secretForms(secrets);
  return async (ctx: Context, next: Next): Promise<void> => {
    const started = process.hrtime.bigint();
    const existing = trace.getActiveSpan();
    const span = existing ?? tracer().startSpan(`${ctx.method}`, { kind: SpanKind.SERVER, attributes: { 'http.request.method': ctx.method, 'url.path': scrubPath(ctx.path, forms) } }, contextFromHeaders(ctx.headers));
    const inSpan = trace.setSpan(context.active(), span);
    try {
      await context.with(inSpan, next);
    } catch (err) {
      markFailed(span, err);
      throw err;
    } finally {
      const route = routeOf(ctx);
      const status = String(ctx.status);
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      metrics.httpRequests.inc({ method: ctx.method, route, status });
      metrics.httpDuration.observe({ method: ctx.method, route, status }, seconds);
      span.setAttribute('http.route', route);
      span.setAttribute('http.response.status_code', ctx.status);
      // A client's own id, like the path, may carry a credential pasted by mistake.
      if (ctx.state.requestId) span.setAttribute('switchboard.request_id', scrubCredentials(ctx.state.requestId, forms));
      // Inside the span, so the line carries its trace_id and span_id.
      context.with(inSpan, () =>
        log.info({ requestId: ctx.state.requestId, method: ctx.method, route, status: ctx.status, ms: Math.round(seconds * 1000) }, 'request'),
      );
      if (!existing) {
        span.updateName(`${ctx.method} ${route}`);
        span.end();
      }
    }
  };
}

/** GET /metrics: the Prometheus exposition, without credentials (like /health). Served by the
 *  router beside the routes (HEAD, OPTIONS and 405 as on every path), but not one of them: the
 *  OpenAPI document describes the API, not the scrape. */
export function metricsEndpoint(metrics: Metrics) {
  return async (ctx: Context): Promise<void> => {
    ctx.body = await metrics.render();
    ctx.type = metrics.contentType;
  };
}

function routeOf(ctx: Context): string {
  const matched = (ctx as Context & { _matchedRoute?: string | RegExp })._matchedRoute;
  return typeof matched === 'string' ? matched : UNMATCHED;
}
