// A session stopped (paused) while a start that no request is waiting for is under way — the
// retry after another process held the owner lock, or a retake after the lock was lost — must
// open no socket after it: closing at once would release the lock under that start, which would
// go on to connect an account no process owns any more (two sockets, if another then takes it).
import assert from 'node:assert/strict';
import type { DriverContext, NetworkDriver } from '@switchboard/core';
import { ownerLockFor } from '../src/owner-lock.ts';
import { sandboxDriverFactory } from '../src/sandbox/driver.ts';
import { enqueueSend, instanceRow, openEnv, until, type Env } from './harness.ts';

describe('session stopped while a lock retry starts it (PostgreSQL)', function () {
  this.timeout(30_000);
  let env: Env;

  before(async () => {
    env = await openEnv();
  });
  after(async () => {
    await env?.close();
  });

  it('opens no socket after the stop, and leaves the lock free', async () => {
    let open = 0;
    const sandbox = sandboxDriverFactory({ db: env.db, receiptDelayMs: 5, reconnectDelayMs: 10 });
    const counted = (ctx: DriverContext): NetworkDriver => {
      const driver = sandbox(ctx);
      const [connect, disconnect] = [driver.connect.bind(driver), driver.disconnect.bind(driver)];
      driver.connect = async () => (open++, connect());
      driver.disconnect = async () => (open--, disconnect());
      return driver;
    };
    const runtime = env.runtime({ driverFactory: counted });
    const instanceId = await env.createInstance();
    // Another process holds the owner lock: the start leaves a retry behind.
    const other = ownerLockFor(env.db, instanceId, () => undefined);
    assert.equal(await other.tryAcquire(), true);
    await runtime.start(instanceId);
    // The retry's start-up will wait on a row it recovers (an interrupted send), held here.
    const interrupted = await enqueueSend(env, instanceId, { phone: '5511912345678', status: 'sending', publish: false });
    const holder = await env.db.transaction();
    try {
      await holder('send_items').where({ id: interrupted.id }).forUpdate().first();
      await other.release();
      await until(async () => (await env.db.raw(`select count(*)::int as n from pg_locks where locktype = 'advisory' and granted`)).rows[0].n > 0, 'the retry took the lock');
      const stopping = runtime.stop(instanceId);
      await new Promise((r) => setTimeout(r, 200));
      await holder.commit();
      await stopping;
    } finally {
      if (!holder.isCompleted()) await holder.rollback();
    }
    await new Promise((r) => setTimeout(r, 500)); // anything the start would still do
    assert.equal(open, 0, 'no socket left open');
    assert.equal((await instanceRow(env.db, instanceId)).state, 'stopped');
    const next = ownerLockFor(env.db, instanceId, () => undefined);
    assert.equal(await next.tryAcquire(), true, 'the lock is free');
    await next.release();
  });
});
