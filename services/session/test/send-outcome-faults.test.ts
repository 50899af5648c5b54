// A send's outcome when something fails while it is on its way to the network.
// - A session process that loses its owner lock (its lock connection was ended: a database
//   failover, a network blip, a probe time-out) must not keep sending beside the process that
//   takes the lock over: the new owner marks the interrupted send uncertain and sends the next
//   ones, so a send the old socket finished afterwards would reach the network after them, and
//   report itself sent after the new owner said it was uncertain.
// - A send the network took is `sent`, even when the database refuses to record it for a moment.
import assert from 'node:assert/strict';
import type { DriverContext, NetworkDriver, OutboundMessage } from '@switchboard/core';
import { sandboxDriverFactory } from '../src/sandbox/driver.ts';
import type { LocalSessionRuntime } from '../src/local-runtime.ts';
import { enqueueSend, eventsOf, instanceRow, itemStatus, openEnv, until, type Env } from './harness.ts';

const SLOW_PHONE = '5511955557777';

/** The sandbox network, taking `delayMs` to send to SLOW_PHONE (a slow upload, a congested link). */
function slowToSlowPhone(env: Env, delayMs: number) {
  const sandbox = sandboxDriverFactory({ db: env.db, receiptDelayMs: 5, reconnectDelayMs: 10 });
  return (ctx: DriverContext): NetworkDriver => {
    const driver = sandbox(ctx);
    const send = driver.send.bind(driver);
    driver.send = async (msg: OutboundMessage) => {
      if (msg.to.kind === 'phone' && msg.to.phone === SLOW_PHONE) await new Promise((r) => setTimeout(r, delayMs));
      return send(msg);
    };
    return driver;
  };
}

async function connected(env: Env, runtime: LocalSessionRuntime, instanceId: string): Promise<void> {
  await runtime.start(instanceId);
  await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'QR');
  await runtime.call(instanceId, 'sandbox.scan', { phone: '5511900001111' });
  await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'connected');
}

describe('send outcomes under faults (NATS JetStream)', function () {
  this.timeout(30_000);
  let env: Env;

  before(async () => {
    env = await openEnv({ nats: true });
  });
  after(async () => {
    await env?.close(); // closes the runtimes too
  });

  it('cuts the old socket first: nothing it sends follows the new owner\'s sends, and an item\'s events agree', async () => {
    const oldOwner = env.runtime({ driverFactory: slowToSlowPhone(env, 2000) });
    const newOwner = env.runtime();
    const instanceId = await env.createInstance();
    await connected(env, oldOwner, instanceId);
    await newOwner.resume(instanceId); // the replacement waits for the lock

    const first = await enqueueSend(env, instanceId, { phone: SLOW_PHONE, text: 'first' });
    const second = await enqueueSend(env, instanceId, { phone: '5511912345678', text: 'second' });
    await until(async () => (await itemStatus(env.db, first.id)) === 'sending', 'the first send under way');
    // The server ends the old owner's lock connection, which releases the lock.
    await env.db.raw(`select pg_terminate_backend(pid) from pg_locks where locktype = 'advisory' and granted and database = (select oid from pg_database where datname = current_database())`);
    await until(async () => ['sent', 'delivered', 'read'].includes(await itemStatus(env.db, second.id)), 'the new owner sends the second', 15_000);
    await new Promise((r) => setTimeout(r, 2500)); // past the old owner's slow send

    const ledger = (await env.db('sandbox_ledger').where({ instance_id: instanceId }).orderBy('seq').pluck('messenger_id')) as string[];
    const firstAt = ledger.indexOf(first.messengerId);
    assert.ok(firstAt === -1 || firstAt < ledger.indexOf(second.messengerId), `the network got the first send after the second: ${ledger.join(', ')}`);
    const events = (await eventsOf(env.db, instanceId)).filter((e) => e.data.messageId === first.id).map((e) => (e.type === 'message.status' ? `status:${e.data.status}` : e.type));
    assert.equal(events.filter((e) => e === 'status:sent').length, firstAt === -1 ? 0 : 1, events.join(', '));
    assert.equal(events.includes('message.sent'), firstAt !== -1, `message.sent only for a send that left: ${events.join(', ')}`);
    assert.equal(await itemStatus(env.db, first.id), firstAt === -1 ? 'uncertain' : 'sent');
  });

  it('records a send the network took as sent once the database takes writes again, not uncertain', async () => {
    const runtime = env.runtime({ driverFactory: slowToSlowPhone(env, 1000) });
    const instanceId = await env.createInstance();
    await connected(env, runtime, instanceId);
    const send = await enqueueSend(env, instanceId, { phone: SLOW_PHONE, text: 'slow' });
    await until(async () => (await itemStatus(env.db, send.id)) === 'sending', 'under way');
    // The database refuses the outcome's events for 2 s: a failover, a reset connection, a time-out.
    await env.db.raw(`alter table events add constraint refuse_outcomes check (type not in ('message.sent', 'message.uncertain', 'message.status')) not valid`);
    try {
      await new Promise((r) => setTimeout(r, 2000));
    } finally {
      await env.db.raw('alter table events drop constraint refuse_outcomes');
    }
    await until(async () => ['sent', 'delivered', 'read'].includes(await itemStatus(env.db, send.id)), 'recorded sent', 10_000);
    const events = (await eventsOf(env.db, instanceId)).filter((e) => e.data.messageId === send.id).map((e) => e.type);
    assert.deepEqual(events.filter((t) => t !== 'message.status'), ['message.sent'], events.join(', '));
  });
});
