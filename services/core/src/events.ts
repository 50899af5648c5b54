// Recording events (DESIGN §5 "Events"). An event is a row holding its exact webhook body plus an
// outbox row that announces it on `evt.<instanceId>.<type>`, both written by one statement (in the
// caller's transaction when given one; atomic on its own otherwise).
import type { Knex } from 'knex';
import { subjects } from './bus/types.ts';
import { newId } from './ids.ts';
import { outboxRow } from './outbox.ts';
import { prepared } from './db/connect.ts';
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
 *  `traceContext` trace, else of `traceContext`); the span's traceparent is stored with the event
 *  so its webhook attempts join the same trace. The events row and its outbox row are ONE
 *  statement, so they commit together even outside a transaction. */
export function recordEvent(db: Knex | Knex.Transaction, event: NewEvent): Promise<EventEnvelope> {
  return inSpan('record event', { parent: preferActive(event.traceContext), attributes: eventSpanAttributes(event) }, () =>
    insertEvent(db, { ...event, traceContext: injectTraceparent() ?? event.traceContext }),
  );
}

/** What a "record event" span says of its event. */
export function eventSpanAttributes(event: NewEvent): Record<string, string> {
  return { 'switchboard.event.type': event.type, 'switchboard.instance_id': event.instanceId };
}

/** The events row and its outbox row (see outboxRow) as one statement. */
async function insertEvent(db: Knex | Knex.Transaction, event: NewEvent): Promise<EventEnvelope> {
  const { envelope, body, createdAt, outbox } = eventRow(event);
  // Data-modifying CTEs all run in the one statement.
  await db.raw(
    `with event as (
       insert into events (id, instance_id, type, body, trace_context, created_at)
       values (?, ?, ?, ?, ?, ?::timestamptz))
     insert into outbox (subject, msg_id, payload, headers) values (?, ?, ?, ?::jsonb)`,
    [envelope.id, envelope.instanceId, envelope.type, body, event.traceContext ?? null, createdAt, outbox.subject, outbox.msgId, outbox.payload, outbox.headers],
  );
  return envelope;
}

/** An event of a batch whose guard decides, by `key`, which events are recorded. */
export interface KeyedEvent extends NewEvent {
  key: string;
}

/**
 * Many events in ONE statement with `guard`, in the order given, each only if the guard — a
 * data-modifying statement whose RETURNING has a `key` column, e.g. one INSERT … ON CONFLICT DO
 * NOTHING of many rows — returns its key: guard, events and outbox rows commit together even
 * outside a transaction. Keys must be distinct. The caller's spans are the events' trace contexts
 * (`traceContext`), since one statement serves many traces. Returns one envelope per event, null
 * for those the guard did not return (nothing written for them). `preparedName`: the guard's text
 * never changes, so the statement runs as that named prepared statement (see `prepared`).
 */
export async function recordKeyedEvents(
  db: Knex | Knex.Transaction,
  guard: { sql: string; bindings: readonly Knex.RawBinding[] },
  events: KeyedEvent[],
  preparedName?: string,
): Promise<(EventEnvelope | null)[]> {
  const rows = events.map(eventRow);
  // ORDER BY ord: rows are inserted in the order given, so the outbox (bigserial) announces them so.
  const result = await db.raw(
    `with guard as (${guard.sql}),
     v as (
       select * from unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::timestamptz[], ?::text[], ?::text[])
         with ordinality as v(key, id, instance_id, type, body, trace_context, created_at, subject, headers, ord)),
     event as (
       insert into events (id, instance_id, type, body, trace_context, created_at)
       select v.id, v.instance_id, v.type, v.body, v.trace_context, v.created_at from v
       where v.key in (select key from guard) order by v.ord
       returning id),
     announced as (
       insert into outbox (subject, msg_id, payload, headers)
       select v.subject, v.id, v.body, v.headers::jsonb from v join event on event.id = v.id order by v.ord
       returning seq)
     select id from event`,
    [
      ...guard.bindings,
      events.map((e) => e.key),
      rows.map((r) => r.envelope.id),
      rows.map((r) => r.envelope.instanceId),
      rows.map((r) => r.envelope.type),
      rows.map((r) => r.body),
      events.map((e) => e.traceContext ?? null),
      rows.map((r) => r.createdAt),
      rows.map((r) => r.outbox.subject),
      rows.map((r) => r.outbox.headers),
    ] as Knex.RawBinding[],
  ).options(preparedName ? prepared(preparedName) : {});
  const recorded = new Set((result.rows as { id: string }[]).map((r) => r.id));
  return rows.map((r) => (recorded.has(r.envelope.id) ? r.envelope : null));
}

/** An event's envelope, its webhook body (exactly what every attempt sends) and its outbox row. */
function eventRow(event: NewEvent): { envelope: EventEnvelope; body: string; createdAt: Date; outbox: ReturnType<typeof outboxRow> } {
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
  return { envelope, body, createdAt, outbox };
}
