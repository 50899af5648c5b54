// The metrics registry: per-process (two registries never share series), the database gauges read
// at scrape time from a real PostgreSQL database, bus lag, and the standalone /metrics server.
import assert from 'node:assert/strict';
import { createLogger } from '../src/logger.ts';
import { MemoryBus } from '../src/bus/index.ts';
import type { Db } from '../src/db/connect.ts';
import { createMetrics } from '../src/metrics.ts';
import { checkReadiness, startHealthServer } from '../src/health-server.ts';
import { createServer } from 'node:net';
import knex from 'knex';
import { openTestDatabase } from '../../../test/support/services.ts';
import { sample } from '../../../test/support/prometheus.ts';


describe('metrics', () => {
  let database: { db: Db; drop(): Promise<void> };
  let db: Db;
  before(async () => {
    database = await openTestDatabase();
    db = database.db;
  });
  after(async () => {
    await database?.drop();
  });

  it('keeps one registry per Metrics object', async () => {
    const a = createMetrics({ processMetrics: false });
    const b = createMetrics({ processMetrics: false });
    a.httpRequests.inc({ method: 'GET', route: '/health', status: '200' });
    a.webhookAttempts.inc({ outcome: 'delivered' });
    assert.equal(sample(await a.render(), 'switchboard_http_requests_total', { route: '/health', status: '200' }), 1);
    assert.equal(sample(await b.render(), 'switchboard_http_requests_total', { route: '/health' }), undefined);
    assert.equal(sample(await a.render(), 'switchboard_webhook_attempts_total', { outcome: 'delivered' }), 1);
  });

  it('reads queue depth, send outcomes, sessions, deliveries and media bytes from the database', async () => {
    const metrics = createMetrics({ db, processMetrics: false, gaugeRefreshMs: 0 });
    const before = await metrics.render();
    assert.equal(sample(before, 'switchboard_send_queue_depth', { instance_state: 'connected' }), 0);
    assert.equal(sample(before, 'switchboard_sessions', { state: 'connected' }), 0);

    await db('instances').insert([
      { id: 'inst-a', name: 'a', state: 'connected', token_hash: 'a'.repeat(64), token_sealed: 's' },
      { id: 'inst-b', name: 'b', state: 'reconnecting', token_hash: 'b'.repeat(64), token_sealed: 's' },
    ]);
    const item = (id: string, instance: string, status: string, createdAt = new Date(), expiresAt = new Date(Date.now() + 3600_000)) => ({
      id, instance_id: instance, messenger_id: id, phone: '5511999990000', type: 'text', payload: '{}', status, expires_at: expiresAt, created_at: createdAt,
    });
    const hoursAgo = (h: number) => new Date(Date.now() - h * 3_600_000);
    await db('send_items').insert([
      item('m1', 'inst-a', 'queued', new Date(Date.now() - 120_000)),
      item('m2', 'inst-a', 'sent'),
      item('m3', 'inst-b', 'queued'),
      item('m4', 'inst-b', 'queued'),
      item('m5', 'inst-b', 'failed'),
      // Expired an hour ago: counted (the expiry sweep made it `expired` at its expiry).
      item('m6', 'inst-a', 'expired', hoursAgo(25), hoursAgo(1)),
      // Past the window: history, not counted (a count of all history took seconds).
      item('m7', 'inst-a', 'sent', hoursAgo(50), hoursAgo(26)),
    ]);
    await db('events').insert([
      { id: 'evt-1', instance_id: 'inst-a', type: 'message.sent', body: '{}' },
      { id: 'evt-28h', instance_id: 'inst-a', type: 'message.sent', body: '{}', created_at: hoursAgo(28) },
      { id: 'evt-old-1', instance_id: 'inst-a', type: 'message.sent', body: '{}', created_at: hoursAgo(8 * 24) },
      { id: 'evt-old-3', instance_id: 'inst-a', type: 'message.sent', body: '{}', created_at: hoursAgo(30) },
      { id: 'evt-old-2', instance_id: 'inst-a', type: 'message.sent', body: '{}', created_at: hoursAgo(8 * 24) },
    ]);
    await db('deliveries').insert([
      { event_id: 'evt-1', instance_id: 'inst-a', status: 'exhausted', attempts: 8 },
      { event_id: 'evt-28h', instance_id: 'inst-a', status: 'exhausted', attempts: 8 }, // the default schedule's last attempt
      { event_id: 'evt-old-1', instance_id: 'inst-a', status: 'exhausted', attempts: 8 }, // exhausted ones are counted whole
      { event_id: 'evt-old-3', instance_id: 'inst-a', status: 'delivered', attempts: 1 }, // the many others, for a day
      { event_id: 'evt-old-2', instance_id: 'inst-a', status: 'retrying', attempts: 7 }, // still open: counted
    ]);
    await db('media').insert({ id: 'med-1', instance_id: 'inst-a', direction: 'inbound', mimetype: 'image/png', size: 1234 });

    const text = await metrics.render();
    assert.equal(sample(text, 'switchboard_send_queue_depth', { instance_state: 'connected' }), 1);
    assert.equal(sample(text, 'switchboard_send_queue_depth', { instance_state: 'reconnecting' }), 2);
    assert.ok(sample(text, 'switchboard_send_queue_oldest_age_seconds', { instance_state: 'connected' })! >= 119);
    assert.equal(sample(text, 'switchboard_send_items', { status: 'sent', instance_state: 'connected' }), 1);
    assert.equal(sample(text, 'switchboard_send_items', { status: 'failed', instance_state: 'reconnecting' }), 1);
    assert.equal(sample(text, 'switchboard_sessions', { state: 'connected' }), 1);
    assert.equal(sample(text, 'switchboard_sessions', { state: 'reconnecting' }), 1);
    assert.equal(sample(text, 'switchboard_webhook_deliveries', { status: 'exhausted' }), 3);
    assert.equal(sample(text, 'switchboard_webhook_deliveries', { status: 'delivered' }), 0);
    assert.equal(sample(text, 'switchboard_send_items', { status: 'expired', instance_state: 'connected' }), 1);
    assert.equal(sample(text, 'switchboard_webhook_deliveries', { status: 'retrying' }), 1);
    assert.equal(sample(text, 'switchboard_media_stored_bytes', { direction: 'inbound' }), 1234);
  });

  it('reports bus consumer lag, open breakers and URLs with earned concurrency', async () => {
    const bus = new MemoryBus({ log: createLogger({ level: 'silent' }) });
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    try {
      const metrics = createMetrics({ db, bus, processMetrics: false, gaugeRefreshMs: 0 });
      let open = 2;
      metrics.trackBreakers(() => open);
      metrics.trackEarnedConcurrency(() => 3);
      metrics.trackEarnedConcurrency(() => 1); // a second scheduler in the process
      const sub = await bus.consume({ stream: 'events', filter: 'evt.>', durable: 'dispatcher', maxAckPending: 1 }, () => held);
      await bus.publish('evt.inst-a.message.sent', new Uint8Array(), { msgId: 'e1' });
      await bus.publish('evt.inst-a.message.sent', new Uint8Array(), { msgId: 'e2' });
      await bus.publish('cmd.inst-b', new Uint8Array(), { msgId: 'c1' });
      const subB = await bus.consume({ stream: 'commands', filter: 'cmd.inst-b', durable: 'session-inst-b' }, () => held);
      const text = await metrics.render();
      assert.equal(sample(text, 'switchboard_bus_consumer_lag', { stream: 'events' }), 2);
      assert.equal(sample(text, 'switchboard_bus_consumer_lag', { stream: 'commands' }), 1);
      assert.equal(sample(text, 'switchboard_webhook_circuit_breakers_open'), 2);
      assert.equal(sample(text, 'switchboard_webhook_urls_above_base_concurrency'), 4);
      open = 0;
      assert.equal(sample(await metrics.render(), 'switchboard_webhook_circuit_breakers_open'), 0);
      void sub;
      void subB;
    } finally {
      release();
      await bus.close().catch(() => undefined);
    }
  });

  it('serves its own counters while the database fails and the bus hangs, leaving their gauges out and saying which', async () => {
    const unreachable = knex({ client: 'pg', connection: 'postgres://postgres@127.0.0.1:1/none', pool: { min: 0, max: 1 }, acquireConnectionTimeout: 500, log: { error() {}, warn() {}, debug() {}, deprecate() {} } });
    const memory = new MemoryBus({ log: createLogger({ level: 'silent' }) });
    // A bus whose server stopped answering: asking it for a consumer's lag never returns.
    const hung = new Proxy(memory, { get: (bus, key) => (key === 'pending' ? () => new Promise<number>(() => undefined) : Reflect.get(bus, key)) });
    try {
      const metrics = createMetrics({ db: unreachable, bus: hung, processMetrics: false, gaugeRefreshMs: 0 });
      metrics.webhookAttempts.inc({ outcome: 'failed' });
      const text = await metrics.render();
      assert.equal(sample(text, 'switchboard_webhook_attempts_total', { outcome: 'failed' }), 1);
      assert.equal(sample(text, 'switchboard_metrics_source_up', { source: 'database' }), 0);
      assert.equal(sample(text, 'switchboard_metrics_source_up', { source: 'bus' }), 0);
      assert.equal(sample(text, 'switchboard_sessions', { state: 'connected' }), undefined, 'no value rather than a false one');
      assert.equal(sample(text, 'switchboard_bus_consumer_lag', { stream: 'events' }), undefined, 'no lag rather than a lag of 0');
      // The bus answers while the database does not: its events lag is still reported.
      const busOnly = await createMetrics({ db: unreachable, bus: memory, processMetrics: false, gaugeRefreshMs: 0 }).render();
      assert.deepEqual([sample(busOnly, 'switchboard_metrics_source_up', { source: 'bus' }), sample(busOnly, 'switchboard_bus_consumer_lag', { stream: 'events' })], [1, 0]);
      assert.equal(sample(busOnly, 'switchboard_bus_consumer_lag', { stream: 'commands' }), 0, 'the commands stream answers for every instance');
      const healthy = await createMetrics({ db, bus: memory, processMetrics: false, gaugeRefreshMs: 0 }).render();
      assert.deepEqual([sample(healthy, 'switchboard_metrics_source_up', { source: 'database' }), sample(healthy, 'switchboard_metrics_source_up', { source: 'bus' })], [1, 1]);
    } finally {
      await unreachable.destroy();
      await memory.close();
    }
  });

  it('serves /metrics on the health port of worker processes', async () => {
    const metrics = createMetrics();
    metrics.webhookExhausted.inc();
    const port = await freePort();
    const server = startHealthServer(port, async () => undefined, metrics);
    try {
      await server.listening;
      // A second server on the same port says which variable to change, instead of crashing.
      await assert.rejects(startHealthServer(port, async () => undefined).listening, new RegExp(`^Error: HEALTH_PORT: cannot listen on ${port} \\(.*EADDRINUSE`));
      const res = await fetch(`http://127.0.0.1:${port}/metrics`);
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type') ?? '', /text\/plain/);
      const text = await res.text();
      assert.equal(sample(text, 'switchboard_webhook_exhausted_total'), 1);
      assert.ok(sample(text, 'switchboard_process_resident_memory_bytes')! > 0);
      assert.equal((await fetch(`http://127.0.0.1:${port}/health`)).status, 200);
    } finally {
      await server.close();
    }
  });

  it('names on /ready each dependency that did not answer, and offers only the paths it serves', async () => {
    const port = await freePort();
    const server = startHealthServer(port, () => checkReadiness({ database: async () => 1, bus: () => Promise.reject(new Error('timeout')) }));
    try {
      await server.listening;
      const ready = await fetch(`http://127.0.0.1:${port}/ready`);
      assert.equal(ready.status, 503);
      assert.equal((await ready.json()).detail, 'Not ready: bus did not answer');
      // A check that never answers (a database silent on an open connection) fails in time too.
      await assert.rejects(checkReadiness({ database: () => new Promise(() => {}), bus: async () => 1 }, 50), /^Error: database did not answer$/);
      const metrics = await fetch(`http://127.0.0.1:${port}/metrics`);
      assert.equal(metrics.status, 404, 'this one serves no metrics');
      assert.doesNotMatch((await metrics.json()).detail, /metrics/);
    } finally {
      await server.close();
    }
  });
});

function freePort(): Promise<number> {
  return new Promise<number>((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const p = (probe.address() as { port: number }).port;
      probe.close(() => resolve(p));
    });
  });
}
