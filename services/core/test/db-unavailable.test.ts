// isDatabaseUnavailable tells a database that cannot be reached now (worth a 503 and a retry) from
// a statement that failed (a 500), on the errors real failures produce.
import assert from 'node:assert/strict';
import knexFactory from 'knex';
import { isDatabaseUnavailable } from '../src/index.ts';
import { createTestDatabase } from '../../../test/support/services.ts';
import { startTcpRelay } from '../../../test/support/tcp-relay.ts';

/** knex prints acquire errors on the console by itself; the test reads them from the promise. */
const quiet = { warn() {}, error() {}, debug() {}, deprecate() {} };
const failureOf = (work: Promise<unknown>): Promise<unknown> => work.then(() => assert.fail('expected a failure'), (e: unknown) => e);

describe('isDatabaseUnavailable', () => {
  it('knows a server that refuses connections', async () => {
    const db = knexFactory({ client: 'pg', connection: 'postgres://nobody@127.0.0.1:1/none', log: quiet });
    try {
      const err = await failureOf(db.raw('select 1'));
      assert.ok(isDatabaseUnavailable(err), String(err));
    } finally {
      await db.destroy();
    }
  });

  it('knows a connection the server ended mid-statement and a pool with none free; not a bad statement', async () => {
    const created = await createTestDatabase();
    const db = knexFactory({ client: 'pg', connection: created.url, pool: { min: 0, max: 1 }, acquireConnectionTimeout: 200, log: quiet });
    const admin = knexFactory({ client: 'pg', connection: created.url, pool: { min: 0, max: 1 } });
    try {
      const sleeping = failureOf(db.raw(`select pg_sleep(5), 'held'`));
      // While the only connection sleeps, no other becomes free in time.
      const starved = await failureOf(db.raw('select 1'));
      assert.ok(isDatabaseUnavailable(starved), `starved: ${String(starved)}`);
      await admin.raw(`select pg_terminate_backend(pid) from pg_stat_activity where query like '%''held''%' and pid <> pg_backend_pid()`);
      const terminated = (await sleeping) as { code?: string };
      assert.ok(isDatabaseUnavailable(terminated), `terminated: ${String(terminated)} (${terminated.code})`);
      const bad = await failureOf(admin.raw('select * from no_such_table'));
      assert.equal(isDatabaseUnavailable(bad), false, 'a statement error is a fault, not an outage');
      assert.equal(isDatabaseUnavailable(new Error('something else')), false);
    } finally {
      await db.destroy();
      await admin.destroy();
      await created.drop();
    }
  });

  it('knows a statement cancelled by a statement_timeout, a lock_timeout or as a deadlock victim (it may pass a moment later)', async () => {
    const created = await createTestDatabase();
    const db = knexFactory({ client: 'pg', connection: created.url, pool: { min: 0, max: 2 }, log: quiet });
    try {
      const timedOut = (await failureOf(db.transaction(async (trx) => {
        await trx.raw(`set local statement_timeout = '50ms'`);
        await trx.raw('select pg_sleep(1)');
      }))) as { code?: string };
      assert.equal(timedOut.code, '57014');
      assert.ok(isDatabaseUnavailable(timedOut), String(timedOut));
      await db.raw('create table held (id int)');
      const holder = await db.transaction();
      try {
        await holder.raw('lock table held in access exclusive mode');
        const locked = (await failureOf(db.transaction(async (trx) => {
          await trx.raw(`set local lock_timeout = '50ms'`);
          await trx.raw('select * from held');
        }))) as { code?: string };
        assert.equal(locked.code, '55P03');
        assert.ok(isDatabaseUnavailable(locked), String(locked));
      } finally {
        await holder.rollback();
      }
      // Two transactions that each wait for the other's row: PostgreSQL cancels one of them.
      await db.raw('insert into held (id) values (1), (2)');
      const [first, second] = [await db.transaction(), await db.transaction()];
      try {
        await first.raw('update held set id = id where id = 1');
        await second.raw('update held set id = id where id = 2');
        const outcomes = await Promise.allSettled([first.raw('update held set id = id where id = 2'), second.raw('update held set id = id where id = 1')]);
        const victim = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected')?.reason as { code?: string };
        assert.equal(victim?.code, '40P01');
        assert.ok(isDatabaseUnavailable(victim), String(victim));
      } finally {
        await Promise.all([first.rollback().catch(() => undefined), second.rollback().catch(() => undefined)]);
      }
    } finally {
      await db.destroy();
      await created.drop();
    }
  });

  it('knows a connection that dropped mid-statement without a word (a server crash), as knex reports it', async () => {
    const created = await createTestDatabase();
    const relay = await startTcpRelay(new URL(created.url));
    const db = knexFactory({ client: 'pg', connection: relay.url, pool: { min: 0, max: 1 }, log: quiet });
    const admin = knexFactory({ client: 'pg', connection: created.url, pool: { min: 0, max: 1 } });
    try {
      const sleeping = failureOf(db.raw(`select pg_sleep(5), 'dropped'`));
      const running = async () => (await admin.raw(`select 1 from pg_stat_activity where query like '%''dropped''%' and pid <> pg_backend_pid()`)).rows.length > 0;
      while (!(await running())) await new Promise((r) => setTimeout(r, 20));
      relay.cut();
      const dropped = (await sleeping) as Error;
      // knex puts the statement before node-postgres's message, which carries no SQLSTATE.
      assert.match(dropped.message, /select pg_sleep.* - Connection terminated/);
      assert.ok(isDatabaseUnavailable(dropped), dropped.message);
    } finally {
      await db.destroy();
      await admin.destroy();
      await relay.close();
      await created.drop();
    }
  });
});
