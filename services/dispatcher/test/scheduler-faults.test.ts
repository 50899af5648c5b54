// The delivery scheduler when the world moves under its claims:
// - a webhook save that removes a URL, or a new signing secret, cancels the pending deliveries:
//   none may be attempted afterwards, also not the claims taken ahead that wait for a slot of
//   their destination (DESIGN §5 "Webhook delivery");
// - a waiting claim that cannot be handed back (the database failing for a moment) must not hold
//   up the ones behind it;
// - leases are set by the database's clock, which may be skewed from the dispatcher's.
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { cancelDeliveriesForRemovedUrls, cancelPendingDeliveries, MemoryBus } from '@switchboard/core';
import { startDispatcher } from '../src/index.ts';
import type { EgressClient } from '../src/egress.ts';
import { DeliveryScheduler, DEFAULT_SCHEDULER_OPTIONS } from '../src/scheduler.ts';
import { claimDueDeliveries } from '../src/store.ts';
import { createInstance, crypto, log, openTestDatabase, recordRoutedEvent, waitFor } from './support.ts';

const URL_A = 'https://a.example.com/hook';
const SCHEDULE = [0, 1000, 1000, 1000, 1000, 1000, 1000, 1000];

describe('dispatcher scheduler under faults (PostgreSQL)', function () {
  this.timeout(30_000);
  let db: Knex;
  let drop: () => Promise<void>;

  beforeEach(async () => {
    ({ db, drop } = await openTestDatabase());
  });
  afterEach(async () => drop());

  const cancels: Record<string, (trx: Knex.Transaction, instanceId: string) => Promise<unknown>> = {
    'a webhook save without the URL': async (trx, instanceId) => {
      const config = { url: 'https://b.example.com/other' };
      await trx('instances').where({ id: instanceId }).update({ webhook: JSON.stringify(config) });
      return cancelDeliveriesForRemovedUrls(trx, instanceId, config as Parameters<typeof cancelDeliveriesForRemovedUrls>[2]);
    },
    'a new signing secret': async (trx, instanceId) => {
      await trx('instances').where({ id: instanceId }).update({ webhook_secret_sealed: crypto.seal('whsec_new') });
      return cancelPendingDeliveries(trx, instanceId);
    },
  };

  for (const [what, cancel] of Object.entries(cancels)) {
    it(`attempts none after ${what}`, async () => {
      const inst = await createInstance(db, { webhook: { url: URL_A } });
      for (let i = 0; i < 40; i++) await recordRoutedEvent(db, inst.id, 'message.sent', {}, SCHEDULE);
      // One slot (never more), 300 ms answers: a quick destination, so claims are taken ahead and wait.
      let cancelled = false;
      let started = 0;
      const startedAfterCancel: string[] = [];
      const egress: EgressClient = {
        async post(_url, headers) {
          started++;
          if (cancelled) startedAfterCancel.push(headers['x-service-event-id']);
          await new Promise((r) => setTimeout(r, 300));
          return { statusCode: 200 };
        },
        async close() {},
      };
      const dispatcher = await startDispatcher({
        db, bus: new MemoryBus({ log }), crypto, log, egress, consumeEvents: false, pollIntervalMs: 40, perDestinationConcurrency: 1, perDestinationMaxConcurrency: 1,
        config: { webhookRetrySchedule: SCHEDULE, webhookAllowPrivateTargets: false },
      });
      try {
        // Every open delivery claimed (no fresh claim can come), each claim taken over a second
        // ago: the attempts from here on read their row again (a machine under load may take
        // the claims late, and a claim under a second old is attempted as claimed).
        await waitFor('claims that waited over a second', async () => {
          const open = db('deliveries').where({ instance_id: inst.id, status: 'pending' });
          const due = await open.clone().where('next_attempt_at', '<=', db.fn.now()).first();
          const youngest = (await open.clone().max({ leaseEnd: 'next_attempt_at' }).select(db.raw(`now() + interval '${DEFAULT_SCHEDULER_OPTIONS.leaseMs - 1200} milliseconds' AS "oldEnough"`)).first()) as { leaseEnd: Date | null; oldEnough: Date };
          return started >= 2 && !due && youngest.leaseEnd !== null && youngest.leaseEnd < youngest.oldEnough;
        });
        await db.transaction(async (trx) => {
          await trx('instances').where({ id: inst.id }).forUpdate().first();
          await cancel(trx, inst.id);
        });
        cancelled = true;
        await new Promise((r) => setTimeout(r, 2500));
      } finally {
        await dispatcher.stop();
      }
      // The attempt under way at the cancel may finish; one starting as the cancel commits may
      // still have read its row just before. Nothing after.
      assert.ok(startedAfterCancel.length <= 1, `${startedAfterCancel.length} attempts started after the cancel`);
      const delivered = await db('deliveries').where({ instance_id: inst.id, status: 'delivered' }).count<{ count: string }[]>('* as count');
      assert.ok(Number(delivered[0].count) <= started - startedAfterCancel.length + 1, 'no cancelled delivery became delivered by a later attempt');
      assert.ok(Number((await db('deliveries').where({ instance_id: inst.id, status: 'cancelled' }).count<{ count: string }[]>('* as count'))[0].count) >= 30);
    });
  }

  it('starts the waiting claims behind one it could not hand back', async () => {
    const inst = await createInstance(db, { webhook: { url: URL_A } });
    for (let i = 0; i < 3; i++) await recordRoutedEvent(db, inst.id, 'message.sent', {}, SCHEDULE);
    let databaseDown = false;
    const flaky = new Proxy(db, { apply: (target, self, args) => (databaseDown ? Promise.reject(new Error('the database is restarting')) : Reflect.apply(target, self, args)) });
    const posted: string[] = [];
    const egress: EgressClient = { post: async (_url, headers) => (posted.push(headers['x-service-event-id']), { statusCode: 200 }), close: async () => undefined };
    const scheduler = new DeliveryScheduler({ db: flaky, crypto, egress, log, leaseOwner: 'replica-test', timing: { schedule: SCHEDULE } }, { pollIntervalMs: 60_000, perDestinationConcurrency: 1 });
    const claims = await claimDueDeliveries(db, { limit: 3, leaseMs: 60_000, leaseOwner: 'replica-test', excludeDestinations: [], perDestinationLimit: 3 });
    assert.equal(claims.length, 3);
    // The first waited so long its lease could end mid-attempt: it is handed back, which fails.
    const internals = scheduler as unknown as { stopped: boolean; ready: Map<string, unknown[]>; receivedAt: WeakMap<object, number>; startReady(key: string): Promise<void> };
    internals.stopped = false;
    internals.ready.set(URL_A, [...claims]);
    for (const claim of claims) internals.receivedAt.set(claim, performance.now());
    internals.receivedAt.set(claims[0], performance.now() - 10 * 60_000);
    databaseDown = true;
    const wait = internals.startReady(URL_A).catch(() => undefined);
    databaseDown = false;
    await wait;
    await waitFor('the claims behind it attempted', () => posted.length === 2);
    assert.deepEqual(posted.sort(), [claims[1].eventId, claims[2].eventId].sort());
    await scheduler.stop();
  });

  it('delivers when its clock runs ahead of the database\'s by more than a lease minus an attempt', async () => {
    const inst = await createInstance(db, { webhook: { url: URL_A } });
    for (let i = 0; i < 5; i++) await recordRoutedEvent(db, inst.id, 'message.sent', {}, SCHEDULE);
    let posted = 0;
    const egress: EgressClient = { post: async () => (posted++, { statusCode: 200 }), close: async () => undefined };
    const realNow = Date.now;
    Date.now = () => realNow() + 50_000; // this host's clock 50 s ahead of PostgreSQL's
    const scheduler = new DeliveryScheduler({ db, crypto, egress, log, leaseOwner: 'replica-test', timing: { schedule: SCHEDULE } }, { pollIntervalMs: 100 });
    try {
      scheduler.start();
      await waitFor('every delivery attempted', () => posted >= 5, 5000);
    } finally {
      Date.now = realNow;
      await scheduler.stop();
    }
  });
});
