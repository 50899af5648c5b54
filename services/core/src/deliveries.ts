// The `deliveries` table as the gateway sees it (DESIGN §5 "Webhook delivery"): event listings
// with their delivery result, the manual retry of an exhausted delivery (routed again with the
// configuration of now), and the two cancellation rules. The dispatcher owns attempts; these
// helpers only read and reset rows.
import type { Knex } from 'knex';
import { problems, type Problem } from './problem.ts';
import { jsonObject } from './db/json-column.ts';
import type { EventEnvelope } from './events.ts';
import { routeEvent, type WebhookSettings } from './webhook-routing.ts';

/** The destination fields of a webhook configuration; every other field is not a URL. */
export const WEBHOOK_DESTINATIONS = ['url', 'received', 'delivery', 'status', 'connected', 'disconnected', 'presence'] as const;
export type WebhookDestination = (typeof WEBHOOK_DESTINATIONS)[number];

/** `instances.webhook`: destination URLs ('' = none) plus the payload format. */
export type WebhookConfig = Partial<Record<WebhookDestination, string>> & { format?: string };

export const DELIVERY_STATUSES = ['pending', 'delivered', 'retrying', 'exhausted', 'filtered', 'no_destination', 'cancelled'] as const;
export type DeliveryState = (typeof DELIVERY_STATUSES)[number];

/** Statuses that still have attempts ahead of them. */
export const OPEN_DELIVERY_STATUSES: readonly DeliveryState[] = ['pending', 'retrying'];

export interface DeliveryResult {
  status: DeliveryState;
  url: string | null;
  attempts: number;
  lastStatusCode: number | null;
  lastError: string | null;
  nextAttemptAt: string | null;
  deliveredAt: string | null;
}

export interface EventWithDelivery {
  id: string;
  instanceId: string;
  type: string;
  createdAt: string;
  data: Record<string, unknown>;
  delivery: DeliveryResult;
}

/** Every non-empty destination URL of a configuration. */
export function webhookUrls(config: WebhookConfig | null | undefined): Set<string> {
  const urls = new Set<string>();
  for (const field of WEBHOOK_DESTINATIONS) {
    const value = config?.[field];
    if (typeof value === 'string' && value.trim() !== '') urls.add(value.trim());
  }
  return urls;
}

/** The instance's events (`e`) joined with their deliveries (`d`), unordered: for lists that
 *  narrow or page it and for one event; map each row with toEventWithDelivery. */
export function eventsWithDelivery(db: Knex | Knex.Transaction, instanceId: string): Knex.QueryBuilder {
  return db('events as e')
    .leftJoin('deliveries as d', 'd.event_id', 'e.id')
    .where('e.instance_id', instanceId)
    .select(
      'e.id',
      'e.instance_id',
      'e.type',
      'e.body',
      'e.created_at',
      'd.status',
      'd.url',
      'd.attempts',
      'd.last_status_code',
      'd.last_error',
      'd.next_attempt_at',
      'd.lease_until',
      'd.updated_at',
      'd.delivered_at',
    );
}

export function toEventWithDelivery(row: Record<string, any>): EventWithDelivery {
  const envelope = JSON.parse(row.body) as { createdAt?: string; data?: Record<string, unknown> };
  return {
    id: row.id,
    instanceId: row.instance_id,
    type: row.type,
    createdAt: envelope.createdAt ?? iso(row.created_at)!,
    data: envelope.data ?? {},
    // No row yet means the dispatcher has not routed the event: it is about to be.
    delivery: {
      status: row.status ?? 'pending',
      url: row.url ?? null,
      attempts: row.attempts ?? 0,
      lastStatusCode: row.last_status_code ?? null,
      lastError: row.last_error ?? null,
      nextAttemptAt: iso(underWay(row) ? row.updated_at : row.next_attempt_at),
      deliveredAt: iso(row.delivered_at),
    },
  };
}

/** A dispatcher holds the delivery for an attempt: its next_attempt_at is the end of that lease
 *  (see dispatcher/src/store.ts), and the attempt it made due is the one under way since the claim. */
function underWay(row: Record<string, any>): boolean {
  return row.lease_until != null && row.next_attempt_at != null && new Date(row.lease_until).getTime() === new Date(row.next_attempt_at).getTime();
}

function iso(value: Date | string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  return (value instanceof Date ? value : new Date(value)).toISOString();
}

