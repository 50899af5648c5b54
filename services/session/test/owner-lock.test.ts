// The owner lock on PostgreSQL: one holder per instance, released when its connection ends, and a
// connection the server probes so a holder on a lost node does not keep the lock for hours.
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { openDatabase } from '@switchboard/core';
import { openTestDatabase } from '../../../test/support/services.ts';
import { LOCK_PEER_PROBES, openLockConnection, ownerLockFor } from '../src/owner-lock.ts';
import { until } from './harness.ts';
import { startTcpRelay } from '../../../test/support/tcp-relay.ts';

describe('session owner lock (PostgreSQL)', () => {
  let db: Knex;
  let url: string;
  let drop: () => Promise<void>;

  before(async () => {
    ({ db, drop, url } = await openTestDatabase());
  });
  after(async () => drop());

  it('has one holder per instance; the next one gets it once the first releases', async () => {
    const lost: Error[] = [];
    const first = ownerLockFor(db, 'inst-a', (e) => lost.push(e));
    const second = ownerLockFor(db, 'inst-a', (e) => lost.push(e));
    const other = ownerLockFor(db, 'inst-b', (e) => lost.push(e));
    assert.equal(await first.tryAcquire(), true);
    assert.equal(await second.tryAcquire(), false);
    assert.equal(await other.tryAcquire(), true, 'another instance is independent');
    assert.equal(await first.isHeld(), true);
    await first.release();
    assert.equal(await first.isHeld(), false);
    assert.equal(await second.tryAcquire(), true);
    await second.release();
    await other.release();
    assert.deepEqual(lost, [], 'a release is not a loss');
  });

  it('reports the loss when the server ends the lock\'s connection', async () => {
    const lost: Error[] = [];
    const lock = ownerLockFor(db, 'inst-c', (e) => lost.push(e));
    assert.equal(await lock.tryAcquire(), true);
    await db.raw(`select pg_terminate_backend(pid) from pg_locks where locktype = 'advisory' and pid <> pg_backend_pid() and database = (select oid from pg_database where datname = current_database())`);
    await until(() => lost.length > 0, 'the loss reported');
    assert.equal(lost.length, 1);
    assert.equal(await lock.isHeld(), false);
  });

  it('takes the lock as lost when its connection stops answering (cut off from the database), so the session closes first', async () => {
    const relay = await startTcpRelay(new URL(url));
    const viaRelay = openDatabase({ databaseUrl: relay.url, dataDir: '/nonexistent' });
    try {
      const lost: Error[] = [];
      // A time-out well above a pause of a busy machine's event loop, so only the partition trips it.
      const lock = ownerLockFor(viaRelay, 'inst-d', (e) => lost.push(e), { everyMs: 100, timeoutMs: 1500 });
      assert.equal(await lock.tryAcquire(), true);
      await new Promise((r) => setTimeout(r, 500));
      assert.equal(lost.length, 0, 'answered probes keep the lock');
      relay.partition();
      await until(() => lost.length > 0, 'the loss reported');
      assert.equal(lost.length, 1);
      assert.match(lost[0].message, /did not answer/);
      assert.equal(await lock.isHeld(), false);
    } finally {
      await relay.close();
      await viaRelay.destroy();
    }
  });

  it('asks the server to probe the lock holder, so a lost node\'s lock is released in seconds', async () => {
    const client = await openLockConnection(db);
    try {
      for (const [name, value] of Object.entries(LOCK_PEER_PROBES)) {
        const { rows } = await client.query(`SHOW ${name}`);
        assert.equal(rows[0][name], String(value), name);
      }
    } finally {
      await client.end();
    }
  });
});
