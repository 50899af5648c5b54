// Event intake (DESIGN §1 "Deliver"): every dispatcher replica joins ONE durable consumer on
// `evt.>`, so each event is taken by one replica; for each it writes the delivery row (route,
// filters, URL) and acks. Writing is idempotent (one row per event), so a redelivered message or
// a second replica changes nothing. The row, not the bus, then drives the attempts.
//
// Hand-off: a pending delivery due at once is written already claimed (leased) when the local
// scheduler has room for its destination, and handed to it with what its attempt sends, so the
// first attempt needs no claim query. Every other row waits for the scheduler's claims as before;
// either way the row, leased or due, is what another replica takes over after a crash.
//
// At start the intake also routes every event that has no delivery row yet: the database is the
// record, so events whose bus message was lost (in-process bus after a crash, purged stream) are
// rebuilt from it.
import { routeEvent, type Bus, type BusMessage, type EventEnvelope, type Logger, type Subscription, type WebhookConfig, type WebhookSettings } from '@switchboard/core';
import type { Knex } from 'knex';
import { firstAttemptDelayMs } from './backoff.ts';
import { findUnroutedEvents, insertDeliveries, loadRoutingConfigs, type ClaimedDelivery, type NewDelivery } from './store.ts';
import { CallBatcher } from '@switchboard/core';

export const DISPATCHER_DURABLE = 'dispatcher';

/** The local scheduler, as the intake sees it: it takes first attempts straight from the intake. */
export interface DeliveryHandOff {
  /** How long a handed-off row is leased (the scheduler's claim lease), and to whom. */
  readonly leaseMs: number;
  readonly leaseOwner: string;
  /** How many more deliveries to this destination it can take now (0 when none). */
  room(destination: string): number;
  /** Deliveries written already claimed for it: it attempts them as its own claims. */
  adopt(claims: ClaimedDelivery[]): void;
}

export interface IntakeDeps {
  db: Knex;
  bus: Bus;
  log: Logger;
  schedule: readonly number[];
  /** Called with their destinations (URLs) after pending deliveries were written that were not
   *  handed off, so the local scheduler claims them at once. */
  onPending?: (destinations: string[]) => void;
  handOff?: DeliveryHandOff;
}

export interface IntakeOptions {
  maxAckPending?: number;
  retryDelayMs?: number;
  sweepBatchSize?: number;
  /** A message whose event row is still missing is retried this many times, then dropped. */
  maxMissingEventRetries?: number;
}

/** `awaiting_claim`: its delivery row was written now, due, for the scheduler to claim;
 *  `recorded`: its row exists (written before, handed off to the scheduler, or not to deliver);
 *  `instance_missing`: the instance has no row (deleted), so nothing is written;
 *  `event_missing`: the event's row is not there (yet), so neither is a delivery row — or its
 *  instance's URLs kept changing while it was routed; either way the bus delivers it again. */
export type IntakeResult = 'awaiting_claim' | 'recorded' | 'instance_missing' | 'event_missing';

type Routable = Pick<EventEnvelope, 'id' | 'instanceId' | 'type' | 'data'>;
type RoutingDeps = Pick<IntakeDeps, 'db' | 'schedule' | 'handOff' | 'onPending'>;

/** Routes one event and writes its delivery row (at most once per event). */
export async function routeAndRecord(deps: RoutingDeps, envelope: Routable): Promise<IntakeResult> {
  return (await routeAndRecordBatch(deps, [envelope]))[0];
}

/** routeAndRecord for a batch of events: one query for the instances' configuration, one for
 *  the delivery rows. */
export async function routeAndRecordBatch(deps: RoutingDeps, envelopes: Routable[]): Promise<IntakeResult[]> {
  const { existing, instances, awaitingClaim } = await routeBatch(deps, envelopes);
  return envelopes.map((e) =>
    !instances.has(e.instanceId) ? 'instance_missing' : awaitingClaim.has(e.id) ? 'awaiting_claim' : existing.has(e.id) ? 'recorded' : 'event_missing',
  );
}

