// A session whose start keeps failing after it took the owner lock (its driver cannot connect)
// tries again, waiting longer each time: every start publishes the backlog's commands again, so
// retrying at the lock's pace would flood the bus with copies (and the log with errors).
import assert from 'node:assert/strict';
import { subjects, type DriverContext, type NetworkDriver } from '@switchboard/core';
import { sandboxDriverFactory } from '../src/sandbox/driver.ts';
import { enqueueSend, instanceRow, openEnv, until, type Env } from './harness.ts';

describe('session start that keeps failing (PostgreSQL)', function () {
  this.timeout(30_000);
  let env: Env;

  before(async () => {
    env = await openEnv();
    await env.relay.stop(); // the republished commands stay in the outbox, to be counted
  });
  after(async () => env?.close());

  it('backs off between starts, and starts once the fault is gone', async () => {
    let broken = true;
    let attempts = 0;
    const sandbox = sandboxDriverFactory({ db: env.db, receiptDelayMs: 5, reconnectDelayMs: 10 });
    const failing = (ctx: DriverContext): NetworkDriver => {
      const driver = sandbox(ctx);
      const connect = driver.connect.bind(driver);
      driver.connect = async () => {
        attempts++;
        if (broken) throw new Error('cannot reach the network');
        return connect();
      };
      return driver;
    };
    const runtime = env.runtime({ driverFactory: failing, lockRetryMs: 50 });
    const instanceId = await env.createInstance();
    await enqueueSend(env, instanceId, { phone: '5511912345678', publish: false });
    await runtime.start(instanceId);

    await new Promise((r) => setTimeout(r, 1600));
    // Waits of 50, 100, 200, 400, 800 ms: six starts in 1.6 s (at the lock's pace: about thirty).
    assert.ok(attempts >= 2 && attempts <= 7, `${attempts} starts in 1.6 s`); // a loaded machine makes fewer
    const copies = await env.db('outbox').where({ subject: subjects.command(instanceId) }).count({ n: '*' }).first();
    assert.ok(Number(copies?.n) <= 7, `${copies?.n} copies of the queued send's command`);

    broken = false;
    await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'a start that succeeds', 10_000);
  });
});
