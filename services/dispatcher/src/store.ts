// The dispatcher's SQL on `deliveries`. Claims are leases: claiming pushes next_attempt_at
// forward by the lease, so a replica that dies mid-attempt loses its claims when the lease runs
// out, and every later write is fenced on that lease value (a replica whose lease expired cannot
// overwrite the result of the replica that took over).
import type { Knex } from 'knex';
import { isForeignKeyViolation, jsonObject, prepared } from '@switchboard/core';

/** What an attempt sends: the exact body, the trace context and the instance's sealed secret. */
export interface AttemptMaterial {
  body: string;
  traceContext: string | null;
  secretSealed: string | null;
}

export interface ClaimedDelivery {
  eventId: string;
  instanceId: string;
  url: string | null;
  /** Attempts made before this one. */
  attempts: number;
  /** When the delivery was due before it was claimed (to give it back unchanged). */
  dueAt: Date;
  /** The lease; every write about this claim is conditional on it. */
  leaseUntil: Date;
  /** Read by the claim itself (saves a round trip per attempt); null: the event is gone.
   *  Undefined: not read, performAttempt loads it. */
  material?: AttemptMaterial | null;
}

export interface ClaimOptions {
  limit: number;
  leaseMs: number;
  /** The claiming dispatcher's replica name, kept with each lease (see releaseLeasesOf). */
  leaseOwner: string;
  /** Destinations (webhook URLs) whose deliveries must not be claimed now. */
  excludeDestinations: string[];
  /** At most this many deliveries of one destination per claim ... */
  perDestinationLimit: number;
  /** ... or fewer for destinations with attempts under way (URL → free slots). */
  freeSlots?: Record<string, number>;
  /** Claim for these destinations (URLs) alone; unset: for every destination. */
  onlyDestinations?: string[];
}

// Which destinations a claim looks at. Walking them all walks the distinct destinations (URLs)
// with open deliveries through the index deliveries_due_by_url_key (one probe each), keyed by
// md5(url) because a URL can be longer than an index entry may be; two URLs with one md5 would
// only share a walk step, never hide each other's rows. Its cost grows with the destinations that
// have open deliveries, due or not (a probe each: ≈ 25 ms for 5,000 failing URLs, docs/performance.md
// §35), so the scheduler walks only when it cannot know where rows are due; otherwise it names them.
const EVERY_DESTINATION = `
       (SELECT md5(url) AS key, url FROM deliveries
        WHERE status IN ('pending', 'retrying') AND url IS NOT NULL
        ORDER BY md5(url) LIMIT 1)
       UNION ALL
       SELECT next.key, next.url FROM destinations
       CROSS JOIN LATERAL (
         SELECT md5(d.url) AS key, d.url FROM deliveries d
         WHERE d.status IN ('pending', 'retrying') AND d.url IS NOT NULL AND md5(d.url) > destinations.key
         ORDER BY md5(d.url) LIMIT 1
       ) next`;
const NAMED_DESTINATIONS = `SELECT DISTINCT md5(url) AS key, url FROM unnest(?::text[]) AS named(url)`;

// `candidates` takes each destination's oldest due rows, as many as it has room for, so a
// saturated or dead destination's backlog is never scanned. Lease values are truncated to
// milliseconds so they survive the round trip through a JS Date.
const claimStatement = (destinations: string) =>
  `WITH RECURSIVE destinations AS (${destinations}
     ), candidates AS (
       SELECT c.event_id, c.due_at FROM destinations
       CROSS JOIN LATERAL (
         SELECT event_id, next_attempt_at AS due_at FROM deliveries
         WHERE status IN ('pending', 'retrying') AND url IS NOT NULL AND md5(url) = destinations.key AND next_attempt_at <= now()
         ORDER BY next_attempt_at
         LIMIT coalesce((?::jsonb ->> destinations.url)::int, ?)
       ) c
       WHERE NOT (destinations.url = ANY (?::text[]))
     ), due AS (
       SELECT l.event_id, l.due_at FROM (SELECT event_id FROM candidates ORDER BY due_at LIMIT ?) picked
       CROSS JOIN LATERAL (
         SELECT d.event_id, d.next_attempt_at AS due_at FROM deliveries d
         WHERE d.event_id = picked.event_id AND d.status IN ('pending', 'retrying') AND d.next_attempt_at <= now()
         FOR UPDATE SKIP LOCKED
       ) l
     ), lease AS (
       SELECT date_trunc('milliseconds', now()) + (?::double precision * interval '1 millisecond') AS until
     )
     UPDATE deliveries d
     SET next_attempt_at = lease.until, lease_until = lease.until, lease_owner = ?, updated_at = now()
     FROM lease, due LEFT JOIN events e ON e.id = due.event_id LEFT JOIN instances i ON i.id = e.instance_id
     WHERE d.event_id = due.event_id
     RETURNING d.event_id, d.instance_id, d.url, d.attempts, due.due_at, d.next_attempt_at AS lease_until,
               e.id AS found_event, e.body, e.trace_context, i.webhook_secret_sealed`;
