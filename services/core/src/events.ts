// Recording events (DESIGN §5 "Events"). An event is a row holding its exact webhook body plus an
// outbox row that announces it on `evt.<instanceId>.<type>`, both written by one statement (in the
// caller's transaction when given one; atomic on its own otherwise).
import type { Knex } from 'knex';
import { subjects } from './bus/types.ts';
import { newId } from './ids.ts';
import { outboxRow } from './outbox.ts';
import { inSpan, injectTraceparent, preferActive } from './telemetry/spans.ts';

export const EVENT_TYPES = [
  'message.received',
  'message.sent',
  'message.status',
  'message.failed',
  'message.uncertain',
  'connection.update',
  'chat.presence',
  'webhook.test',
] as const;

export type EventType = (typeof EVENT_TYPES)[number];

export interface EventEnvelope {
  id: string;
  instanceId: string;
  type: EventType;
  createdAt: string;
  data: Record<string, unknown>;
}

export interface NewEvent {
  instanceId: string;
  type: EventType;
  data: Record<string, unknown>;
  /** W3C traceparent of the operation that caused the event, carried to the webhook attempt. */
  traceContext?: string | null;
}

/** Records the event inside a "record event" span (child of the current span when it is in the
 *  `traceContext` trace, else of `traceContext`);
 *  the span's traceparent is stored with the event so its webhook attempts join the same trace. */
export async function recordEvent(db: Knex | Knex.Transaction, event: NewEvent): Promise<EventEnvelope> {
  return (await recordEventAfter(db, undefined, event))!;
}

/**
 * Like recordEvent, but the event is recorded only if `guard` — a data-modifying query with
 * RETURNING, e.g. `INSERT … ON CONFLICT DO NOTHING RETURNING id` — returns a row. Guard, event row
 * and outbox row are ONE statement, so they commit together even outside a transaction: one round
 * trip instead of BEGIN + three inserts + COMMIT. Returns null (nothing written) when the guard
 * returned no row, e.g. the message was recorded before.
 */
export function recordEventAfter(db: Knex | Knex.Transaction, guard: Knex.QueryBuilder | undefined, event: NewEvent): Promise<EventEnvelope | null> {
  const attributes = { 'switchboard.event.type': event.type, 'switchboard.instance_id': event.instanceId };
  return inSpan('record event', { parent: preferActive(event.traceContext), attributes }, async (span) => {
    const recorded = await insertEvent(db, guard, { ...event, traceContext: injectTraceparent() ?? event.traceContext });
    if (!recorded) span.setAttribute('switchboard.event.recorded', false);
    return recorded;
  });
}

/** The events row and its outbox row (see outboxRow) as one statement, after the optional guard. */
async function insertEvent(db: Knex | Knex.Transaction, guard: Knex.QueryBuilder | undefined, event: NewEvent): Promise<EventEnvelope | null> {
  const createdAt = new Date();
  const envelope: EventEnvelope = {
    id: newId('evt'),
    instanceId: event.instanceId,
    type: event.type,
    createdAt: createdAt.toISOString(),
    data: event.data,
  };
  const body = JSON.stringify(envelope);
  const outbox = outboxRow({
    subject: subjects.event(envelope.instanceId, envelope.type),
    msgId: envelope.id,
    payload: body,
    headers: event.traceContext ? { traceparent: event.traceContext } : {},
  });
  const guarded = guard ? guard.toSQL() : undefined;
  // Data-modifying CTEs all run in the one statement; the outbox row is selected from the events
  // row so that neither exists without the other (nor without the guard's row).
  const result = await db.raw(
    `with ${guarded ? `guard as (${guarded.sql}),` : ''}
     event as (
       insert into events (id, instance_id, type, body, trace_context, created_at)
       select ?, ?, ?, ?, ?, ?::timestamptz ${guarded ? 'where exists (select 1 from guard)' : ''}
       returning id),
     announced as (
       insert into outbox (subject, msg_id, payload, headers)
       select ?, event.id, ?, ?::jsonb from event
       returning seq)
     select count(*)::int as recorded from event`,
    [
      ...(guarded?.bindings ?? []),
      envelope.id,
      envelope.instanceId,
      envelope.type,
      body,
      event.traceContext ?? null,
      createdAt,
      outbox.subject,
      outbox.payload,
      outbox.headers,
    ],
  );
  return (result.rows[0] as { recorded: number }).recorded === 1 ? envelope : null;
}
