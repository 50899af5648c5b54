// The owner lock on PostgreSQL: one holder per instance, released when its connection ends, and a
// connection the server probes so a holder on a lost node does not keep the lock for hours.
import assert from 'node:assert/strict';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import type { Knex } from 'knex';
import { openDatabase } from '@switchboard/core';
import { openTestDatabase } from '../../../test/support/services.ts';
import { LOCK_PEER_PROBES, openLockConnection, ownerLockFor } from '../src/owner-lock.ts';
import { until } from './harness.ts';

/** A TCP relay to PostgreSQL that can go silent without closing anything: a network partition. */
async function partitionableRelay(target: URL): Promise<{ url: string; partition(): void; close(): Promise<void> }> {
  let silent = false;
  const sockets: Socket[] = [];
  const server: Server = createServer((client) => {
    const upstream = connect(Number(target.port || 5432), target.hostname);
    sockets.push(client, upstream);
    client.on('data', (d) => void (silent || upstream.write(d)));
    upstream.on('data', (d) => void (silent || client.write(d)));
    for (const [a, b] of [[client, upstream], [upstream, client]]) {
      a.on('error', () => undefined);
      a.on('close', () => b.destroy());
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: url.toString(),
    partition: () => void (silent = true),
    close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    }),
  };
}

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
    const relay = await partitionableRelay(new URL(url));
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
