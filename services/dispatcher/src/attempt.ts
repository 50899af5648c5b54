// One delivery attempt: read the exact body and the instance's current secret, sign, POST.
// The sealed secret is read fresh for every attempt (by the claim query, right before the attempt),
// so a regenerated secret is used from the next attempt on; only its unsealing is remembered,
// keyed by the sealed value itself, which changes whenever the secret does.
// The outcome is a verdict only; the scheduler decides what it means for the schedule.
import { inSpan, injectTraceparent, SpanKind, SpanStatusCode, type Metrics, type Span } from '@switchboard/core';
import type { Knex } from 'knex';
import { EgressError, type EgressClient } from './egress.ts';
import { signatureHeaders } from './signing.ts';
import { loadAttemptMaterial, type AttemptMaterial, type ClaimedDelivery } from './store.ts';

/** `traceparent`: the attempt's span, so what is logged about the attempt later joins its trace.
 *  `requestMs`: how long the request took, sent to answered (or failed); 0 when none was sent. */
export type AttemptOutcome =
  | { kind: 'delivered'; statusCode: number; requestMs: number; traceparent?: string }
  /** `timedOut`: no answer within the attempt time-out (the only failure the breaker counts). */
  | { kind: 'failed'; statusCode: number | null; error: string; requestMs: number; retryAfterMs?: number; timedOut?: true; traceparent?: string }
  /** The event is gone (deleted with its instance): nothing to deliver or record. */
  | { kind: 'gone' };

export interface AttemptDeps {
  db: Knex;
  /** Crypto.open, usually remembered per sealed value (see DeliveryScheduler). */
  openSecret: (sealed: string) => string;
  egress: EgressClient;
  /** Attempt counts and latency by outcome (optional). */
  metrics?: Metrics;
}

/** `concurrency`: how many attempts its URL may have at once now (shown on the span: a receiver
 *  that sees more than the base at once can tell the URL earned them). */
export async function performAttempt(deps: AttemptDeps, claim: ClaimedDelivery, concurrency: number): Promise<AttemptOutcome> {
  // The claim usually carries the material (read by the claim query, just now); else read it.
  const material = claim.material === undefined ? await loadAttemptMaterial(deps.db, claim) : claim.material;
  if (!material) return { kind: 'gone' };
  // Each attempt is a span in the trace of the event it delivers (the event's stored trace context).
  const attributes = { 'switchboard.instance_id': claim.instanceId, 'switchboard.event.id': claim.eventId, 'switchboard.webhook.attempt': claim.attempts + 1, 'switchboard.webhook.concurrency': concurrency };
  return inSpan('webhook attempt', { kind: SpanKind.CLIENT, parent: material.traceContext ?? null, attributes }, async (span) => {
    const started = performance.now();
    const outcome = await attemptDelivery(deps, claim, material);
    observe(deps.metrics, span, outcome, (performance.now() - started) / 1000);
    return { ...outcome, traceparent: injectTraceparent() };
  });
}

async function attemptDelivery(deps: AttemptDeps, claim: ClaimedDelivery, material: AttemptMaterial): Promise<AttemptOutcome> {
  if (!claim.url) return { kind: 'failed', statusCode: null, error: 'no destination URL', requestMs: 0 };
  if (!material.secretSealed) return { kind: 'failed', statusCode: null, error: 'the instance has no webhook signing secret', requestMs: 0 };

  let secret: string;
  try {
    secret = deps.openSecret(material.secretSealed);
  } catch {
    return { kind: 'failed', statusCode: null, error: 'the webhook signing secret cannot be decrypted', requestMs: 0 };
  }
  const headers = signatureHeaders({ eventId: claim.eventId, secret, rawBody: material.body });
  const traceparent = injectTraceparent(); // the receiver sees this attempt as its parent
  if (traceparent) headers.traceparent = traceparent;
  const sent = performance.now();
  try {
    const response = await deps.egress.post(claim.url, headers, material.body);
    return classifyResponse(response.statusCode, response.retryAfterMs, performance.now() - sent);
  } catch (err) {
    if (err instanceof EgressError) return { kind: 'failed', statusCode: null, error: `${err.kind}: ${err.message}`, requestMs: performance.now() - sent, ...(err.kind === 'timeout' ? { timedOut: true } : {}) };
    throw err;
  }
}

function classifyResponse(statusCode: number, retryAfterMs: number | undefined, requestMs: number): AttemptOutcome {
  if (statusCode >= 200 && statusCode < 300) return { kind: 'delivered', statusCode, requestMs };
  const error = statusCode >= 300 && statusCode < 400 ? `HTTP ${statusCode} (redirects are not followed)` : `HTTP ${statusCode}`;
  return { kind: 'failed', statusCode, error, requestMs, retryAfterMs };
}

function observe(metrics: Metrics | undefined, span: Span, outcome: AttemptOutcome, seconds: number): void {
  if (outcome.kind === 'gone') return;
  metrics?.webhookAttempts.inc({ outcome: outcome.kind });
  metrics?.webhookAttemptDuration.observe({ outcome: outcome.kind }, seconds);
  span.setAttribute('switchboard.webhook.outcome', outcome.kind);
  if (outcome.statusCode !== null) span.setAttribute('http.response.status_code', outcome.statusCode);
  if (outcome.kind === 'failed') span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.error });
}