/** A delivery's columns at the start of a fresh series of attempts (a manual retry). */
const FRESH_SERIES = { status: 'pending', attempts: 0, last_status_code: null, last_error: null, delivered_at: null } as const;

/**
 * POST …/events/{eventId}/retry: a fresh series of attempts for an exhausted delivery, with the
 * same event id and body (the body lives in `events` and is never rewritten). The event is routed
 * again with the instance's configuration of now, as saving the webhook applies to what is still
 * to be sent: a URL removed since gets nothing more, and a destination changed since gets the
 * retry. When the configuration now filters the event or has no URL for it, nothing is sent and
 * the delivery stays exhausted (409 `not_retryable`, retryable again once a URL is set).
 *
 * Only `exhausted` is retryable: a `retrying` delivery still has its own series scheduled, and
 * restarting it would let two series overlap; every other status has nothing to retry (409
 * `not_retryable`). 404 when the event is not one of this instance's.
 */
export function retryEvent(db: Knex | Knex.Transaction, instanceId: string, eventId: string): Promise<EventWithDelivery> {
  // A save that removes the URL either ran first (and the retry routes with the new
  // configuration) or waits for the retry, then cancels the retried delivery.
  return db.transaction(async (trx) => {
    await lockInstanceForRetry(trx, instanceId).first('id');
    return retryLocked(trx, instanceId, eventId);
  });
}

async function retryLocked(db: Knex.Transaction, instanceId: string, eventId: string): Promise<EventWithDelivery> {
  // The delivery row first: event retention (event-retention.ts) skips a row locked here, and a
  // retry that waits for the retention's lock then finds the event gone (404), never half of it.
  await db('deliveries').where({ event_id: eventId, instance_id: instanceId }).forUpdate().first('event_id');
  const event = await db('events as e')
    .join('instances as i', 'i.id', 'e.instance_id')
    .leftJoin('deliveries as d', 'd.event_id', 'e.id')
    .where({ 'e.id': eventId, 'e.instance_id': instanceId })
    .first('e.type', 'e.body', 'i.webhook', 'i.settings', 'd.status');
  if (!event) throw problems.notFound('The event');
  if (event.status !== 'exhausted') {
    throw notRetryable(`Only a delivery whose attempts are exhausted can be retried; this one is ${event.status ?? 'not yet routed'}.`);
  }
  const route = routeNow(event, event);
  if (route.status !== 'pending') throw notRetryable(NOT_ROUTED[route.status]);
  // Locked above: nothing else moves or deletes it before the commit.
  await db('deliveries')
    .where({ event_id: eventId, instance_id: instanceId })
    .update({ ...FRESH_SERIES, url: route.url, next_attempt_at: db.fn.now(), updated_at: db.fn.now() });
  const [record] = await eventsWithDelivery(db, instanceId).where('e.id', eventId);
  return toEventWithDelivery(record);
}

/** How many exhausted deliveries one transaction of retryExhaustedDeliveries takes on. */
const BULK_RETRY_CHUNK = 500;

/**
 * POST …/events/retry: a fresh series for every exhausted delivery of the instance (after an
 * outage of the receiver longer than the retry schedule), each routed with the configuration of
 * now as retryEvent does. Those the configuration now filters or has no URL for stay exhausted and
 * are counted as not retryable. Chunks of deliveries, each in its own transaction, so a webhook
 * save waits for one chunk at most; between chunks other work gets its turn (PGlite runs each
 * statement on the event loop).
 */
export async function retryExhaustedDeliveries(db: Knex, instanceId: string, chunkSize = BULK_RETRY_CHUNK): Promise<{ retried: number; notRetryable: number }> {
  const totals = { retried: 0, notRetryable: 0 };
  let after = '';
  for (;;) {
    const chunk = await db.transaction((trx) => retryExhaustedChunk(trx, instanceId, after, chunkSize));
    totals.retried += chunk.retried;
    totals.notRetryable += chunk.notRetryable;
    if (chunk.last === undefined) return totals;
    after = chunk.last;
    await new Promise((resolve) => setImmediate(resolve));
  }
}

interface BulkRetryChunk {
  retried: number;
  notRetryable: number;
  /** The last event id of a full chunk (more may follow), undefined after the last chunk. */
  last?: string;
}

