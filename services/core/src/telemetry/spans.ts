// Our own spans and the W3C trace context we carry through places OpenTelemetry cannot see: NATS
// message headers, the outbox table and the `trace_context` columns of send items and events.
// Everything here works whether or not the SDK was started: without it the tracer is a no-op,
// yet a parent traceparent still flows through (as a non-recording span context).
import {
  context,
  ROOT_CONTEXT,
  trace,
  SpanKind,
  SpanStatusCode,
  type Attributes,
  type Context,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';

export { SpanKind, SpanStatusCode };
export type { Span };

export const TRACER_NAME = 'switchboard';

/** The tracer of our own spans (resolved on each use, so it follows the SDK once started). */
export function tracer() {
  return trace.getTracer(TRACER_NAME);
}

// The W3C propagator is used directly (not the global one): the headers we store and publish must
// be `traceparent` whatever OTEL_PROPAGATORS says.
const w3c = new W3CTraceContextPropagator();
const recordSetter: TextMapSetter<Record<string, string>> = { set: (carrier, key, value) => void (carrier[key] = value) };
const recordGetter: TextMapGetter<Record<string, string>> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => {
    const found = Object.keys(carrier).find((k) => k.toLowerCase() === key);
    return found === undefined ? undefined : carrier[found];
  },
};

/** The traceparent of the current span (or of `ctx`), or undefined when there is none. */
export function injectTraceparent(ctx: Context = context.active()): string | undefined {
  const carrier: Record<string, string> = {};
  w3c.inject(ctx, carrier, recordSetter);
  return carrier.traceparent;
}

/** `headers` with the current span as traceparent (replacing an older one); unchanged outside any span. */
export function withTraceHeaders(headers: Record<string, string> = {}): Record<string, string> {
  const traceparent = injectTraceparent();
  if (!traceparent) return headers;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) if (k.toLowerCase() !== 'traceparent' && k.toLowerCase() !== 'tracestate') out[k] = v;
  return { ...out, traceparent };
}

/** The context whose parent is `traceparent` (a header or stored column); the active one when absent or malformed. */
export function contextFrom(traceparent: string | null | undefined, base: Context = context.active()): Context {
  if (!traceparent) return base;
  return w3c.extract(base, { traceparent }, recordGetter);
}

/** Context from message/request headers (case-insensitive `traceparent`). */
export function contextFromHeaders(headers: Record<string, string | string[] | undefined>): Context {
  const flat: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) if (v !== undefined) flat[k] = Array.isArray(v) ? v[0] : v;
  return w3c.extract(context.active(), flat, recordGetter);
}

/** Runs `fn` with `traceparent` as the parent of the spans it starts. */
export function withParent<T>(traceparent: string | null | undefined, fn: () => T): T {
  return context.with(contextFrom(traceparent), fn);
}

export interface SpanOptions {
  kind?: SpanKind;
  attributes?: Attributes;
  /** Parent traceparent; the active context when absent. */
  parent?: string | null;
}

/**
 * Runs `fn` inside a new span that ends when it settles. A thrown error is recorded (its message
 * only; our errors never carry secrets) and rethrown.
 */
export async function inSpan<T>(name: string, opts: SpanOptions, fn: (span: Span) => Promise<T> | T): Promise<T> {
  const parentContext = opts.parent !== undefined ? contextFrom(opts.parent) : context.active();
  const span = tracer().startSpan(name, { kind: opts.kind ?? SpanKind.INTERNAL, attributes: opts.attributes }, parentContext);
  try {
    return await context.with(trace.setSpan(parentContext, span), () => fn(span));
  } catch (err) {
    markFailed(span, err);
    throw err;
  } finally {
    span.end();
  }
}

/** Marks a span as failed with the error's class and message. Runs of seven or more digits are
 *  left out of the message: a network's errors name the phone number or JID they concern, and no
 *  span carries a phone number. */
export function markFailed(span: Span, err: unknown): void {
  const message = (err instanceof Error ? err.message : String(err)).replace(/\+?\d{7,}/g, '[number]');
  span.setStatus({ code: SpanStatusCode.ERROR, message });
  span.addEvent('exception', { 'exception.type': err instanceof Error ? err.name : 'Error', 'exception.message': message });
}

/** trace_id/span_id of the active span, for log lines (empty when there is none). */
export function activeTraceIds(): { trace_id?: string; span_id?: string } {
  const ctx = trace.getSpanContext(context.active());
  if (!ctx || !trace.isSpanContextValid(ctx)) return {};
  return { trace_id: ctx.traceId, span_id: ctx.spanId };
}

/** Runs `fn` outside any trace: background work kicked from a request must not join its trace. */
export function outsideTrace<T>(fn: () => T): T {
  return context.with(ROOT_CONTEXT, fn);
}

/**
 * The parent for work on something that stored its trace (a send item, an event): the active span
 * when it already belongs to that trace (we are inside its processing, e.g. a consumer span), else
 * the stored traceparent. Returns undefined for "the active context", as inSpan's `parent` expects.
 */
export function preferActive(stored: string | null | undefined): string | null | undefined {
  const active = trace.getSpanContext(context.active());
  if (!active || !trace.isSpanContextValid(active)) return stored;
  if (!stored || stored.split('-')[1] === active.traceId) return undefined;
  return stored;
}