const CLAIM_FROM_EVERY_DESTINATION = claimStatement(EVERY_DESTINATION);
const CLAIM_FROM_NAMED_DESTINATIONS = claimStatement(NAMED_DESTINATIONS);

/**
 * Claims due deliveries, at most `perDestinationLimit` (or the destination's free slots) per
 * destination, so a backlog for one receiver is never claimed only to be handed back. The oldest
 * of those candidates, up to the overall limit, are then locked FOR UPDATE SKIP LOCKED (and
 * checked again: another replica may have claimed them meanwhile), so a claim locks only the rows
 * it takes, however many destinations have due rows. The same statement returns what the attempt
 * sends (body, trace context, sealed secret), read at claim time. With `onlyDestinations`, only
 * those destinations' rows are claimed, and no other destination is looked at.
 */
export async function claimDueDeliveries(db: Knex, opts: ClaimOptions): Promise<ClaimedDelivery[]> {
  const rest = [JSON.stringify(opts.freeSlots ?? {}), opts.perDestinationLimit, opts.excludeDestinations, opts.limit, opts.leaseMs, opts.leaseOwner];
  const result = opts.onlyDestinations
    ? await db.raw(CLAIM_FROM_NAMED_DESTINATIONS, [opts.onlyDestinations, ...rest]).options(prepared('dispatcher_claim_due_named'))
    : await db.raw(CLAIM_FROM_EVERY_DESTINATION, rest).options(prepared('dispatcher_claim_due_leased'));
  return (result.rows as any[])
    .map((r) => ({
      eventId: r.event_id,
      instanceId: r.instance_id,
      url: r.url,
      attempts: r.attempts,
      dueAt: new Date(r.due_at),
      leaseUntil: new Date(r.lease_until),
      material: r.found_event ? { body: r.body, traceContext: r.trace_context ?? null, secretSealed: r.webhook_secret_sealed ?? null } : null,
    }))
    .sort((a, b) => a.dueAt.getTime() - b.dueAt.getTime());
}

/** Rows still held by this claim (an open status and the lease we set). */
function held(db: Knex, claim: ClaimedDelivery): Knex.QueryBuilder {
  return db('deliveries').where({ event_id: claim.eventId, next_attempt_at: claim.leaseUntil }).whereIn('status', ['pending', 'retrying']);
}

/** Hands a claim back without an attempt (destination busy or its breaker open). */
export async function releaseClaim(db: Knex, claim: ClaimedDelivery, nextAttemptAt: Date): Promise<boolean> {
  return (await held(db, claim).update({ next_attempt_at: nextAttemptAt, updated_at: db.fn.now() })) > 0;
}

/**
 * Hands back, as due, the open deliveries still leased to `owner` (their `next_attempt_at` is
 * the lease it was given), so they need not wait out their lease: called as a dispatcher starts
 * under a name, when they can only be its predecessor's (a restart after a crash), and for a
 * replica found silent (replica-liveness.ts). A name must never be shared by two live dispatchers.
 */
export async function releaseLeasesOf(db: Knex, owner: string): Promise<number> {
  return db('deliveries')
    .where({ lease_owner: owner })
    .whereIn('status', ['pending', 'retrying'])
    .whereRaw('next_attempt_at = lease_until')
    .update({ next_attempt_at: db.fn.now(), lease_owner: null, lease_until: null, updated_at: db.fn.now() });
}

