// Event intake (DESIGN §1 "Deliver"): every dispatcher replica joins ONE durable consumer on
// `evt.>`, so each event is taken by one replica; for each it writes the delivery row (route,
// filters, URL) and acks. Writing is idempotent (one row per event), so a redelivered message or
// a second replica changes nothing. The row, not the bus, then drives the attempts.
//
// At start the intake also routes every event that has no delivery row yet: the database is the
// record, so events whose bus message was lost (in-process bus after a crash, purged stream) are
// rebuilt from it.
import type { Bus, BusMessage, EventEnvelope, Logger, Subscription, WebhookConfig } from '@switchboard/core';
import type { Knex } from 'knex';
import { firstAttemptDelayMs } from './backoff.ts';
import { routeEvent, type WebhookSettings } from './routing.ts';
import { findUnroutedEvents, insertDeliveries, insertDelivery, loadRoutingConfig, loadRoutingConfigs, type NewDelivery } from './store.ts';
import { CallBatcher } from '@switchboard/core';

export const DISPATCHER_DURABLE = 'dispatcher';

export interface IntakeDeps {
  db: Knex;
  bus: Bus;
  log: Logger;
  schedule: readonly number[];
  /** Called after a pending delivery was written, so the local scheduler attempts it at once. */
  onPending?: () => void;
}

export interface IntakeOptions {
  maxAckPending?: number;
  retryDelayMs?: number;
  sweepBatchSize?: number;
  /** A message whose event row is still missing is retried this many times, then dropped. */
  maxMissingEventRetries?: number;
}

export type IntakeResult = 'recorded' | 'duplicate_or_missing_instance' | 'event_missing';

/** Routes one event and writes its delivery row (at most once per event). */
export async function routeAndRecord(deps: Pick<IntakeDeps, 'db' | 'schedule'>, envelope: Pick<EventEnvelope, 'id' | 'instanceId' | 'type' | 'data'>): Promise<IntakeResult> {
  const config = await loadRoutingConfig(deps.db, envelope.instanceId);
  if (!config) return 'duplicate_or_missing_instance';
  const decision = routeEvent(envelope, config.webhook as WebhookConfig, config.settings as WebhookSettings);
  const exists = await insertDelivery(deps.db, {
    eventId: envelope.id,
    instanceId: envelope.instanceId,
    status: decision.status,
    url: decision.status === 'pending' ? decision.url : null,
    firstAttemptDelayMs: firstAttemptDelayMs(deps.schedule),
  });
  return exists ? 'recorded' : 'event_missing';
}

/** routeAndRecord for a batch of events: one query for the instances' configuration, one for
 *  the delivery rows. Returns how many events exist (and have their delivery row). */
export async function routeAndRecordBatch(deps: Pick<IntakeDeps, 'db' | 'schedule'>, envelopes: Pick<EventEnvelope, 'id' | 'instanceId' | 'type' | 'data'>[]): Promise<number> {
  return (await routeBatch(deps, envelopes)).existing.size;
}

async function routeBatch(
  deps: Pick<IntakeDeps, 'db' | 'schedule'>,
  envelopes: Pick<EventEnvelope, 'id' | 'instanceId' | 'type' | 'data'>[],
): Promise<{ existing: Set<string>; instances: Set<string> }> {
  const configs = await loadRoutingConfigs(deps.db, [...new Set(envelopes.map((e) => e.instanceId))]);
  const rows: NewDelivery[] = [];
  const seen = new Set<string>(); // a redelivered message can share a batch with its first copy
  for (const envelope of envelopes) {
    const config = configs.get(envelope.instanceId);
    if (!config || seen.has(envelope.id)) continue;
    seen.add(envelope.id);
    const decision = routeEvent(envelope, config.webhook as WebhookConfig, config.settings as WebhookSettings);
    rows.push({
      eventId: envelope.id,
      instanceId: envelope.instanceId,
      status: decision.status,
      url: decision.status === 'pending' ? decision.url : null,
      firstAttemptDelayMs: firstAttemptDelayMs(deps.schedule),
    });
  }
  return { existing: await insertDeliveries(deps.db, rows), instances: new Set(configs.keys()) };
}