async function routeBatch(
  deps: RoutingDeps,
  envelopes: Routable[],
): Promise<{ existing: Set<string>; instances: Set<string>; awaitingClaim: Set<string> }> {
  const result = { existing: new Set<string>(), instances: new Set<string>(), awaitingClaim: new Set<string>() };
  // A webhook save that changed the URLs while events were routed: those again, with the new
  // ones. Still changing after three rounds, they are left to the bus's redelivery.
  for (let round = 0, batch = envelopes; round < 3 && batch.length; round++) {
    const routed = await routeOnce(deps, batch);
    for (const key of ['existing', 'instances', 'awaitingClaim'] as const) for (const id of routed[key]) result[key].add(id);
    batch = batch.filter((e) => routed.rerouted.has(e.id));
  }
  return result;
}

async function routeOnce(
  deps: RoutingDeps,
  envelopes: Routable[],
): Promise<{ existing: Set<string>; instances: Set<string>; awaitingClaim: Set<string>; rerouted: Set<string> }> {
  const configs = await loadRoutingConfigs(deps.db, [...new Set(envelopes.map((e) => e.instanceId))]);
  const rows: NewDelivery[] = [];
  const seen = new Set<string>(); // a redelivered message can share a batch with its first copy
  const firstDelayMs = firstAttemptDelayMs(deps.schedule);
  const leases = new LeasePlanner(deps.handOff, firstDelayMs);
  for (const envelope of envelopes) {
    const config = configs.get(envelope.instanceId);
    if (!config || seen.has(envelope.id)) continue;
    seen.add(envelope.id);
    const decision = routeEvent(envelope, config.webhook as WebhookConfig, config.settings as WebhookSettings);
    const url = decision.status === 'pending' ? decision.url : null;
    rows.push({
      eventId: envelope.id,
      instanceId: envelope.instanceId,
      status: decision.status,
      url,
      firstAttemptDelayMs: firstDelayMs,
      leaseMs: url === null ? undefined : leases.leaseFor(url),
    });
  }
  const { existing, inserted, claimed, rerouted } = await insertDeliveries(deps.db, rows, deps.handOff?.leaseOwner ?? null);
  if (claimed.length) deps.handOff!.adopt(claimed);
  const awaiting = rows.filter((r) => r.url !== null && r.leaseMs === undefined && inserted.has(r.eventId));
  if (awaiting.length) deps.onPending?.([...new Set(awaiting.map((r) => r.url!))]);
  return { existing, instances: new Set(configs.keys()), awaitingClaim: new Set(awaiting.map((r) => r.eventId)), rerouted };
}

/** Which rows of one batch are written claimed: those due at once whose destination the local
 *  scheduler has room for (asked once per destination, then counted down over the batch). */
class LeasePlanner {
  private readonly left = new Map<string, number>();

  constructor(
    private readonly handOff: DeliveryHandOff | undefined,
    private readonly firstDelayMs: number,
  ) {}

  leaseFor(url: string): number | undefined {
    if (!this.handOff || this.firstDelayMs > 0) return undefined;
    const left = this.left.get(url) ?? this.handOff.room(url);
    if (left <= 0) return undefined;
    this.left.set(url, left - 1);
    return this.handOff.leaseMs;
  }
}

/**
 * Groups the events that bus handlers route concurrently into batches (routeAndRecordBatch): a
 * batch starts at once when none is under way, and the events arriving meanwhile form the next
 * one. Each caller learns whether its own event exists, as routeAndRecord tells it.
 */
export class IntakeBatcher {
  private readonly writer: CallBatcher<EventEnvelope, IntakeResult>;

  constructor(deps: RoutingDeps, maxBatch = 256) {
    this.writer = new CallBatcher((envelopes) => routeAndRecordBatch(deps, envelopes), maxBatch);
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
export async function sweepUnroutedEvents(deps: RoutingDeps & Pick<IntakeDeps, 'log'>, batchSize = 500): Promise<number> {
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
    const results = await routeAndRecordBatch(deps, envelopes);
    routed += results.filter((r) => r === 'awaiting_claim' || r === 'recorded').length;
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
      // The relay publishes after commit, so a missing event row is a race or a deleted
      // instance: wait for it a few times, then let it go (the instance's events are gone too).
      if (result === 'event_missing' && msg.deliveryCount < maxMissing) throw new Error(`event ${envelope.id} not found yet`);
    },
  );
}