/**
 * An attempt whose row was cancelled while it ran (webhook saved without its URL, secret
 * regenerated) still reached the receiver, or tried to: it is counted, with its answer. A 2xx
 * makes the row `delivered` (the receiver has the event; the cancel only stops later attempts);
 * otherwise it stays cancelled. `attempts` still equal to the claim's count means no other write
 * counted this attempt (a replica that took over an expired lease records its own attempt).
 */
export async function recordCutOffAttempt(db: Knex, claim: ClaimedDelivery, statusCode: number | null, error: string | null): Promise<boolean> {
  const delivered = error === null && statusCode !== null && statusCode >= 200 && statusCode < 300;
  const updated = await db('deliveries')
    .where({ event_id: claim.eventId, status: 'cancelled', attempts: claim.attempts })
    .update({
      attempts: claim.attempts + 1,
      last_status_code: statusCode,
      last_error: error,
      updated_at: db.fn.now(),
      ...(delivered ? { status: 'delivered', delivered_at: db.fn.now() } : {}),
    });
  return updated > 0;
}

export interface DeliveredAttempt {
  claim: ClaimedDelivery;
  statusCode: number;
}

/**
 * Records successful attempts, many claims in one statement (each row still fenced on its own lease).
 * Returns the event ids whose row was updated.
 *
 * The status test is wrapped in coalesce() so the planner cannot answer it from the partial index
 * of open deliveries: with statistics taken before a backlog built up it would scan that whole
 * backlog for every batch (a hash join over tens of thousands of rows), where the primary key
 * finds each row directly.
 */
export async function recordDeliveredBatch(db: Knex, delivered: DeliveredAttempt[]): Promise<Set<string>> {
  if (!delivered.length) return new Set();
  const result = await db.raw(
    `UPDATE deliveries d
     SET status = 'delivered', attempts = v.attempts, last_status_code = v.status_code, last_error = NULL,
         delivered_at = now(), next_attempt_at = NULL, updated_at = now()
     FROM unnest(?::text[], ?::timestamptz[], ?::int[], ?::int[]) AS v(event_id, lease_until, attempts, status_code)
     WHERE d.event_id = v.event_id AND d.next_attempt_at = v.lease_until AND coalesce(d.status IN ('pending', 'retrying'), false)
     RETURNING d.event_id`,
    [
      delivered.map((a) => a.claim.eventId),
      delivered.map((a) => a.claim.leaseUntil.toISOString()),
      delivered.map((a) => a.claim.attempts + 1),
      delivered.map((a) => a.statusCode),
    ],
  ).options(prepared('dispatcher_record_delivered'));
  return new Set((result.rows as { event_id: string }[]).map((r) => r.event_id));
}

export interface FailedAttempt {
  statusCode: number | null;
  error: string;
  /** Undefined: no attempts left (exhausted). */
  retryInMs: number | undefined;
}

export async function recordFailure(db: Knex, claim: ClaimedDelivery, failure: FailedAttempt): Promise<boolean> {
  const exhausted = failure.retryInMs === undefined;
  const updated = await held(db, claim).update({
    status: exhausted ? 'exhausted' : 'retrying',
    attempts: claim.attempts + 1,
    last_status_code: failure.statusCode,
    last_error: failure.error,
    next_attempt_at: exhausted ? null : db.raw("now() + (?::double precision * interval '1 millisecond')", [failure.retryInMs!]),
    updated_at: db.fn.now(),
  });
  return updated > 0;
}

/** What an attempt needs: the exact body, the trace context and the instance's sealed secret. */
export async function loadAttemptMaterial(db: Knex, claim: ClaimedDelivery): Promise<AttemptMaterial | undefined> {
  // Only while the claim still holds the row: a cancel (webhook saved without its URL, secret
  // regenerated) or an expired lease ends it, and then there is nothing to send.
  const row = await db('deliveries as d')
    .join('events as e', 'e.id', 'd.event_id')
    .join('instances as i', 'i.id', 'e.instance_id')
    .where({ 'd.event_id': claim.eventId, 'd.next_attempt_at': claim.leaseUntil })
    .whereIn('d.status', ['pending', 'retrying'])
    .first('e.body', 'e.trace_context', 'i.webhook_secret_sealed');
  if (!row) return undefined;
  return { body: row.body, traceContext: row.trace_context ?? null, secretSealed: row.webhook_secret_sealed ?? null };
}