async function retryExhaustedChunk(trx: Knex.Transaction, instanceId: string, after: string, chunkSize: number): Promise<BulkRetryChunk> {
  const instance = await lockInstanceForRetry(trx, instanceId).first('webhook', 'settings');
  if (!instance) throw problems.notFound('The instance');
  // The chunk's ids first, unlocked: a sort of ids alone, which stops at the chunk's size (a
  // locking query would sort every remaining row with its body first).
  const ids = (await trx('deliveries')
    .where({ instance_id: instanceId, status: 'exhausted' })
    .andWhere('event_id', '>', after)
    .orderBy('event_id')
    .limit(chunkSize)
    .pluck('event_id')) as string[];
  // Then locked (event retention skips a locked row) and checked again: a delivery retried meanwhile is no longer exhausted.
  const rows = await trx('deliveries as d')
    .join('events as e', 'e.id', 'd.event_id')
    .whereIn('d.event_id', ids)
    .where({ 'd.instance_id': instanceId, 'd.status': 'exhausted' })
    .forUpdate('d')
    .select('d.event_id', 'e.type', 'e.body');
  const byUrl = new Map<string, string[]>();
  for (const row of rows) {
    const route = routeNow(row, instance);
    if (route.status !== 'pending') continue;
    const eventIds = byUrl.get(route.url) ?? [];
    eventIds.push(row.event_id);
    byUrl.set(route.url, eventIds);
  }
  let retried = 0;
  for (const [url, eventIds] of byUrl) {
    retried += eventIds.length;
    await trx('deliveries')
      .where({ instance_id: instanceId })
      .whereIn('event_id', eventIds)
      .update({ ...FRESH_SERIES, url, next_attempt_at: trx.fn.now(), updated_at: trx.fn.now() });
  }
  return { retried, notRetryable: rows.length - retried, last: ids.length === chunkSize ? ids.at(-1) : undefined };
}

/** The lock a retry holds on its instance: it waits for a webhook save or a secret renewal under
 *  way (they lock the row FOR UPDATE) and they wait for it, so a retry routes with the saved
 *  configuration and a save cancels what the retry started; sends and state changes (plain
 *  updates of the row) do not wait for it. */
function lockInstanceForRetry(trx: Knex.Transaction, instanceId: string) {
  return trx('instances').where({ id: instanceId }).forKeyShare();
}

/** How the instance's configuration of now routes an event. */
function routeNow(event: { type: string; body: unknown }, instance: { webhook: unknown; settings: unknown }) {
  const envelope = { type: event.type as EventEnvelope['type'], data: (jsonObject(event.body).data ?? {}) as Record<string, unknown> };
  return routeEvent(envelope, jsonObject(instance.webhook) as WebhookConfig, jsonObject(instance.settings) as WebhookSettings);
}

const NOT_ROUTED: Record<'filtered' | 'no_destination', string> = {
  filtered: "The instance's settings now filter this event out, so there is nothing to send; change the settings to retry it.",
  no_destination: "The instance's webhook configuration has no URL for this event now; set one, then retry.",
};

function notRetryable(detail: string): Problem {
  return problems.conflict('not_retryable', detail);
}

/**
 * Webhook save: pending/retrying deliveries whose URL is no longer any destination of the new
 * configuration are cancelled; deliveries to URLs that stay keep their schedule. Comparing with
 * the new configuration (rather than diffing old and new) also catches URLs left over from an even
 * older configuration. Call it in the transaction that saves the configuration. Returns how many
 * were cancelled.
 */
export async function cancelDeliveriesForRemovedUrls(
  trx: Knex | Knex.Transaction,
  instanceId: string,
  newConfig: WebhookConfig,
): Promise<number> {
  const kept = [...webhookUrls(newConfig)];
  const query = trx('deliveries').where('instance_id', instanceId).whereIn('status', OPEN_DELIVERY_STATUSES);
  if (kept.length > 0) query.where((q) => q.whereNull('url').orWhereNotIn('url', kept));
  return query.update({ status: 'cancelled', next_attempt_at: null, updated_at: trx.fn.now() });
}

/** Webhook secret regenerated: every pending/retrying delivery of the instance is cancelled. */
export async function cancelPendingDeliveries(trx: Knex | Knex.Transaction, instanceId: string): Promise<number> {
  return trx('deliveries')
    .where('instance_id', instanceId)
    .whereIn('status', OPEN_DELIVERY_STATUSES)
    .update({ status: 'cancelled', next_attempt_at: null, updated_at: trx.fn.now() });
}
