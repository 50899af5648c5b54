// Prometheus metrics (prom-client). One Metrics object — with its own Registry, never the global
// default one — per process, created at start and passed to whatever records into it; the gateway
// serves it at GET /metrics, other processes on their health port (startHealthServer). Several can live in one process
// (tests start several servers).
//
// Two kinds of metrics:
// - counters/histograms recorded where things happen (HTTP requests, webhook attempts);
// - gauges read from the database at scrape time (queue depth, send items, session states,
//   deliveries, stored media bytes) and from the bus (consumer lag). The database is the record in
//   both deployments, so these are right whichever process serves them; when several replicas
//   serve them, aggregate with max() rather than sum().
// Label values are bounded: routes are templates, statuses and states are enums; no per-message or
// per-destination labels.
// A scrape never fails or stalls for a source: one that errs or takes longer than
// SOURCE_TIMEOUT_MS leaves its gauges out of that scrape, and switchboard_metrics_source_up says
// which (an outage is when the counters matter most, and a lag of 0 would read as healthy).
import { setTimeout as sleep } from 'node:timers/promises';
import type { Knex } from 'knex';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Bus } from './bus/types.ts';
import { ITEM_STATUSES } from './send-events.ts';

export interface MetricsOptions {
  /** Source of the scrape-time gauges; without it they are left out. */
  db?: Knex;
  /** Source of consumer lag; without it that gauge is left out. */
  bus?: Bus;
  /** Process metrics (CPU, memory, event loop) prefixed `switchboard_` (switchboard_process_*, switchboard_nodejs_*) (default true). */
  processMetrics?: boolean;
  /** Minimum time between two database reads for the gauges (several scrapers share one read). */
  gaugeRefreshMs?: number;
}

type HttpLabels = 'method' | 'route' | 'status';
type AttemptLabels = 'outcome';

export interface Metrics {
  readonly registry: Registry;
  readonly httpRequests: Counter<HttpLabels>;
  readonly httpDuration: Histogram<HttpLabels>;
  /** Webhook attempts by outcome: `delivered`, `failed` (HTTP error, network, refused destination). */
  readonly webhookAttempts: Counter<AttemptLabels>;
  readonly webhookAttemptDuration: Histogram<AttemptLabels>;
  /** Deliveries whose last attempt failed (status `exhausted`), counted when it happens. */
  readonly webhookExhausted: Counter;
  /** Registers how to count this process's open breakers at scrape time. */
  trackBreakers(countOpen: () => number): void;
  /** Registers how to count this process's webhook URLs allowed more attempts at once than the
   *  base (earned concurrency) at scrape time. */
  trackEarnedConcurrency(countAboveBase: () => number): void;
  /** Prometheus text exposition of everything. */
  render(): Promise<string>;
  readonly contentType: string;
}

/** Instance states (DESIGN §5); gauges report each, zero included, so series never vanish. */
const INSTANCE_STATES = ['stopped', 'starting', 'awaiting_scan', 'connected', 'reconnecting', 'logged_out'];
const DELIVERY_STATUSES = ['pending', 'delivered', 'retrying', 'exhausted', 'filtered', 'no_destination', 'cancelled'];
/** Counted whole, through the (status, next_attempt_at) index: the open ones, and the exhausted
 *  ones (few; kept EVENT_RETENTION_MS, and a human acts on each). */
const WHOLE_DELIVERY_STATUSES = ['pending', 'retrying', 'exhausted'];
/** Outcomes are counted over this last stretch, not all history: a count of every row took seconds
 *  at a few million (send items are never pruned unless MESSAGE_RETENTION_MS says so), and a read
 *  over 2 s leaves every database gauge out of the scrape (the queue depth among them). Send items
 *  while their queue expiry is at most this far past (an item turns `expired` at its expiry, so it
 *  is counted for a day after that); the other finished deliveries (delivered, filtered, …, the
 *  many) of the events this recent. */
const RECENT_MS = 24 * 3_600_000;

const EVENT_LOOP_SAMPLE_MS = 100;

