// The whole dispatcher on real PostgreSQL + NATS JetStream: events recorded the way producers do
// (event + outbox row, published by the OutboxRelay) arrive at the right receiver path, filters
// hold events back, and events without a delivery row are rebuilt from the database at start.
import assert from 'node:assert/strict';
import { cancelDeliveriesForRemovedUrls, OutboxRelay, openBus, type Bus, type EventEnvelope } from '@switchboard/core';
import type { Knex } from 'knex';
import { NATS_URL, testNamespace } from '../../../test/support/services.ts';
import { startHttpsReceiver, type HttpsReceiver } from '../../../test/support/https-receiver.ts';
import { startDispatcher, type Dispatcher } from '../src/index.ts';
import { lockInstanceForRouting } from '../../gateway/src/routes/webhooks.ts';
import { routeAndRecordBatch } from '../src/intake.ts';
import { claimDueDeliveries, insertDeliveries } from '../src/store.ts';
import { createInstance, deleteNamespaceStreams, FAST_SCHEDULE, crypto, log, openTestDatabase, recordRoutedEvent, recordTestEvent, waitFor, waitForStatus } from './support.ts';

describe('dispatcher intake (PostgreSQL + NATS JetStream)', function () {
  this.timeout(30_000);
  const namespace = testNamespace();
  let db: Knex;
  let drop: () => Promise<void>;
  let bus: Bus;
  let relay: OutboxRelay;
  let receiver: HttpsReceiver;
  let dispatcher: Dispatcher | undefined;
  const config = { webhookRetrySchedule: FAST_SCHEDULE, webhookAllowPrivateTargets: true };
  const start = async () => {
    dispatcher = await startDispatcher({ db, bus, crypto, config, log, pollIntervalMs: 20, leaseMs: 5000, attemptTimeoutMs: 2000 });
    return dispatcher;
  };

  before(async () => {
    ({ db, drop } = await openTestDatabase());
    bus = await openBus({ natsUrl: NATS_URL, namespace, log });
    relay = new OutboxRelay(db, bus, log, 50);
    receiver = await startHttpsReceiver();
  });
  after(async () => {
    await relay.stop();
    await receiver.close();
    await bus.close();
    await deleteNamespaceStreams(NATS_URL, namespace);
    await drop();
  });
  afterEach(async () => {
    await dispatcher?.stop();
    dispatcher = undefined;
  });

  it('routes every event type to its destination and records filtered and unrouted ones', async () => {
    const path = (p: string) => receiver.url(`/${p}`);
    const inst = await createInstance(db, {
      webhook: { url: path('general'), received: path('received'), delivery: path('delivery'), status: path('status'), connected: path('connected'), disconnected: path('disconnected'), presence: '' },
      settings: { ignoreGroups: true },
    });
    const bare = await createInstance(db, { webhook: {} });
    await start();
    relay.start();
    const cases: Array<[Parameters<typeof recordTestEvent>[2], Record<string, unknown>, string, string]> = [
      ['message.received', { from: '1@s.whatsapp.net', type: 'text', fromMe: false }, 'delivered', '/received'],
      ['message.received', { from: '2@g.us', type: 'text', fromMe: false }, 'filtered', ''],
      ['message.received', { from: '1@s.whatsapp.net', type: 'text', fromMe: true, fromApi: true }, 'filtered', ''],
      ['message.sent', {}, 'delivered', '/delivery'],
      ['message.failed', { error: { code: 'x', message: 'y' } }, 'delivered', '/delivery'],
      ['message.uncertain', { reason: 'r' }, 'delivered', '/delivery'],
      ['message.status', { status: 'read' }, 'delivered', '/status'],
      ['connection.update', { state: 'connected', previousState: 'starting' }, 'delivered', '/connected'],
      ['connection.update', { state: 'reconnecting', previousState: 'connected' }, 'delivered', '/disconnected'],
      ['chat.presence', { presence: 'composing' }, 'delivered', '/general'],
      ['webhook.test', {}, 'delivered', '/general'],
    ];
    const recorded: EventEnvelope[] = [];
    for (const [type, data] of cases) recorded.push(await recordTestEvent(db, inst.id, type, data));
    const unrouted = await recordTestEvent(db, bare.id, 'message.sent');
    relay.kick();
    for (let i = 0; i < cases.length; i++) {
      const [, , status, expectedPath] = cases[i];
      await waitForStatus(db, recorded[i].id, status);
      if (expectedPath) {
        const req = receiver.requests.find((r) => r.headers['x-service-event-id'] === recorded[i].id);
        assert.equal(req?.path, expectedPath, `${cases[i][0]} went to ${expectedPath}`);
      }
    }
    await waitForStatus(db, unrouted.id, 'no_destination');
    const filteredIds = recorded.filter((_, i) => cases[i][2] === 'filtered').map((e) => e.id);
    assert.ok(!receiver.requests.some((r) => filteredIds.includes(r.headers['x-service-event-id'])), 'filtered events are never sent');
    assert.equal((await db('events').whereIn('id', filteredIds)).length, 2, 'filtered events stay recorded');
    await relay.stop();
  });

  it('writes one delivery row per event even when the bus delivers it twice', async () => {
    const inst = await createInstance(db, { webhook: { url: receiver.url('/dup') } });
    await start();
    const event = await recordTestEvent(db, inst.id);
    await db('outbox').delete();
    const body = Buffer.from((await db('events').where({ id: event.id }).first('body')).body, 'utf8');
    // Two publishes that JetStream does not deduplicate (different msg ids), as after a relay crash
    // outside the duplicate window.
    await bus.publish(`evt.${inst.id}.message.sent`, body, { msgId: `${event.id}-a` });
    await bus.publish(`evt.${inst.id}.message.sent`, body, { msgId: `${event.id}-b` });
    await waitForStatus(db, event.id, 'delivered');
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(receiver.requests.filter((r) => r.headers['x-service-event-id'] === event.id).length, 1);
    assert.equal((await db('deliveries').where({ event_id: event.id })).length, 1);
  });

  it('at start, routes events that never reached the bus (rebuild from the database)', async () => {
    const inst = await createInstance(db, { webhook: { url: receiver.url('/sweep') } });
    const lost: EventEnvelope[] = [];
    for (let i = 0; i < 5; i++) lost.push(await recordTestEvent(db, inst.id));
    await db('outbox').delete(); // their bus messages are gone
    await start();
    for (const e of lost) await waitForStatus(db, e.id, 'delivered');
    const ids = receiver.requests.filter((r) => r.path === '/sweep').map((r) => r.headers['x-service-event-id']);
    assert.deepEqual(new Set(ids), new Set(lost.map((e) => e.id)));
  });

  it('a dispatcher restarted under its replica name delivers what its predecessor had claimed without waiting out the lease', async () => {
    const inst = await createInstance(db, { webhook: { url: receiver.url('/restarted') } });
    const events = [await recordRoutedEvent(db, inst.id), await recordRoutedEvent(db, inst.id)];
    // The predecessor claimed both (a 60 s lease) and died before attempting them.
    const claimed = await claimDueDeliveries(db, { limit: 2, leaseMs: 60_000, leaseOwner: 'replica-r', excludeDestinations: [], perDestinationLimit: 4 });
    assert.equal(claimed.length, 2);
    dispatcher = await startDispatcher({ db, bus, crypto, config, log, pollIntervalMs: 20, leaseMs: 60_000, attemptTimeoutMs: 2000, leaseOwner: 'replica-r', consumeEvents: false });
    for (const e of events) await waitForStatus(db, e.id, 'delivered', 10_000);
  });

  it('delivers what a replica gone for good had claimed once it is found silent, without waiting out the lease', async () => {
    const inst = await createInstance(db, { webhook: { url: receiver.url('/orphaned') } });
    const events = [await recordRoutedEvent(db, inst.id), await recordRoutedEvent(db, inst.id)];
    // A replica on a lost node claimed both (a 60 s lease) and was last seen a minute ago.
    await claimDueDeliveries(db, { limit: 2, leaseMs: 60_000, leaseOwner: 'replica-lost', excludeDestinations: [], perDestinationLimit: 4 });
    await db.raw(`insert into dispatcher_replicas (name, seen_at) values ('replica-lost', now() - interval '1 minute')`);
    dispatcher = await startDispatcher({ db, bus, crypto, config, log, pollIntervalMs: 30_000, leaseMs: 60_000, attemptTimeoutMs: 2000, replicaHeartbeatMs: 50, replicaGoneAfterMs: 300, consumeEvents: false });
    for (const e of events) await waitForStatus(db, e.id, 'delivered', 10_000);
  });

  /** A statement of this database waiting for a lock, whose text is `like` this. */
  const waitingOnLock = (like: string) => () =>
    db('pg_stat_activity').whereRaw('datname = current_database()').where({ wait_event_type: 'Lock' }).where('query', 'like', like).first();

  it('routes a batch that races the delete of an instance: the others are written, the deleted events skipped', async () => {
    const kept = await createInstance(db, { webhook: { url: receiver.url('/kept') } });
    const doomed = await createInstance(db, { webhook: { url: receiver.url('/doomed') } });
    const keptEvent = await recordTestEvent(db, kept.id);
    const doomedEvent = await recordTestEvent(db, doomed.id);
    // The delete is under way (its rows still visible to others) while the batch is written.
    const deleting = await db.transaction();
    let routing: ReturnType<typeof routeAndRecordBatch>;
    try {
      await deleting('instances').where({ id: doomed.id }).delete();
      routing = routeAndRecordBatch({ db, schedule: FAST_SCHEDULE }, [keptEvent, doomedEvent]);
      await waitFor('the batch to wait for the delete', waitingOnLock('%deliveries%'));
    } finally {
      await deleting.commit();
    }
    assert.deepEqual(await routing, ['awaiting_claim', 'event_missing']);
    assert.equal((await db('deliveries').where({ event_id: keptEvent.id }).first())?.status, 'pending');
  });

  /** A webhook save as the gateway makes it: row lock, new configuration, removed URLs cancelled. */
  const beginSave = async (instanceId: string, url: string) => {
    const save = await db.transaction();
    await lockInstanceForRouting(save, instanceId);
    await save('instances').where({ id: instanceId }).update({ webhook: JSON.stringify({ url }) });
    await cancelDeliveriesForRemovedUrls(save, instanceId, { url });
    return save;
  };
  it('routes an event read before a webhook save with the saved URLs, never to a removed one', async () => {
    const inst = await createInstance(db, { webhook: { url: receiver.url('/old') } });
    const event = await recordTestEvent(db, inst.id);
    // The save has run its cancellation (nothing to cancel yet) but not committed when the
    // batch reads the configuration: the batch reads the old URL.
    const save = await beginSave(inst.id, receiver.url('/new'));
    let routing: ReturnType<typeof routeAndRecordBatch>;
    try {
      routing = routeAndRecordBatch({ db, schedule: FAST_SCHEDULE }, [event]);
      await waitFor('the batch to wait for the save', waitingOnLock('%deliveries%'));
    } finally {
      await save.commit();
    }
    assert.deepEqual(await routing, ['awaiting_claim']);
    const row = await db('deliveries').where({ event_id: event.id }).first();
    assert.deepEqual([row.status, row.url], ['pending', receiver.url('/new')]);
  });

  it('never waits for other writers of the instance row (the queue count of sends accepted meanwhile)', async () => {
    const inst = await createInstance(db, { webhook: { url: receiver.url('/busy') } });
    const event = await recordTestEvent(db, inst.id);
    const sending = await db.transaction();
    try {
      await sending('instances').where({ id: inst.id }).increment('queued_count', 1); // as the accept trigger does
      assert.deepEqual(await routeAndRecordBatch({ db, schedule: FAST_SCHEDULE }, [event]), ['awaiting_claim']);
    } finally {
      await sending.rollback();
    }
  });

  it('a webhook save waits for a batch writing a row to a URL it removes, then cancels that row', async () => {
    const inst = await createInstance(db, { webhook: { url: receiver.url('/old') } });
    const event = await recordTestEvent(db, inst.id);
    const intake = await db.transaction();
    let saving: Promise<unknown>;
    try {
      const written = await insertDeliveries(intake, [{ eventId: event.id, instanceId: inst.id, status: 'pending', url: receiver.url('/old'), firstAttemptDelayMs: 0 }]);
      assert.equal(written.inserted.size, 1);
      saving = beginSave(inst.id, receiver.url('/new')).then((save) => save.commit());
      await waitFor('the save to wait for the batch', waitingOnLock('%instances%'));
    } finally {
      await intake.commit();
    }
    await saving;
    assert.equal((await db('deliveries').where({ event_id: event.id }).first()).status, 'cancelled');
  });
});