export interface NewDelivery {
  eventId: string;
  instanceId: string;
  status: 'pending' | 'filtered' | 'no_destination';
  url: string | null;
  firstAttemptDelayMs: number;
  /** Pending rows only: written already claimed by this replica, leased for this long (the
   *  intake hands them straight to the scheduler, so no claim query has to find them). */
  leaseMs?: number;
}

export interface InsertedDeliveries {
  /** Event ids that exist (whether their row was written now or before). */
  existing: Set<string>;
  /** Event ids whose row was written now. */
  inserted: Set<string>;
  /** Rows written now with a lease (NewDelivery.leaseMs), as claims ready to attempt. */
  claimed: ClaimedDelivery[];
  /** Event ids not written because their URL left the instance's configuration since it was
   *  read (a webhook save in between): route them again. */
  rerouted: Set<string>;
}

/**
 * Writes the delivery row of each event once, in one statement: a redelivered bus message
 * changes nothing, and rows of events that do not exist (not committed yet, or deleted with
 * their instance) are skipped. Rows asked for with a lease come back as claims, with what their
 * attempt sends; a row that existed already is not claimed (its own lease or schedule stands).
 * Each event is read once, by primary key (LATERAL … OFFSET 0): for a batch of a few hundred the
 * planner would otherwise often pick a sequential scan of the whole events table.
 * A row with a URL is written only if the URL is still in its instance's configuration, read under
 * a key-share lock on the instance row, which only the FOR UPDATE of a webhook save or a secret
 * renewal blocks (the queue count's, the connection state's and other updates of the row do not,
 * so no lock order can deadlock with them): a save either committed first — the lock wait
 * returns its configuration (and secret), and the event is reported in `rerouted` — or waits for
 * this statement, and then cancels the row if it removed the URL.
 */
