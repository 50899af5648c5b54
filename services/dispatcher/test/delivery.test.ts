// The delivery scheduler against real PostgreSQL and real HTTPS receivers (the test CA must be
// trusted: NODE_EXTRA_CA_CERTS=test/fixtures/tls/ca.pem). Retry timing runs on a shortened
// schedule; assertions are about order and counts, never about how fast things were.
import assert from 'node:assert/strict';
import { cancelDeliveriesForRemovedUrls, cancelPendingDeliveries, eventsWithDelivery, openDatabase, retryEvent, retryExhaustedDeliveries, Problem, toEventWithDelivery, type EventEnvelope, type EventWithDelivery } from '@switchboard/core';
import type { Knex } from 'knex';
import { startHttpsReceiver, type HttpsReceiver } from '../../../test/support/https-receiver.ts';
import { createEgressClient, type EgressOptions } from '../src/egress.ts';
import { DeliveryScheduler, type SchedulerOptions } from '../src/scheduler.ts';
import { verifySignature } from '../src/signing.ts';
import { routeAndRecord } from '../src/intake.ts';
import { lockInstanceForRouting } from '../../gateway/src/routes/webhooks.ts';
import { createInstance, crypto, deliveryOf, FAST_SCHEDULE, log, openTestDatabase, recordRoutedEvent, recordTestEvent, waitFor, waitForStatus } from './support.ts';

/** Resolves `localhost` to IPv4 only (the receiver listens on 127.0.0.1). */
const localResolve = async (host: string) => (host === 'localhost' ? ['127.0.0.1'] : ['203.0.113.1']);

interface Running {
  scheduler: DeliveryScheduler;
  stop(): Promise<void>;
}

function startScheduler(
  db: Knex,
  opts: Partial<SchedulerOptions> & { schedule?: number[]; egress?: EgressOptions; retryAfterCapMs?: number; leaseOwner?: string } = {},
): Running {
  const egress = createEgressClient({ allowPrivateTargets: true, timeoutMs: 1000, resolve: localResolve, ...opts.egress });
  const scheduler = new DeliveryScheduler(
    { db, crypto, egress, log, leaseOwner: opts.leaseOwner ?? `replica-${Math.random()}`, timing: { schedule: opts.schedule ?? FAST_SCHEDULE, retryAfterCapMs: opts.retryAfterCapMs } },
    { pollIntervalMs: 20, leaseMs: 5000, attemptTimeoutMs: opts.egress?.timeoutMs ?? 1000, ...opts },
  );
  scheduler.start();
  return {
    scheduler,
    async stop() {
      await scheduler.stop();
      await egress.close();
    },
  };
}

/** Counts the claim statements made on `db` until stop(): walks over every destination and
 *  claims for named ones. */
function countClaims(db: Knex): { walks: number; named: number; readonly all: number; stop(): void } {
  const onQuery = (q: { sql: string }) => {
    if (!q.sql.includes('WITH RECURSIVE destinations')) return;
    if (q.sql.includes('AS named(url)')) counter.named++;
    else counter.walks++;
  };
  const counter = {
    walks: 0,
    named: 0,
    get all() {
      return counter.walks + counter.named;
    },
    stop: () => void db.off('query', onQuery),
  };
  db.on('query', onQuery);
  return counter;
}

/** The database, with claim statements that can be made slow or fail once: to place an event
 *  inside a claim, or to lose one as a database restart would. */
function claimsUnderControl(db: Knex): { db: Knex; delayMs: number; failNext: boolean } {
  const control = { db, delayMs: 0, failNext: false };
  control.db = new Proxy(db, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (prop !== 'raw') return typeof value === 'function' ? value.bind(target) : value;
      return (sql: string, bindings: readonly Knex.RawBinding[]) => {
        const raw = target.raw(sql, bindings);
        if (!sql.includes('WITH RECURSIVE destinations')) return raw;
        const run = async (options: Readonly<Record<string, unknown>>) => {
          await new Promise((resolve) => setTimeout(resolve, control.delayMs));
          if (control.failNext) {
            control.failNext = false;
            throw new Error('Connection terminated unexpectedly (test)');
          }
          return raw.options(options);
        };
        return { options: run };
      };
    },
  });
  return control;
}

