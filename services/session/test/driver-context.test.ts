// What the worker's DriverContext tells a driver: whether it still holds the owner lock (asked
// before reconnecting after another socket took over the account, WhatsApp close 440), and the
// instance's settings kept current without any send (autoRejectCalls on an incoming call).
import assert from 'node:assert/strict';
import { sessionLockKey, type DriverContext } from '@switchboard/core';
import type { LocalSessionRuntime } from '../src/local-runtime.ts';
import { sandboxDriverFactory } from '../src/sandbox/driver.ts';
import { instanceRow, openEnv, until, type Env } from './harness.ts';

describe('session worker: the driver context', function () {
  this.timeout(20_000);
  let env: Env;
  let runtime: LocalSessionRuntime;
  const contexts: DriverContext[] = [];

  before(async () => {
    env = await openEnv();
  });
  after(async () => {
    await runtime?.close();
    await env?.close();
  });

  /** Ends the database session holding the instance's advisory lock, as a network failure would. */
  async function killLockSession(instanceId: string): Promise<void> {
    const key = BigInt.asUintN(64, BigInt(sessionLockKey(instanceId)));
    const { rows } = await env.db.raw(
      `SELECT pg_terminate_backend(pid) AS ended FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND classid = ?::oid AND objid = ?::oid AND objsubid = 1
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
      [(key >> 32n).toString(), (key & 0xffffffffn).toString()],
    );
    assert.equal(rows.length, 1, 'one session holds the lock');
  }

  it('true while this worker holds the lock with this driver; false once the lock is lost or the session stopped', async () => {
    const sandbox = sandboxDriverFactory({ db: env.db, receiptDelayMs: 5, reconnectDelayMs: 10 });
    runtime = env.runtime({ driverFactory: (ctx) => (contexts.push(ctx), sandbox(ctx)) });
    const instanceId = await env.createInstance();
    await runtime.start(instanceId);
    await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
    assert.equal(contexts.length, 1);
    assert.equal(await contexts[0].stillOwner?.(), true);

    await killLockSession(instanceId);
    assert.equal(await contexts[0].stillOwner?.(), false, 'the lock went with its database session');
    // The worker takes the lock again with a new driver; the old driver stays disowned.
    await until(() => contexts.length === 2, 'a new driver after the lock was taken again');
    await until(async () => (await contexts[1].stillOwner?.()) === true, 'the new driver owns the session');
    assert.equal(await contexts[0].stillOwner?.(), false);

    await runtime.stop(instanceId);
    assert.equal(await contexts[1].stillOwner?.(), false, 'a stopped session owns nothing');
  });

  it('settings changed while the session is connected reach the driver without a send, and on connecting', async () => {
    const sandbox = sandboxDriverFactory({ db: env.db, receiptDelayMs: 5, reconnectDelayMs: 10 });
    const seen: DriverContext[] = [];
    const rt = env.runtime({ driverFactory: (ctx) => (seen.push(ctx), sandbox(ctx)), settingsRefreshMs: 100 });
    try {
      const instanceId = await env.createInstance();
      await rt.start(instanceId);
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
      assert.equal(seen[0].settings().autoRejectCalls, false);
      // Waiting for a scan, the session does not poll its settings; it reads them on connecting.
      await env.db('instances').where({ id: instanceId }).update({ settings: JSON.stringify({ autoReadMessages: true }) });
      await rt.call(instanceId, 'sandbox.scan', { phone: '5511999990000' });
      assert.equal(seen[0].settings().autoReadMessages, true, 'read on connecting');
      await env.db('instances').where({ id: instanceId }).update({ settings: JSON.stringify({ autoRejectCalls: true }) });
      await until(() => seen[0].settings().autoRejectCalls, 'autoRejectCalls seen by the driver', 3000);
    } finally {
      await rt.close();
    }
  });

  it('on PostgreSQL, hears a settings change at once through its lock connection, with no poll', async () => {
    const sandbox = sandboxDriverFactory({ db: env.db, receiptDelayMs: 5, reconnectDelayMs: 10 });
    const seen: DriverContext[] = [];
    const rt = env.runtime({ driverFactory: (ctx) => (seen.push(ctx), sandbox(ctx)), settingsRefreshMs: 600_000 });
    try {
      const instanceId = await env.createInstance();
      await rt.start(instanceId);
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
      await rt.call(instanceId, 'sandbox.scan', { phone: '5511999990001' });
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'connected');
      await env.db('instances').where({ id: instanceId }).update({ settings: JSON.stringify({ autoRejectCalls: true }) });
      await until(() => seen[0].settings().autoRejectCalls, 'the change, told by the database', 3000);
      // A lock connection lost and taken again listens again.
      await killLockSession(instanceId);
      await until(() => seen.length === 2, 'a new driver after the lock was taken again');
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'connected again');
      await new Promise((resolve) => setTimeout(resolve, 300)); // its read on connecting is over
      await env.db('instances').where({ id: instanceId }).update({ settings: JSON.stringify({ autoRejectCalls: false, autoReadMessages: true }) });
      await until(() => seen[1].settings().autoReadMessages, 'heard on the new lock connection', 3000);
    } finally {
      await rt.close();
    }
  });
});