export async function insertDeliveries(db: Knex, deliveries: NewDelivery[], leaseOwner: string | null = null): Promise<InsertedDeliveries> {
  if (!deliveries.length) return { existing: new Set(), inserted: new Set(), claimed: [], rerouted: new Set() };
  const pending = (d: NewDelivery) => d.status === 'pending';
  // Lease values are truncated to milliseconds, as the claim query's, to survive a JS Date.
  const write = () => db.raw(
    `WITH v AS (
       SELECT t.*, e.instance_id AS event_instance_id, e.body, e.trace_context,
              date_trunc('milliseconds', now()) + (t.lease_ms * interval '1 millisecond') AS lease_at
       FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::double precision[], ?::double precision[])
            WITH ORDINALITY AS t(event_id, instance_id, status, url, delay_ms, lease_ms, place)
       CROSS JOIN LATERAL (SELECT instance_id, body, trace_context FROM events WHERE id = t.event_id OFFSET 0) e),
     locked AS MATERIALIZED (
       SELECT id, webhook, webhook_secret_sealed FROM instances
       WHERE id IN (SELECT instance_id FROM v WHERE url IS NOT NULL) ORDER BY id FOR KEY SHARE),
     routed AS (
       SELECT v.*, (v.url IS NULL OR EXISTS (
                SELECT 1 FROM locked l, jsonb_each(l.webhook) w WHERE l.id = v.instance_id AND w.value = to_jsonb(v.url))) AS current
       FROM v),
     inserted AS (
       INSERT INTO deliveries (event_id, instance_id, status, url, next_attempt_at, lease_until, lease_owner)
       SELECT v.event_id, v.instance_id, v.status, v.url,
              coalesce(v.lease_at, now() + (v.delay_ms * interval '1 millisecond')), v.lease_at,
              CASE WHEN v.lease_at IS NOT NULL THEN ?::text END
       FROM routed v WHERE v.event_instance_id = v.instance_id AND v.current
       ON CONFLICT (event_id) DO NOTHING
       RETURNING event_id, instance_id, url, next_attempt_at
     )
     SELECT v.event_id AS id, c.event_id IS NOT NULL AS inserted, NOT v.current AS stale, c.instance_id, c.url, now() AS due_at,
            CASE WHEN v.lease_ms IS NOT NULL THEN c.next_attempt_at END AS lease_until,
            CASE WHEN v.lease_ms IS NOT NULL AND c.event_id IS NOT NULL THEN v.body END AS body,
            v.trace_context, i.webhook_secret_sealed
     FROM routed v
     LEFT JOIN inserted c ON c.event_id = v.event_id
     LEFT JOIN locked i ON i.id = c.instance_id AND v.lease_ms IS NOT NULL
     ORDER BY v.place`,
    [
      deliveries.map((d) => d.eventId),
      deliveries.map((d) => d.instanceId),
      deliveries.map((d) => d.status),
      deliveries.map((d) => d.url),
      deliveries.map((d) => (pending(d) ? d.firstAttemptDelayMs : null)),
      deliveries.map((d) => (pending(d) ? (d.leaseMs ?? null) : null)),
      leaseOwner,
    ] as Knex.RawBinding[],
  ).options(prepared('dispatcher_insert_deliveries_leased'));
  const result = await againAfterDeletes(write);
  const existing = new Set<string>();
  const inserted = new Set<string>();
  const claimed: ClaimedDelivery[] = [];
  const rerouted = new Set<string>();
  for (const r of result.rows as any[]) {
    if (r.stale) {
      rerouted.add(r.id);
      continue;
    }
    existing.add(r.id);
    if (r.inserted) inserted.add(r.id);
    if (r.lease_until === null) continue; // not inserted now, or not leased
    claimed.push({
      eventId: r.id,
      instanceId: r.instance_id,
      url: r.url,
      attempts: 0,
      dueAt: new Date(r.due_at),
      leaseUntil: new Date(r.lease_until),
      material: { body: r.body, traceContext: r.trace_context ?? null, secretSealed: r.webhook_secret_sealed ?? null },
    });
  }
  return { existing, inserted, claimed, rerouted };
}

/** Runs a statement again when an instance delete removed rows it saw (23503 on its foreign-key
 *  check): the next run's snapshot no longer holds them. Otherwise one deleted instance failed
 *  the whole batch, and every other instance's event in it went back to the bus. */
async function againAfterDeletes<T>(statement: () => Promise<T>, tries = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await statement();
    } catch (err) {
      if (!isForeignKeyViolation(err) || attempt >= tries) throw err;
    }
  }
}

/** The instances' webhook configuration and settings, as routing needs them, in one query
 *  (instances that do not exist are absent). */
export async function loadRoutingConfigs(db: Knex, instanceIds: string[]): Promise<Map<string, { webhook: Record<string, unknown>; settings: Record<string, unknown> }>> {
  const rows = instanceIds.length ? await db('instances').whereIn('id', instanceIds).select('id', 'webhook', 'settings') : [];
  return new Map(rows.map((r: any) => [r.id, { webhook: jsonObject(r.webhook), settings: jsonObject(r.settings) }]));
}

export interface UnroutedEvent {
  id: string;
  instanceId: string;
  body: string;
  /** created_at as PostgreSQL text, exact to the microsecond: the keyset position. */
  position: string;
}

/** Events that have no delivery row, oldest first, after a keyset position. */
export async function findUnroutedEvents(db: Knex, after: { position: string; id: string } | null, limit: number): Promise<UnroutedEvent[]> {
  const query = db('events as e')
    .whereNotExists(db('deliveries as d').whereRaw('d.event_id = e.id').select(db.raw('1')))
    .orderBy([
      { column: 'e.created_at', order: 'asc' },
      { column: 'e.id', order: 'asc' },
    ])
    .limit(limit)
    .select('e.id', 'e.instance_id', 'e.body', db.raw('e.created_at::text as position'));
  if (after) query.whereRaw('(e.created_at, e.id) > (?::timestamptz, ?)', [after.position, after.id]);
  const rows = await query;
  return rows.map((r: any) => ({ id: r.id, instanceId: r.instance_id, body: r.body, position: r.position }));
}