describe('delivery scheduler (PostgreSQL + HTTPS receiver)', function () {
  this.timeout(30_000);
  let db: Knex;
  let drop: () => Promise<void>;
  let dbUrl: string;
  let receiver: HttpsReceiver;
  let running: Running[] = [];
  const start = (...args: Parameters<typeof startScheduler>) => {
    const r = startScheduler(...args);
    running.push(r);
    return r;
  };

  before(async () => {
    ({ db, drop, url: dbUrl } = await openTestDatabase());
  });
  after(async () => {
    await drop();
  });
  beforeEach(async () => {
    receiver = await startHttpsReceiver();
  });
  afterEach(async () => {
    for (const r of running) await r.stop();
    running = [];
    await receiver.close();
  });

  it('POSTs the exact body, signed over the raw bytes, with the service headers', async () => {
    const inst = await createInstance(db, { webhook: { url: receiver.url('/general'), delivery: receiver.url('/delivery') } });
    const event = await recordRoutedEvent(db, inst.id, 'message.sent', { messageId: 'm1', text: 'olá ✓' });
    start(db);
    const [req] = await receiver.waitForRequests(1);
    const stored = await db('events').where({ id: event.id }).first('body');
    assert.equal(req.method, 'POST');
    assert.equal(req.path, '/delivery');
    assert.ok(req.rawBody.equals(Buffer.from(stored.body, 'utf8')), 'body bytes are the stored envelope');
    assert.deepEqual(JSON.parse(req.rawBody.toString('utf8')), event);
    assert.equal(req.headers['content-type'], 'application/json');
    assert.equal(req.headers['x-service-event-id'], event.id);
    assert.match(req.headers['x-service-timestamp'], /^\d{10}$/);
    assert.ok(verifySignature(inst.secret, req.headers['x-service-timestamp'], req.rawBody, req.headers['x-service-signature'], 300));
    const row = await waitForStatus(db, event.id, 'delivered');
    assert.equal(row.attempts, 1);
    assert.equal(row.last_status_code, 200);
    assert.equal(row.last_error, null);
    assert.ok(row.delivered_at);
  });

  it('retries failures on the schedule with the same id and body, and stops at the first 2xx', async () => {
    receiver.respondWith((_r, i) => ({ status: i < 3 ? 500 : 204 }));
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    const event = await recordRoutedEvent(db, inst.id);
    start(db);
    const row = await waitForStatus(db, event.id, 'delivered');
    assert.equal(row.attempts, 4);
    assert.equal(row.last_status_code, 204);
    assert.equal(receiver.requests.length, 4);
    const bodies = new Set(receiver.requests.map((r) => r.rawBody.toString('base64')));
    assert.equal(bodies.size, 1, 'identical bytes on every attempt');
    assert.ok(receiver.requests.every((r) => r.headers['x-service-event-id'] === event.id));
    for (const r of receiver.requests) assert.ok(verifySignature(inst.secret, r.headers['x-service-timestamp'], r.rawBody, r.headers['x-service-signature'], 300));
  });

  it('keeps a retry schedule shorter than the poll interval: each retry wakes the scheduler when due', async () => {
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    const first = await recordRoutedEvent(db, inst.id);
    // The first series fails once, then is delivered. The second always fails, the first time
    // with Retry-After: 1, so its first retry falls due after the first series has ended and
    // needs a wake-up of its own (not only the earliest one).
    const seen = new Map<string, number>();
    receiver.respondWith((req) => {
      const id = req.headers['x-service-event-id'];
      const n = (seen.get(id) ?? 0) + 1;
      seen.set(id, n);
      if (id === first.id) return { status: n === 1 ? 500 : 204 };
      return n === 1 ? { status: 503, retryAfter: '1' } : { status: 500 };
    });
    // A poll that never comes during the test: only the retries' own wake-ups can run retries.
    const r = start(db, { pollIntervalMs: 600_000, breakerThreshold: 100 });
    await receiver.waitForRequests(1);
    const second = await recordRoutedEvent(db, inst.id);
    r.scheduler.kick();
    assert.equal((await waitForStatus(db, first.id, 'delivered')).attempts, 2);
    assert.equal((await waitForStatus(db, second.id, 'exhausted')).attempts, 8);
  });

  it('records a failed attempt as retrying with its error and next attempt time', async () => {
    receiver.respondWith(() => ({ status: 500 }));
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    const event = await recordRoutedEvent(db, inst.id);
    start(db, { schedule: [0, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000] });
    const row = await waitForStatus(db, event.id, 'retrying');
    assert.equal(row.attempts, 1);
    assert.equal(row.last_status_code, 500);
    assert.equal(row.last_error, 'HTTP 500');
    const wait = new Date(row.next_attempt_at).getTime() - new Date(row.updated_at).getTime();
    assert.ok(wait >= 48_000 && wait <= 72_000, `next attempt ${wait} ms later: 60 s ± 20 %`);
  });

  it('exhausts after exactly 8 attempts; a manual retry starts a fresh series with the same id and body', async () => {
    receiver.respondWith(() => ({ status: 503 }));
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    const event = await recordRoutedEvent(db, inst.id);
    const r = start(db, { breakerThreshold: 100 });
    const row = await waitForStatus(db, event.id, 'exhausted');
    assert.equal(row.attempts, 8);
    assert.equal(row.next_attempt_at, null);
    await new Promise((res) => setTimeout(res, 200));
    assert.equal(receiver.requests.length, 8, 'no 9th attempt');
    const firstBody = receiver.requests[0].rawBody;

    receiver.respondWith(() => ({ status: 200 }));
    const retried = await retryEvent(db, inst.id, event.id);
    assert.equal(retried.delivery.status, 'pending');
    assert.equal(retried.delivery.attempts, 0);
    r.scheduler.kick();
    const done = await waitForStatus(db, event.id, 'delivered');
    assert.equal(done.attempts, 1);
    const last = receiver.requests[8];
    assert.equal(last.headers['x-service-event-id'], event.id);
    assert.ok(last.rawBody.equals(firstBody));
  });

  it('manual retry: 409 unless exhausted, 404 for unknown events and other instances', async () => {
    const a = await createInstance(db, { webhook: { url: receiver.url() } });
    const b = await createInstance(db, { webhook: { url: receiver.url() } });
    const event = await recordRoutedEvent(db, a.id);
    const expectProblem = async (p: Promise<unknown>, status: number, code: string) => {
      await assert.rejects(p, (err: unknown) => err instanceof Problem && err.status === status && err.code === code);
    };
    await expectProblem(retryEvent(db, a.id, event.id), 409, 'not_retryable'); // pending
    await db('deliveries').where({ event_id: event.id }).update({ status: 'retrying', attempts: 3 });
    await expectProblem(retryEvent(db, a.id, event.id), 409, 'not_retryable');
    await db('deliveries').where({ event_id: event.id }).update({ status: 'delivered' });
    await expectProblem(retryEvent(db, a.id, event.id), 409, 'not_retryable');
    await expectProblem(retryEvent(db, b.id, event.id), 404, 'not_found');
    await expectProblem(retryEvent(db, a.id, 'evt_missing'), 404, 'not_found');
  });

  it('bulk retry: every exhausted delivery of the instance, chunk after chunk, routed with the configuration of now', async () => {
    const a = await createInstance(db, { webhook: { url: receiver.url('/old'), received: receiver.url('/received') } });
    const b = await createInstance(db, { webhook: { url: receiver.url('/b') } });
    const sent = [];
    for (let i = 0; i < 5; i++) sent.push(await recordRoutedEvent(db, a.id));
    const received = [await recordRoutedEvent(db, a.id, 'message.received'), await recordRoutedEvent(db, a.id, 'message.received')];
    const delivered = await recordRoutedEvent(db, a.id);
    const elsewhere = await recordRoutedEvent(db, b.id);
    await db('deliveries').whereIn('event_id', [...sent, ...received, elsewhere].map((e) => e.id)).update({ status: 'exhausted', attempts: 8, next_attempt_at: null });
    await db('deliveries').where({ event_id: delivered.id }).update({ status: 'delivered', attempts: 1, next_attempt_at: null });
    // Since then: a new general URL, and received messages filtered out.
    await db('instances').where({ id: a.id }).update({ webhook: JSON.stringify({ url: receiver.url('/new') }), settings: JSON.stringify({ ignoreReceived: true }) });

    assert.deepEqual(await retryExhaustedDeliveries(db, a.id, 2), { retried: 5, notRetryable: 2 });
    for (const e of sent) assert.deepEqual(pick(await deliveryOf(db, e.id), 'status', 'attempts', 'url'), { status: 'pending', attempts: 0, url: receiver.url('/new') });
    for (const e of received) assert.equal((await deliveryOf(db, e.id)).status, 'exhausted', 'filtered now: left as it was');
    assert.equal((await deliveryOf(db, delivered.id)).status, 'delivered');
    assert.equal((await deliveryOf(db, elsewhere.id)).status, 'exhausted', "another instance's");

    start(db);
    for (const e of sent) await waitForStatus(db, e.id, 'delivered');
    assert.deepEqual(receiver.requests.map((r) => r.path), Array(5).fill('/new'));
    assert.deepEqual(await retryExhaustedDeliveries(db, a.id, 2), { retried: 0, notRetryable: 2 });
  });

  for (const [kind, retryOne] of [
    ['manual retry', (db: Knex, instanceId: string, eventId: string) => retryEvent(db, instanceId, eventId).then(() => 'retried')],
    ['bulk retry', (db: Knex, instanceId: string) => retryExhaustedDeliveries(db, instanceId).then((n) => (n.retried ? 'retried' : 'not_retryable'))],
  ] as const) {
    it(`${kind} waits for a webhook save under way and routes with what it saved; a send's update of the instance does not wait for it`, async () => {
      const inst = await createInstance(db, { webhook: { url: 'https://old.example.com/h' } });
      const event = await recordRoutedEvent(db, inst.id);
      await db('deliveries').where({ event_id: event.id }).update({ status: 'exhausted', next_attempt_at: null });
      const save = await db.transaction();
      try {
        // The save's steps (routes/webhooks.ts): lock the instance, write the configuration, cancel.
        await lockInstanceForRouting(save, inst.id);
        await save('instances').where({ id: inst.id }).update({ webhook: JSON.stringify({ url: '' }) });
        const retry = retryOne(db, inst.id, event.id).catch((err: unknown) => (err instanceof Problem ? err.code : String(err)));
        // The retry must be waiting for the save's lock (without the lock it would finish, and this times out).
        await waitForLockWait(db, 'the retry waiting for the instance lock');
        await cancelDeliveriesForRemovedUrls(save, inst.id, { url: '' });
        await save.commit();
        assert.equal(await retry, 'not_retryable', 'nothing goes to the removed URL');
      } finally {
        if (!save.isCompleted()) await save.rollback();
      }
      assert.equal((await deliveryOf(db, event.id)).status, 'exhausted');

      // A retry holding its lock (the event's delivery row locked by another transaction keeps it
      // waiting there) does not hold up a plain update of the instance, as the queue count's is.
      const holder = await db.transaction();
      try {
        await holder('deliveries').where({ event_id: event.id }).forUpdate().first();
        await db('instances').where({ id: inst.id }).update({ webhook: JSON.stringify({ url: 'https://new.example.com/h' }) });
        const waiting = retryOne(db, inst.id, event.id).catch(() => 'failed');
        await waitForLockWait(db, 'the retry waiting for the delivery row');
        assert.equal(await db('instances').where({ id: inst.id }).increment('queued_count', 0), 1, 'not blocked');
        await holder.commit();
        assert.equal(await waiting, 'retried');
      } finally {
        if (!holder.isCompleted()) await holder.rollback();
      }
    });
  }

  it('does not follow redirects: a 3xx is a failed attempt', async () => {
    receiver.respondWith((r) => (r.path === '/hook' ? { status: 302, location: receiver.url('/elsewhere') } : { status: 200 }));
    const inst = await createInstance(db, { webhook: { url: receiver.url('/hook') } });
    const event = await recordRoutedEvent(db, inst.id);
    start(db, { schedule: [0, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000] });
    const row = await waitForStatus(db, event.id, 'retrying');
    assert.equal(row.last_status_code, 302);
    assert.match(row.last_error, /redirect/);
    assert.deepEqual(receiver.requests.map((r) => r.path), ['/hook']);
  });

  it('refuses a host name resolving to a private address when private targets are not allowed', async () => {
    const inst = await createInstance(db, { webhook: { url: `https://localhost/hook`, received: 'https://rebind.example.com/hook' } });
    const local = await recordRoutedEvent(db, inst.id, 'message.sent');
    const rebound = await recordRoutedEvent(db, inst.id, 'message.received', { type: 'text', from: '1@s.whatsapp.net', fromMe: false });
    // Real DNS for localhost; a resolver that answers a private address for the other name.
    const resolve = async (host: string) => (host === 'rebind.example.com' ? ['10.0.0.7'] : (await import('node:dns/promises')).lookup(host, { all: true }).then((a) => a.map((x) => x.address)));
    start(db, { schedule: [0, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000], egress: { allowPrivateTargets: false, resolve } });
    for (const e of [local, rebound]) {
      const row = await waitForStatus(db, e.id, 'retrying');
      assert.match(row.last_error, /^refused_address/);
      assert.equal(row.last_status_code, null);
    }
    assert.equal(receiver.requests.length, 0);
  });

  it('refuses any port but 443 when private targets are not allowed', async () => {
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    const event = await recordRoutedEvent(db, inst.id);
    start(db, { schedule: [0, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000], egress: { allowPrivateTargets: false } });
    const row = await waitForStatus(db, event.id, 'retrying');
    assert.match(row.last_error, /port 443/);
    assert.equal(receiver.requests.length, 0);
  });

  it('honours Retry-After: the next attempt does not come sooner', async () => {
    receiver.respondWith((_r, i) => (i === 0 ? { status: 429, retryAfter: '1' } : { status: 200 }));
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    const event = await recordRoutedEvent(db, inst.id);
    start(db);
    const retrying = await waitForStatus(db, event.id, 'retrying');
    const wait = new Date(retrying.next_attempt_at).getTime() - new Date(retrying.updated_at).getTime();
    assert.ok(wait >= 1000, `rescheduled ${wait} ms later, Retry-After asked for 1000`);
    await waitForStatus(db, event.id, 'delivered');
    const [first, second] = receiver.requests;
    assert.ok(second.receivedAt - first.receivedAt >= 1000);
  });

  it('times out a receiver that never answers and records the error', async () => {
    receiver.respondWith(() => ({ blackHole: true }));
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    const event = await recordRoutedEvent(db, inst.id);
    start(db, { schedule: [0, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000], egress: { timeoutMs: 300 } });
    const row = await waitForStatus(db, event.id, 'retrying');
    assert.match(row.last_error, /^timeout/);
  });

  it('a slow destination only fills its own slots; others are delivered meanwhile, even on the same receiver', async () => {
    // Two URLs of one receiver = two destinations (two tenants may share a webhook host).
    receiver.respondWith((r) => (r.path === '/slow' ? { blackHole: true } : { status: 200 }));
    const slow = await createInstance(db, { webhook: { url: receiver.url('/slow') } });
    const fast = await createInstance(db, { webhook: { url: receiver.url('/fast') } });
    const slowEvents: EventEnvelope[] = [];
    for (let i = 0; i < 6; i++) slowEvents.push(await recordRoutedEvent(db, slow.id));
    const fastEvents: EventEnvelope[] = [];
    for (let i = 0; i < 10; i++) fastEvents.push(await recordRoutedEvent(db, fast.id));
    start(db, { perDestinationConcurrency: 2, maxConcurrent: 4, egress: { timeoutMs: 2500 } });
    for (const e of fastEvents) await waitForStatus(db, e.id, 'delivered');
    const slowRequests = receiver.requests.filter((r) => r.path === '/slow');
    assert.equal(slowRequests.length, 2, 'the slow destination got exactly its cap of concurrent attempts');
    const slowRows = await db('deliveries').whereIn('event_id', slowEvents.map((e) => e.id));
    assert.ok(slowRows.every((r) => r.status === 'pending' && r.attempts === 0), 'slow attempts still under way');
  });

  it('slow URLs of one receiver, their caps together past any per-host connection limit, do not hold back its other URLs', async () => {
    receiver.respondWith((r) => (r.path.startsWith('/hole') ? { blackHole: true } : { status: 200 }));
    const holeEvents: EventEnvelope[] = [];
    for (let i = 0; i < 5; i++) {
      const hole = await createInstance(db, { webhook: { url: receiver.url(`/hole-${i}`) } });
      for (let j = 0; j < 4; j++) holeEvents.push(await recordRoutedEvent(db, hole.id));
    }
    const fast = await createInstance(db, { webhook: { url: receiver.url('/fast') } });
    const fastEvents: EventEnvelope[] = [];
    for (let i = 0; i < 3; i++) fastEvents.push(await recordRoutedEvent(db, fast.id));
    start(db, { perDestinationConcurrency: 4, maxConcurrent: 64, leaseMs: 60_000, egress: { timeoutMs: 20_000 } });
    for (const e of fastEvents) await waitForStatus(db, e.id, 'delivered');
    const holeRows = await db('deliveries').whereIn('event_id', holeEvents.map((e) => e.id));
    assert.ok(holeRows.every((r) => r.status === 'pending' && r.attempts === 0), 'delivered while every slow attempt was still under way, not after their time-outs');
    await receiver.waitForRequests(holeEvents.length + fastEvents.length);
    assert.equal(receiver.requests.filter((r) => r.path.startsWith('/hole')).length, 20, 'each slow URL got its whole cap');
  });

  it('never attempts a waiting claim whose lease could run out mid-attempt: it is handed back and claimed afresh', async () => {
    // One slot, 400 ms per answer, a 1.2 s lease and a 0.7 s attempt budget: of a claim batch,
    // the third waiting delivery would start with under 0.7 s of lease left.
    receiver.respondWith(() => ({ status: 200, delayMs: 400 }));
    const inst = await createInstance(db, { webhook: { url: receiver.url('/slow-ok') } });
    const events: EventEnvelope[] = [];
    for (let i = 0; i < 6; i++) events.push(await recordRoutedEvent(db, inst.id));
    start(db, { perDestinationConcurrency: 1, leaseMs: 1200, attemptTimeoutMs: 700, egress: { timeoutMs: 700 } });
    for (const e of events) await waitForStatus(db, e.id, 'delivered');
    const ids = receiver.requests.map((r) => r.headers['x-service-event-id']);
    assert.equal(ids.length, 6, 'each delivery attempted exactly once');
    assert.deepEqual(new Set(ids), new Set(events.map((e) => e.id)));
  });

  it('claims ahead only for a destination that answers quickly: a silent one holds just its concurrency', async () => {
    receiver.respondWith((r) => (r.path === '/silent' ? { blackHole: true } : { status: 200, delayMs: 200 }));
    const silent = await createInstance(db, { webhook: { url: receiver.url('/silent') } });
    const quick = await createInstance(db, { webhook: { url: receiver.url('/quick', 'localhost') } });
    for (let i = 0; i < 12; i++) await recordRoutedEvent(db, silent.id);
    for (let i = 0; i < 12; i++) await recordRoutedEvent(db, quick.id);
    start(db, { perDestinationConcurrency: 2, claimBatchSize: 8, egress: { timeoutMs: 3000 }, leaseMs: 10_000 });
    const leased = async (instanceId: string) =>
      Number((await db('deliveries').where({ instance_id: instanceId, status: 'pending' }).where('next_attempt_at', '>', db.fn.now()).count({ n: '*' }).first())!.n);
    await receiver.waitForRequests(4, 10_000, (r) => r.path === '/quick');
    await waitFor('the quick destination to be claimed ahead', async () => (await leased(quick.id)) > 2);
    assert.equal(await leased(silent.id), 2, 'the silent destination: its 2 attempts under way, nothing waiting');
  });

  describe('concurrency a URL earns (a far receiver with a backlog)', () => {
    /** 120 deliveries to one URL that answers in 100 ms with `status`, from a scheduler with these
     *  options; how many requests the receiver had at once at most. */
    const peakInFlight = async (path: string, status: number, opts: Partial<SchedulerOptions>) => {
      await db('deliveries').whereIn('status', ['pending', 'retrying']).update({ status: 'cancelled', next_attempt_at: null });
      receiver.respondWith(() => ({ status, delayMs: 100 }));
      const inst = await createInstance(db, { webhook: { url: receiver.url(path) } });
      const retryLate = [0, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000];
      const events: EventEnvelope[] = [];
      for (let i = 0; i < 120; i++) events.push(await recordRoutedEvent(db, inst.id, 'message.sent', {}, retryLate));
      start(db, { schedule: retryLate, leaseMs: 60_000, egress: { timeoutMs: 5000 }, ...opts });
      await receiver.waitForRequests(events.length, 20_000);
      const ids = receiver.requests.map((r) => r.headers['x-service-event-id']);
      assert.deepEqual(new Set(ids), new Set(events.map((e) => e.id)), 'each delivery attempted');
      assert.equal(ids.length, events.length, 'exactly once');
      return receiver.maxInFlight;
    };

    it('grows past its base while it answers promptly, up to the most', async () => {
      const peak = await peakInFlight('/far', 200, { perDestinationConcurrency: 4, perDestinationMaxConcurrency: 12 });
      assert.ok(peak > 4 && peak <= 12, `at most 12 at once, and more than 4: ${peak}`);
    });

    it('keeps its base when the receiver says it is overloaded (503)', async () => {
      const peak = await peakInFlight('/busy', 503, { perDestinationConcurrency: 4, perDestinationMaxConcurrency: 12 });
      assert.equal(peak, 4);
    });

    it('is lent slots only while half the overall cap is free', async () => {
      const lent = await peakInFlight('/lent', 200, { perDestinationConcurrency: 4, perDestinationMaxConcurrency: 32, maxConcurrent: 12 });
      assert.ok(lent > 4 && lent <= 6, `past its base, but to at most half of 12: ${lent}`);
    });

    it('keeps its base when the most is the base', async () => {
      const fixed = await peakInFlight('/fixed', 200, { perDestinationConcurrency: 4, perDestinationMaxConcurrency: 4 });
      assert.equal(fixed, 4);
    });
  });

  it('asks the database again only when a claim may have left rows or new ones were announced', async () => {
    // Open deliveries left by earlier tests would be claimed too (and counted): close them.
    await db('deliveries').whereIn('status', ['pending', 'retrying']).update({ status: 'cancelled', next_attempt_at: null });
    const inst = await createInstance(db, { webhook: { url: receiver.url('/drained') } });
    const events: EventEnvelope[] = [];
    for (let i = 0; i < 3; i++) events.push(await recordRoutedEvent(db, inst.id));
    const claims = countClaims(db);
    try {
      // No poll: only the start, finished attempts and kicks can start a claim.
      const { scheduler } = start(db, { perDestinationConcurrency: 2, claimBatchSize: 8, pollIntervalMs: 600_000 });
      for (const e of events) await waitForStatus(db, e.id, 'delivered');
      await new Promise((r) => setTimeout(r, 100));
      // The first claim fills the two slots; the first answer makes room for a claim batch, and
      // that claim takes the third row and finds no more: the other two attempts claim nothing.
      assert.equal(claims.all, 2, 'no claim after an attempt once the destination was found drained');

      const late = await recordRoutedEvent(db, inst.id);
      scheduler.kick(); // what the intake does after writing a row it did not hand off
      await waitForStatus(db, late.id, 'delivered');
      assert.equal(claims.all, 3);
    } finally {
      claims.stop();
    }
  });

  it('does not ask the database after each handed-off delivery once their destination was found drained', async () => {
    await db('deliveries').whereIn('status', ['pending', 'retrying']).update({ status: 'cancelled', next_attempt_at: null });
    const inst = await createInstance(db, { webhook: { url: receiver.url('/handed-off') } });
    const claims = countClaims(db);
    try {
      const { scheduler } = start(db, { pollIntervalMs: 600_000 });
      // Steady low traffic: each event is routed while the scheduler has room, so the intake
      // writes its delivery leased and hands it over; no claim is needed to find it.
      for (let i = 0; i < 5; i++) {
        const envelope = await recordTestEvent(db, inst.id);
        await routeAndRecord({ db, schedule: FAST_SCHEDULE, handOff: scheduler }, envelope);
        await waitForStatus(db, envelope.id, 'delivered');
        await new Promise((r) => setTimeout(r, 50));
      }
      // The start's claim, and one after the first attempt that finds the destination drained.
      assert.ok(claims.all <= 2, `claims: ${claims.all}`);
    } finally {
      claims.stop();
    }
  });

  it('walks every destination only when it cannot tell where rows are due: refills, retries and the intake\'s rows name theirs', async () => {
    await db('deliveries').whereIn('status', ['pending', 'retrying']).update({ status: 'cancelled', next_attempt_at: null });
    // Destinations that keep failing: open deliveries, none due for an hour. A walk probes each.
    for (let i = 0; i < 20; i++) {
      const failing = await createInstance(db, { webhook: { url: receiver.url(`/failing-${i}`) } });
      const event = await recordRoutedEvent(db, failing.id);
      await db('deliveries').where({ event_id: event.id }).update({ status: 'retrying', attempts: 3, next_attempt_at: db.raw("now() + interval '1 hour'") });
    }
    const inst = await createInstance(db, { webhook: { url: receiver.url('/named') } });
    receiver.respondWith((req) => ({ status: req.path === '/named' && receiver.requests.filter((r) => r.path === '/named').length === 1 ? 500 : 200 }));
    const claims = countClaims(db);
    try {
      // No poll: the start walks once; then only named destinations are claimed for.
      const { scheduler } = start(db, { perDestinationConcurrency: 2, claimBatchSize: 4, pollIntervalMs: 600_000 });
      await waitFor('the start\'s walk', () => claims.walks === 1);
      const events: EventEnvelope[] = [];
      for (let i = 0; i < 9; i++) {
        // Written due and not handed off: the intake names its destination to the scheduler.
        const envelope = await recordTestEvent(db, inst.id);
        assert.equal(await routeAndRecord({ db, schedule: FAST_SCHEDULE, onPending: (urls) => scheduler.claimFor(urls) }, envelope), 'awaiting_claim');
        events.push(envelope);
      }
      // The first attempt fails: its retry's wake-up claims it again.
      for (const e of events) await waitForStatus(db, e.id, 'delivered');
      assert.equal(receiver.requests.filter((r) => r.path === '/named').length, 10);
      assert.equal(claims.walks, 1, `walks: ${claims.walks}, named claims: ${claims.named}`);
      assert.ok(claims.named >= 2, `named claims: ${claims.named}`);
      assert.equal(receiver.requests.filter((r) => r.path.startsWith('/failing-')).length, 0, 'nothing due for the failing destinations');

      scheduler.kick(); // news it cannot place (the retry endpoint, another replica's rows): a walk
      await waitFor('the kick\'s walk', () => claims.walks === 2);
    } finally {
      claims.stop();
    }
  });

  it('refills a destination whose attempt finished while a claim for other destinations ran', async () => {
    await db('deliveries').whereIn('status', ['pending', 'retrying']).update({ status: 'cancelled', next_attempt_at: null });
    let answerFirst!: () => void;
    const firstAnswered = new Promise<void>((resolve) => (answerFirst = resolve));
    receiver.respondWith((req) => (req.path === '/a' && receiver.requests.filter((r) => r.path === '/a').length === 1 ? { status: 200, until: firstAnswered } : { status: 200 }));
    const a = await createInstance(db, { webhook: { url: receiver.url('/a') } });
    const others = [await createInstance(db, { webhook: { url: receiver.url('/b') } }), await createInstance(db, { webhook: { url: receiver.url('/c') } })];
    const rowsOfA = [];
    for (let i = 0; i < 3; i++) rowsOfA.push(await recordRoutedEvent(db, a.id));

    const claims = claimsUnderControl(db);
    const { scheduler } = start(claims.db, { perDestinationConcurrency: 1, claimBatchSize: 2, pollIntervalMs: 600_000 });
    await receiver.waitForRequests(1, 5000, (r) => r.path === '/a');
    for (const inst of others) await recordRoutedEvent(db, inst.id);
    claims.delayMs = 300; // so that A's attempt surely finishes during the next claim
    scheduler.claimFor([receiver.url('/b'), receiver.url('/c')]); // the intake's rows
    answerFirst(); // A has two rows left, and there is no poll
    for (const e of rowsOfA) await waitForStatus(db, e.id, 'delivered');
  });

  it('claims again for the destinations of a claim that failed', async () => {
    await db('deliveries').whereIn('status', ['pending', 'retrying']).update({ status: 'cancelled', next_attempt_at: null });
    const [x, y] = [await createInstance(db, { webhook: { url: receiver.url('/x') } }), await createInstance(db, { webhook: { url: receiver.url('/y') } })];
    const claims = claimsUnderControl(db);
    const made = countClaims(db);
    try {
      const { scheduler } = start(claims.db, { pollIntervalMs: 600_000 });
      await waitFor('the start\'s walk', () => made.walks === 1);
      const forX = await recordRoutedEvent(db, x.id);
      claims.failNext = true; // the database goes away for a moment
      scheduler.claimFor([receiver.url('/x')]);
      await waitFor('the failed claim', () => !claims.failNext);
      const forY = await recordRoutedEvent(db, y.id);
      scheduler.claimFor([receiver.url('/y')]);
      await waitForStatus(db, forY.id, 'delivered');
      await waitForStatus(db, forX.id, 'delivered'); // without a poll
    } finally {
      made.stop();
    }
  });

  it('spaces the poll\'s walks when they are dear, to a twentieth of the time', async () => {
    const claims = claimsUnderControl(db);
    claims.delayMs = 100; // every walk as dear as one over 20,000 destinations with open deliveries
    const made = countClaims(db);
    try {
      start(claims.db, { pollIntervalMs: 10 });
      await new Promise((resolve) => setTimeout(resolve, 2500));
      // Back to back, about 20 walks would run; spaced, the second begins 2 s after the first did
      // (and no poll during a walk adds one right after it).
      assert.ok(made.walks <= 2, `walks: ${made.walks}`);
    } finally {
      made.stop();
    }
  });

  it('claims again at once what waited too long for a slot and was handed back', async () => {
    await db('deliveries').whereIn('status', ['pending', 'retrying']).update({ status: 'cancelled', next_attempt_at: null });
    receiver.respondWith(() => ({ status: 200, delayMs: 400 }));
    const inst = await createInstance(db, { webhook: { url: receiver.url('/stale') } });
    const events: EventEnvelope[] = [];
    for (let i = 0; i < 6; i++) events.push(await recordRoutedEvent(db, inst.id));
    // One slot, answers in 400 ms: claims waiting behind it outlive what their lease allows.
    const { scheduler } = start(db, { perDestinationConcurrency: 1, leaseMs: 1200, attemptTimeoutMs: 700, egress: { timeoutMs: 700 }, pollIntervalMs: 600_000 });
    await receiver.waitForRequests(2, 5000);
    scheduler.kick(); // a walk claims ahead for the destination, now quick to answer
    for (const e of events) await waitForStatus(db, e.id, 'delivered'); // without a poll
  });

  it('at the overall cap, walks again only for a walk the cap cut short, not after every attempt', async () => {
    await db('deliveries').whereIn('status', ['pending', 'retrying']).update({ status: 'cancelled', next_attempt_at: null });
    receiver.respondWith((r) => (r.path.startsWith('/hanging') ? { blackHole: true } : { status: 200 }));
    const hanging = [await createInstance(db, { webhook: { url: receiver.url('/hanging-1') } }), await createInstance(db, { webhook: { url: receiver.url('/hanging-2') } })];
    const later = await createInstance(db, { webhook: { url: receiver.url('/later') } });
    const schedule = [0, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000, 60_000];
    const claims = countClaims(db);
    try {
      const { scheduler } = start(db, { schedule, maxConcurrent: 2, breakerThreshold: 100, egress: { timeoutMs: 150 }, pollIntervalMs: 600_000 });
      await waitFor('the start\'s walk', () => claims.walks === 1);
      // The intake hands both hanging URLs a delivery: the cap is full, no walk cut short.
      const handOff = async () => {
        for (const inst of hanging) assert.equal(await routeAndRecord({ db, schedule, handOff: scheduler }, await recordTestEvent(db, inst.id)), 'recorded');
      };
      await handOff();
      await waitFor('both attempts timed out', async () => (await db('deliveries').whereIn('instance_id', hanging.map((h) => h.id)).where({ status: 'retrying' })).length === 2);
      assert.equal(claims.walks, 1, 'no walk after the attempt that freed a slot of the full cap');

      // Full again, and a row nobody named (as the poll finds): the kick's walk waits for a slot.
      await handOff();
      const event = await recordRoutedEvent(db, later.id);
      scheduler.kick();
      await waitForStatus(db, event.id, 'delivered');
    } finally {
      claims.stop();
    }
  });

  it('refuses a lease that does not exceed the attempt time-out', () => {
    assert.throws(() => startScheduler(db, { leaseMs: 1000, attemptTimeoutMs: 1000 }), /leaseMs \(1000\) must exceed attemptTimeoutMs \(1000\)/);
  });

  it('opens the circuit breaker after consecutive time-outs and reschedules without counting attempts', async () => {
    receiver.respondWith(() => ({ status: 200, delayMs: 3000 })); // answers long after the time-out
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    const events: EventEnvelope[] = [];
    for (let i = 0; i < 5; i++) events.push(await recordRoutedEvent(db, inst.id));
    start(db, { perDestinationConcurrency: 1, breakerThreshold: 2, breakerCooldownMs: 60_000, egress: { timeoutMs: 300 } });
    await receiver.waitForRequests(2);
    await waitFor('every delivery handed back until the breaker closes', async () => {
      const rows = await db('deliveries').whereIn('event_id', events.map((e) => e.id));
      return rows.every((r) => new Date(r.next_attempt_at).getTime() > Date.now() + 30_000) ? rows : undefined;
    });
    const rows = await db('deliveries').whereIn('event_id', events.map((e) => e.id));
    assert.equal(receiver.requests.length, 2);
    assert.equal(rows.reduce((n, r) => n + r.attempts, 0), 2, 'only the two real attempts are counted');
    assert.ok(rows.every((r) => r.attempts === 0 || /^timeout/.test(r.last_error)), 'both were time-outs');
  });

  it('never opens the breaker on prompt failures: many failing deliveries to one URL keep their schedule', async () => {
    receiver.respondWith(() => ({ status: 500 }));
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    const events: EventEnvelope[] = [];
    for (let i = 0; i < 6; i++) events.push(await recordRoutedEvent(db, inst.id));
    // A breaker that counted these 500s would open at the 5th and hold every series for a minute.
    start(db, { breakerThreshold: 5, breakerCooldownMs: 60_000 });
    for (const event of events) assert.equal((await waitForStatus(db, event.id, 'exhausted')).attempts, 8);
    assert.equal(receiver.requests.length, 48);
  });

  it('keeps a breaker per URL: a hanging path does not hold back the other paths of its receiver', async () => {
    receiver.respondWith((r) => (r.path === '/hanging' ? { status: 200, delayMs: 3000 } : { status: 200 }));
    const hanging = await createInstance(db, { webhook: { url: receiver.url('/hanging') } });
    const healthy = await createInstance(db, { webhook: { url: receiver.url('/healthy') } });
    const bad = await recordRoutedEvent(db, hanging.id);
    // Opens on the first time-out and stays open for the whole test.
    const r = start(db, { breakerThreshold: 1, breakerCooldownMs: 60_000, egress: { timeoutMs: 300 } });
    await waitForStatus(db, bad.id, 'retrying');
    const good = await recordRoutedEvent(db, healthy.id);
    r.scheduler.kick();
    assert.equal((await waitForStatus(db, good.id, 'delivered')).attempts, 1);
  });

  it('two replicas on one database never attempt the same delivery concurrently', async () => {
    const inFlightByEvent = new Map<string, number>();
    let overlaps = 0;
    receiver.respondWith((r) => {
      const id = r.headers['x-service-event-id'];
      const n = (inFlightByEvent.get(id) ?? 0) + 1;
      inFlightByEvent.set(id, n);
      if (n > 1) overlaps++;
      setTimeout(() => inFlightByEvent.set(id, (inFlightByEvent.get(id) ?? 1) - 1), 30);
      return { status: 200, delayMs: 30 };
    });
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    const events: EventEnvelope[] = [];
    for (let i = 0; i < 60; i++) events.push(await recordRoutedEvent(db, inst.id));
    const second = openDatabase({ databaseUrl: dbUrl, dataDir: '/nonexistent' });
    try {
      start(db, { perDestinationConcurrency: 8 });
      start(second, { perDestinationConcurrency: 8 });
      for (const e of events) await waitForStatus(db, e.id, 'delivered');
      assert.equal(overlaps, 0);
      const ids = receiver.requests.map((r) => r.headers['x-service-event-id']);
      assert.equal(ids.length, 60, 'each delivery attempted exactly once');
      assert.equal(new Set(ids).size, 60);
    } finally {
      for (const r of running) await r.stop();
      running = [];
      await second.destroy();
    }
  });

  it('lists events newest first with their delivery result', async () => {
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    const first = await recordRoutedEvent(db, inst.id, 'message.sent', { messageId: 'a' });
    const second = await recordRoutedEvent(db, inst.id, 'message.status', { messageId: 'a', status: 'read' });
    start(db);
    await waitForStatus(db, first.id, 'delivered');
    await waitForStatus(db, second.id, 'delivered');
    const list = await latestEvents(db, inst.id);
    assert.deepEqual(list.map((e) => e.id), [second.id, first.id]);
    assert.deepEqual(list[0].data, second.data);
    assert.equal(list[0].createdAt, second.createdAt);
    assert.equal(list[0].type, 'message.status');
    assert.equal(list[0].delivery.status, 'delivered');
    assert.equal(list[0].delivery.url, receiver.url());
    assert.equal(list[0].delivery.attempts, 1);
    assert.equal(list[0].delivery.lastStatusCode, 200);
    assert.equal(typeof list[0].delivery.deliveredAt, 'string');
    assert.equal((await latestEvents(db, inst.id, 1)).length, 1);
  });

  it('lists a delivery whose attempt is under way as due (its claim time), not at the end of its lease', async () => {
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    let answer!: () => void;
    const answered = new Promise<void>((r) => (answer = r));
    receiver.respondWith(() => ({ status: 200, until: answered }));
    const event = await recordRoutedEvent(db, inst.id, 'message.sent', { messageId: 'slow' });
    start(db);
    await waitFor('the attempt to start', () => receiver.requests.length === 1);
    const [under] = await latestEvents(db, inst.id, 1);
    const { now } = (await db.raw('SELECT now() AS now')).rows[0];
    assert.equal(under.delivery.status, 'pending');
    assert.ok(Date.parse(under.delivery.nextAttemptAt!) <= new Date(now).getTime(), `nextAttemptAt ${under.delivery.nextAttemptAt} should not be in the future`);
    answer();
    await waitForStatus(db, event.id, 'delivered');
    assert.equal((await latestEvents(db, inst.id, 1))[0].delivery.nextAttemptAt, null);
  });

  it('webhook save cancels only open deliveries whose URL was removed', async () => {
    const keep = 'https://keep.example.com/h';
    const drop1 = 'https://drop.example.com/h';
    const oldConfig = { url: keep, received: drop1, delivery: '', status: '', connected: '', disconnected: '', presence: '' };
    const inst = await createInstance(db, { webhook: oldConfig });
    const toKeep = await recordRoutedEvent(db, inst.id, 'message.sent');
    const toDrop = await recordRoutedEvent(db, inst.id, 'message.received', { from: '1@s.whatsapp.net', type: 'text' });
    const droppedButDone = await recordRoutedEvent(db, inst.id, 'message.received', { from: '1@s.whatsapp.net', type: 'text' });
    await db('deliveries').where({ event_id: droppedButDone.id }).update({ status: 'exhausted' });
    const retrying = await recordRoutedEvent(db, inst.id, 'message.received', { from: '1@s.whatsapp.net', type: 'text' });
    await db('deliveries').where({ event_id: retrying.id }).update({ status: 'retrying', attempts: 2 });

    const newConfig = { ...oldConfig, received: '', status: keep };
    const cancelled = await db.transaction((trx) => cancelDeliveriesForRemovedUrls(trx, inst.id, newConfig));
    assert.equal(cancelled, 2);
    assert.equal((await deliveryOf(db, toKeep.id)).status, 'pending');
    assert.equal((await deliveryOf(db, toDrop.id)).status, 'cancelled');
    assert.equal((await deliveryOf(db, retrying.id)).status, 'cancelled');
    assert.equal((await deliveryOf(db, droppedButDone.id)).status, 'exhausted');
  });

  it('secret regeneration cancels every open delivery of the instance only', async () => {
    const inst = await createInstance(db, { webhook: { url: 'https://a.example.com/h' } });
    const other = await createInstance(db, { webhook: { url: 'https://a.example.com/h' } });
    const open1 = await recordRoutedEvent(db, inst.id);
    const open2 = await recordRoutedEvent(db, inst.id);
    await db('deliveries').where({ event_id: open2.id }).update({ status: 'retrying' });
    const done = await recordRoutedEvent(db, inst.id);
    await db('deliveries').where({ event_id: done.id }).update({ status: 'delivered' });
    const otherOpen = await recordRoutedEvent(db, other.id);
    assert.equal(await db.transaction((trx) => cancelPendingDeliveries(trx, inst.id)), 2);
    assert.equal((await deliveryOf(db, open1.id)).status, 'cancelled');
    assert.equal((await deliveryOf(db, open2.id)).status, 'cancelled');
    assert.equal((await deliveryOf(db, done.id)).status, 'delivered');
    assert.equal((await deliveryOf(db, otherOpen.id)).status, 'pending');
    // A cancelled delivery is never attempted.
    start(db);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal((await deliveryOf(db, open1.id)).attempts, 0);
  });

  it('counts an attempt cut off by a cancel, with its answer: delivered after a 2xx, otherwise cancelled', async () => {
    // The receiver answers only once both deliveries were cancelled, however long that takes.
    let cancelled!: () => void;
    const bothCancelled = new Promise<void>((r) => (cancelled = r));
    receiver.respondWith((r) => ({ status: r.path === '/ok' ? 200 : 500, until: bothCancelled }));
    const failing = await createInstance(db, { webhook: { url: receiver.url('/fail') } });
    const answering = await createInstance(db, { webhook: { url: receiver.url('/ok') } });
    const failed = await recordRoutedEvent(db, failing.id);
    const delivered = await recordRoutedEvent(db, answering.id);
    start(db, { leaseMs: 20_000, egress: { timeoutMs: 10_000 } });
    await receiver.waitForRequests(2);
    try {
      for (const inst of [failing, answering]) assert.equal(await db.transaction((trx) => cancelPendingDeliveries(trx, inst.id)), 1);
    } finally {
      cancelled();
    }
    await waitFor('both attempts counted', async () => (await deliveryOf(db, failed.id)).attempts === 1 && (await deliveryOf(db, delivered.id)).attempts === 1);
    const [a, b] = [await deliveryOf(db, failed.id), await deliveryOf(db, delivered.id)];
    assert.deepEqual([a.status, a.last_status_code, a.last_error], ['cancelled', 500, 'HTTP 500']);
    // The receiver confirmed it: the record says so (the cancel stops only later attempts).
    assert.deepEqual([b.status, b.last_status_code, b.last_error], ['delivered', 200, null]);
    assert.ok(b.delivered_at);
  });

  it('uses the current secret on every attempt (read fresh from the instance)', async () => {
    // The first attempt fails, but only once the secret has changed: the retry is claimed after
    // that, however slowly the update ran.
    let secretChanged!: () => void;
    const changed = new Promise<void>((r) => (secretChanged = r));
    receiver.respondWith((_r, i) => (i === 0 ? { status: 500, until: changed } : { status: 200 }));
    const inst = await createInstance(db, { webhook: { url: receiver.url() } });
    const event = await recordRoutedEvent(db, inst.id);
    start(db, { leaseMs: 20_000, egress: { timeoutMs: 10_000 } });
    await receiver.waitForRequests(1);
    try {
      await db('instances').where({ id: inst.id }).update({ webhook_secret_sealed: crypto.seal('whsec_new') });
    } finally {
      secretChanged();
    }
    await waitForStatus(db, event.id, 'delivered');
    assert.equal(receiver.requests.length, 2);
    assert.ok(verifySignature(inst.secret, receiver.requests[0].headers['x-service-timestamp'], receiver.requests[0].rawBody, receiver.requests[0].headers['x-service-signature'], 300), 'the first attempt used the old secret');
    const second = receiver.requests[1];
    assert.ok(verifySignature('whsec_new', second.headers['x-service-timestamp'], second.rawBody, second.headers['x-service-signature'], 300));
  });
});

/** The instance's latest events with their delivery results, newest first (as GET …/events lists them). */
async function latestEvents(db: Knex, instanceId: string, limit = 50): Promise<EventWithDelivery[]> {
  const rows: Record<string, unknown>[] = await eventsWithDelivery(db, instanceId).orderBy('e.created_at', 'desc').orderBy('e.id', 'desc').limit(limit);
  return rows.map(toEventWithDelivery);
}

function pick(row: Record<string, unknown>, ...keys: string[]): Record<string, unknown> {
  return Object.fromEntries(keys.map((k) => [k, row[k]]));
}

/** Resolves once a statement on the test database is waiting for a lock. */
function waitForLockWait(db: Knex, what: string): Promise<unknown> {
  return waitFor(what, async () => Number((await db.raw(`select count(*) as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`)).rows[0].n) > 0);
}
