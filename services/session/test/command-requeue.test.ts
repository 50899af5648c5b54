// Queuing the commands of queued sends again, for a bus that lost them. After a crash of the
// embedded server the in-process bus is empty, while the outbox may still hold the rows of the
// newest sends (committed, not yet published): those must not go out ahead of older sends.
import assert from 'node:assert/strict';
import { enqueueOutbox, subjects } from '@switchboard/core';
import { requeueQueuedCommands } from '../src/command-requeue.ts';
import { enqueueSend, openEnv, type Env } from './harness.ts';

describe('requeueQueuedCommands (PostgreSQL)', function () {
  this.timeout(20_000);
  let env: Env;

  before(async () => {
    env = await openEnv();
    await env.relay.stop(); // the rows are looked at, not published
  });
  after(async () => env?.close());

  it('replaces the unpublished command rows, so every queued send goes out in the order it was accepted', async () => {
    const instanceId = await env.createInstance();
    const older = await enqueueSend(env, instanceId, { phone: '5511912345678', publish: false }); // its command died with the bus
    const newer = await enqueueSend(env, instanceId, { phone: '5511912345678', publish: false });
    const done = await enqueueSend(env, instanceId, { phone: '5511912345678', status: 'sent', publish: false });
    await env.db.transaction(async (trx) => {
      for (const item of [newer, done]) await enqueueOutbox(trx, { subject: subjects.command(instanceId), msgId: item.id, payload: JSON.stringify({ id: item.id }) });
    });
    const commands = async () => (await env.db('outbox').where({ subject: subjects.command(instanceId) }).orderBy('seq').pluck('msg_id')) as string[];

    assert.equal(await requeueQueuedCommands(env.db, { instanceId }), 2);
    assert.deepEqual(await commands(), [newer.id, done.id, older.id, newer.id], 'appended: the survivor still goes first');

    await env.db('outbox').delete();
    await env.db.transaction(async (trx) => {
      for (const item of [newer, done]) await enqueueOutbox(trx, { subject: subjects.command(instanceId), msgId: item.id, payload: JSON.stringify({ id: item.id }) });
    });
    assert.equal(await requeueQueuedCommands(env.db, { replaceOutboxCommands: true }), 2);
    assert.deepEqual(await commands(), [older.id, newer.id]);
  });
});