export function createMetrics(opts: MetricsOptions = {}): Metrics {
  const registry = new Registry();
  // The event loop's lag is sampled every 100 ms, not prom-client's 10: its timer woke an idle
  // process a hundred times a second. Stalls of 100 ms and longer are all still seen.
  if (opts.processMetrics !== false) collectDefaultMetrics({ register: registry, prefix: 'switchboard_', eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  const registers = [registry];

  const httpRequests = new Counter({ name: 'switchboard_http_requests_total', help: 'HTTP requests by method, route template and status', labelNames: ['method', 'route', 'status'] as const, registers });
  const httpDuration = new Histogram({
    name: 'switchboard_http_request_duration_seconds',
    help: 'HTTP request latency by method, route template and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers,
  });
  const webhookAttempts = new Counter({ name: 'switchboard_webhook_attempts_total', help: 'Webhook delivery attempts by outcome', labelNames: ['outcome'] as const, registers });
  const webhookAttemptDuration = new Histogram({
    name: 'switchboard_webhook_attempt_duration_seconds',
    help: 'Webhook attempt latency (connect to response) by outcome',
    labelNames: ['outcome'] as const,
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15],
    registers,
  });
  const webhookExhausted = new Counter({ name: 'switchboard_webhook_exhausted_total', help: 'Deliveries that failed their last attempt (status exhausted)', registers });
  const trackBreakers = summedGauge('switchboard_webhook_circuit_breakers_open', 'Webhook destinations whose circuit breaker is open in this dispatcher', registers);
  const trackEarnedConcurrency = summedGauge('switchboard_webhook_urls_above_base_concurrency', 'Webhook URLs allowed more attempts at once than the base in this dispatcher (earned concurrency)', registers);

  const refreshMs = opts.gaugeRefreshMs ?? 1000;
  const sources: Record<string, () => Promise<unknown>> = {};
  if (opts.db) sources.database = registerDatabaseGauges(registry, opts.db, refreshMs);
  if (opts.bus) sources.bus = registerBusLag(registry, opts.bus, refreshMs);
  if (Object.keys(sources).length) {
    new Gauge({
      name: 'switchboard_metrics_source_up',
      help: 'Whether this scrape could read a source of gauges (1) or left its gauges out (0)',
      labelNames: ['source'] as const,
      registers,
      async collect() {
        // All at once: the scrape waits for the slowest source once, not for the sum of them.
        const read = await Promise.all(Object.values(sources).map((r) => r()));
        Object.keys(sources).forEach((source, i) => this.set({ source }, read[i] ? 1 : 0));
      },
    });
  }

  return {
    registry,
    httpRequests,
    httpDuration,
    webhookAttempts,
    webhookAttemptDuration,
    webhookExhausted,
    trackBreakers,
    trackEarnedConcurrency,
    render: () => registry.metrics(),
    contentType: registry.contentType,
  };
}

/** A gauge whose value, at scrape time, is the sum of what the registered counts say (each
 *  dispatcher scheduler registers its own). Returns how to register one. */
function summedGauge(name: string, help: string, registers: Registry[]): (count: () => number) => void {
  const counts: (() => number)[] = [];
  new Gauge({
    name,
    help,
    registers,
    collect() {
      this.set(counts.reduce((sum, count) => sum + count(), 0));
    },
  });
  return (count) => void counts.push(count);
}

interface DatabaseSnapshot {
  queueDepth: Map<string, number>;
  oldestQueuedSeconds: Map<string, number>;
  sendItems: { status: string; instanceState: string; count: number }[];
  sessions: Map<string, number>;
  deliveries: Map<string, number>;
  mediaBytes: Map<string, number>;
}

/** Longest a scrape waits for the database or the bus. */
const SOURCE_TIMEOUT_MS = 2000;

/**
 * One read of a source serves every gauge of a scrape (and scrapes within refreshMs). It resolves
 * to undefined when the source failed or did not answer in time, and a failed read is tried again
 * at the next scrape. A read still running (a slow database) is waited for again, not started a
 * second time: abandoned reads would pile up and hold connections the API needs.
 */
function sharedRead<T>(read: () => Promise<T>, refreshMs: number): () => Promise<T | undefined> {
  let running: Promise<T | undefined> | undefined;
  let last: { at: number; value: Promise<T | undefined> } | undefined;
  return () => {
    if (last && Date.now() - last.at <= refreshMs) return last.value;
    running ??= read()
      .catch(() => undefined)
      .finally(() => (running = undefined));
    const done = new AbortController();
    const timeout = sleep(SOURCE_TIMEOUT_MS, undefined, { signal: done.signal }).catch(() => undefined);
    const entry = { at: Date.now(), value: Promise.race([running, timeout]).finally(() => done.abort()) };
    last = entry;
    void entry.value.then((v) => {
      if (v === undefined && last === entry) last = undefined;
    });
    return entry.value;
  };
}

/** Gauges read from the database, in one read. Returns that read (undefined: it failed). */
function registerDatabaseGauges(registry: Registry, db: Knex, refreshMs: number): () => Promise<DatabaseSnapshot | undefined> {
  const read = sharedRead(() => readSnapshot(db), refreshMs);
  // Each gauge is emptied first: without a snapshot it reports nothing rather than stale values.
  const snapshot = async (gauge: Gauge) => {
    gauge.reset();
    return read();
  };
  const registers = [registry];
  new Gauge({
    name: 'switchboard_send_queue_depth',
    help: 'Queued send items by the state of their instance',
    labelNames: ['instance_state'] as const,
    registers,
    async collect() {
      const s = await snapshot(this);
      if (s) for (const state of INSTANCE_STATES) this.set({ instance_state: state }, s.queueDepth.get(state) ?? 0);
    },
  });
  new Gauge({
    name: 'switchboard_send_queue_oldest_age_seconds',
    help: 'Age of the oldest queued send item by the state of its instance (0 when none)',
    labelNames: ['instance_state'] as const,
    registers,
    async collect() {
      const s = await snapshot(this);
      if (s) for (const state of INSTANCE_STATES) this.set({ instance_state: state }, s.oldestQueuedSeconds.get(state) ?? 0);
    },
  });
  new Gauge({
    name: 'switchboard_send_items',
    help: 'Send items whose queue expiry is at most a day past (accepted within SEND_EXPIRY_MS and a day) by status and the state of their instance',
    labelNames: ['status', 'instance_state'] as const,
    registers,
    async collect() {
      const s = await snapshot(this);
      for (const row of s?.sendItems ?? []) this.set({ status: row.status, instance_state: row.instanceState }, row.count);
    },
  });
  new Gauge({
    name: 'switchboard_sessions',
    help: 'Instances (sessions) by state',
    labelNames: ['state'] as const,
    registers,
    async collect() {
      const s = await snapshot(this);
      if (s) for (const state of INSTANCE_STATES) this.set({ state }, s.sessions.get(state) ?? 0);
    },
  });
  new Gauge({
    name: 'switchboard_webhook_deliveries',
    help: 'Webhook deliveries by status: pending, retrying and exhausted (all attempts failed) ones all, the other finished ones of the events of the last day',
    labelNames: ['status'] as const,
    registers,
    async collect() {
      const s = await snapshot(this);
      if (s) for (const status of DELIVERY_STATUSES) this.set({ status }, s.deliveries.get(status) ?? 0);
    },
  });
  new Gauge({
    name: 'switchboard_media_stored_bytes',
    help: 'Bytes of stored media by direction',
    labelNames: ['direction'] as const,
    registers,
    async collect() {
      const s = await snapshot(this);
      if (s) for (const direction of ['inbound', 'outbound']) this.set({ direction }, s.mediaBytes.get(direction) ?? 0);
    },
  });
  return read;
}

async function readSnapshot(db: Knex): Promise<DatabaseSnapshot> {
  const queued = await db('send_items as s')
    .join('instances as i', 'i.id', 's.instance_id')
    .where('s.status', 'queued')
    .groupBy('i.state')
    .select('i.state as state', db.raw('count(*) as count'), db.raw('min(s.created_at) as oldest'));
  // Recent items (RECENT_MS), not every item ever accepted: queued and sending ones are
  // all in it (a day past their expiry they are long `expired`), outcomes are recent ones.
  const items = await db('send_items as s')
    .join('instances as i', 'i.id', 's.instance_id')
    .whereIn('s.status', ITEM_STATUSES) // named, so the query walks the (status, expires_at) index
    .where('s.expires_at', '>', new Date(Date.now() - RECENT_MS))
    .groupBy('s.status', 'i.state')
    .select('s.status as status', 'i.state as state', db.raw('count(*) as count'));
  const sessions = await db('instances').groupBy('state').select('state', db.raw('count(*) as count'));
  const whole = await db('deliveries').whereIn('status', WHOLE_DELIVERY_STATUSES).groupBy('status').select('status', db.raw('count(*) as count'));
  const finished = await db('events as e')
    .join('deliveries as d', 'd.event_id', 'e.id')
    .where('e.created_at', '>', new Date(Date.now() - RECENT_MS))
    .whereNotIn('d.status', WHOLE_DELIVERY_STATUSES)
    .groupBy('d.status')
    .select('d.status as status', db.raw('count(*) as count'));
  const deliveries = [...whole, ...finished];
  const media = await db('media').groupBy('direction').select('direction', db.raw('coalesce(sum(size), 0) as bytes'));
  const now = Date.now();
  return {
    queueDepth: new Map(queued.map((r: any) => [r.state, Number(r.count)])),
    oldestQueuedSeconds: new Map(queued.map((r: any) => [r.state, Math.max(0, (now - new Date(r.oldest).getTime()) / 1000)])),
    sendItems: items.map((r: any) => ({ status: r.status, instanceState: r.state, count: Number(r.count) })),
    sessions: new Map(sessions.map((r: any) => [r.state, Number(r.count)])),
    deliveries: new Map(deliveries.map((r: any) => [r.status, Number(r.count)])),
    mediaBytes: new Map(media.map((r: any) => [r.direction, Number(r.bytes)])),
  };
}

/** Messages not yet acknowledged: the dispatcher's event consumer's, and the commands stream's
 *  (a work queue holds what no session acknowledged yet: one question for every instance, where
 *  asking each instance's consumer cost a call per instance and a scrape). Returns its read
 *  (undefined: the bus did not answer). */
function registerBusLag(registry: Registry, bus: Bus, refreshMs: number): () => Promise<Map<string, number> | undefined> {
  const read = sharedRead(async () => new Map([
    ['events', await bus.pending('events', 'dispatcher')],
    ['commands', await bus.stored('commands')],
  ]), refreshMs);
  new Gauge({
    name: 'switchboard_bus_consumer_lag',
    help: 'Messages not yet acknowledged by the consumers of a stream',
    labelNames: ['stream'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      for (const [stream, lag] of (await read()) ?? []) this.set({ stream }, lag);
    },
  });
  return read;
}