/**
 * Groups the events that bus handlers route concurrently into batches (routeAndRecordBatch): a
 * batch starts at once when none is under way, and the events arriving meanwhile form the next
 * one. Each caller learns whether its own event exists, as routeAndRecord tells it.
 */
export class IntakeBatcher {
  private readonly writer: CallBatcher<EventEnvelope, IntakeResult>;

  constructor(deps: Pick<IntakeDeps, 'db' | 'schedule'>, maxBatch = 256) {
    this.writer = new CallBatcher(async (envelopes) => {
      const { existing, instances } = await routeBatch(deps, envelopes);
      return envelopes.map((e) => (!instances.has(e.instanceId) ? 'duplicate_or_missing_instance' : existing.has(e.id) ? 'recorded' : 'event_missing'));
    }, maxBatch);
  }

  route(envelope: EventEnvelope): Promise<IntakeResult> {
    return this.writer.submit(envelope);
  }
}

/** Parses a bus payload into an envelope; undefined when it is not one. */
export function parseEnvelope(data: Uint8Array): EventEnvelope | undefined {
  try {
    const value = JSON.parse(Buffer.from(data).toString('utf8'));
    if (typeof value?.id !== 'string' || typeof value?.instanceId !== 'string' || typeof value?.type !== 'string') return undefined;
    return { ...value, data: value.data && typeof value.data === 'object' ? value.data : {} };
  } catch {
    return undefined;
  }
}

/** Routes every event that has no delivery row yet, oldest first. Returns how many were routed. */
export async function sweepUnroutedEvents(deps: Pick<IntakeDeps, 'db' | 'schedule' | 'log' | 'onPending'>, batchSize = 500): Promise<number> {
  let after: { position: string; id: string } | null = null;
  let routed = 0;
  for (;;) {
    const events = await findUnroutedEvents(deps.db, after, batchSize);
    const envelopes = [];
    for (const event of events) {
      const envelope = parseEnvelope(Buffer.from(event.body, 'utf8'));
      if (envelope) envelopes.push(envelope);
      else deps.log.warn({ eventId: event.id }, 'dispatcher: event body is not an envelope; not delivered');
    }
    // One batch at a time, and the scheduler starts on each while the next one is routed.
    const recorded = await routeAndRecordBatch(deps, envelopes);
    routed += recorded;
    if (recorded > 0) deps.onPending?.();
    if (events.length < batchSize) return routed;
    const last = events[events.length - 1];
    after = { position: last.position, id: last.id };
  }
}

export async function startIntake(deps: IntakeDeps, opts: IntakeOptions = {}): Promise<Subscription> {
  const routed = await sweepUnroutedEvents(deps, opts.sweepBatchSize);
  if (routed > 0) deps.log.info({ routed }, 'dispatcher: routed events that had no delivery row');
  const maxMissing = opts.maxMissingEventRetries ?? 10;
  const batcher = new IntakeBatcher(deps);
  return deps.bus.consume(
    { stream: 'events', filter: 'evt.>', durable: DISPATCHER_DURABLE, maxAckPending: opts.maxAckPending ?? 256, retryDelayMs: opts.retryDelayMs ?? 1000 },
    async (msg: BusMessage) => {
      const envelope = parseEnvelope(msg.data);
      if (!envelope) {
        deps.log.warn({ subject: msg.subject }, 'dispatcher: message on the event stream is not an envelope; dropped');
        return;
      }
      const result = await batcher.route(envelope);
      if (result === 'recorded') deps.onPending?.();
      // The relay publishes after commit, so a missing event row is a race or a deleted
      // instance: wait for it a few times, then let it go (the instance's events are gone too).
      if (result === 'event_missing' && msg.deliveryCount < maxMissing) throw new Error(`event ${envelope.id} not found yet`);
    },
  );
}
