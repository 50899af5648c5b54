// Replicas that stop saying they are alive (killed, their node lost) have their leases handed
// back by another replica long before the leases run out (PostgreSQL).
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { Writable } from 'node:stream';
import { createLogger, openDatabase } from '@switchboard/core';
import { ReplicaLiveness } from '../src/replica-liveness.ts';
import { claimDueDeliveries } from '../src/store.ts';
import { createInstance, log, openTestDatabase, recordRoutedEvent, waitFor } from './support.ts';

describe('dispatcher replica liveness (PostgreSQL)', () => {
  let db: Knex;
  let url: string;
  let drop: () => Promise<void>;
  const running: ReplicaLiveness[] = [];

  beforeEach(async () => {
    ({ db, url, drop } = await openTestDatabase());
  });
  afterEach(async () => {
    for (const r of running.splice(0)) await r.stop();
    await drop();
  });

  const claimFor = async (owner: string, count: number) => {
    const claims = await claimDueDeliveries(db, { limit: count, leaseMs: 60_000, leaseOwner: owner, excludeDestinations: [], perDestinationLimit: 100 });
    assert.equal(claims.length, count);
    return claims.map((c) => c.eventId);
  };
  const leasedTo = (owner: string) => db('deliveries').where({ lease_owner: owner }).whereRaw('next_attempt_at = lease_until').pluck('event_id');
  const stamp = (name: string, ago: string) => db.raw(`insert into dispatcher_replicas (name, seen_at) values (?, now() - ?::interval)`, [name, ago]);
  const startReplica = async (name: string, opts = { heartbeatMs: 50, goneAfterMs: 400 }, onReleased: (n: number) => void = () => undefined) => {
    const replica = new ReplicaLiveness({ db, log, name, onReleased }, opts);
    running.push(replica);
    await replica.start();
    return replica;
  };

  /** Another replica that holds one lease and stamps when the test says so. */
  const otherReplicaWithALease = async () => {
    const inst = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    await recordRoutedEvent(db, inst.id);
    const held = await claimFor('replica-other', 1);
    const restamp = () => db.raw(`insert into dispatcher_replicas (name, seen_at) values ('replica-other', now())
      on conflict (name) do update set seen_at = excluded.seen_at`);
    await restamp();
    return { held, restamp };
  };

  it('hands back the leases of a replica gone silent, and only those', async () => {
    const inst = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    for (let i = 0; i < 6; i++) await recordRoutedEvent(db, inst.id);
    const gone = await claimFor('replica-gone', 3);
    const alive = await claimFor('replica-alive', 2);
    const previousVersion = await claimFor('replica-of-a-version-without-liveness', 1);
    await stamp('replica-gone', '1 hour');
    let released = 0;
    await startReplica('replica-alive', undefined, (n) => (released += n));
    await startReplica('replica-watcher', undefined, (n) => (released += n));

    await waitFor('the silent replica\'s leases handed back', async () => (await leasedTo('replica-gone')).length === 0);
    const due = await db('deliveries').whereIn('event_id', gone).where('next_attempt_at', '<=', db.fn.now()).whereNull('lease_owner').pluck('event_id');
    assert.deepEqual(due.sort(), [...gone].sort(), 'due now, held by nobody');
    assert.equal(released, 3, 'the scheduler is told how many it can claim now');
    assert.deepEqual((await leasedTo('replica-alive')).sort(), [...alive].sort(), 'a live replica keeps its leases');
    assert.deepEqual(await leasedTo('replica-of-a-version-without-liveness'), previousVersion, 'a replica unknown to the table keeps its lease until it runs out');
    const names = await db('dispatcher_replicas').orderBy('name').pluck('name');
    assert.deepEqual(names, ['replica-alive', 'replica-watcher']);
  });

  it('judges nobody until its own heartbeats have run for the whole silence (after an outage every stamp is old)', async () => {
    const inst = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    await recordRoutedEvent(db, inst.id);
    const gone = await claimFor('replica-gone', 1);
    await stamp('replica-gone', '1 hour');
    const startedAt = performance.now();
    await startReplica('replica-watcher', { heartbeatMs: 100, goneAfterMs: 1500 });
    await waitFor('the silent replica\'s lease handed back', async () => (await leasedTo('replica-gone')).length === 0, 10_000);
    assert.ok(performance.now() - startedAt >= 1500, 'not before the watcher itself was seen alive for goneAfterMs');
    assert.deepEqual(await db('deliveries').whereIn('event_id', gone).whereNull('lease_owner').pluck('event_id'), gone);
  });

  it('measures silence on its own clock: a stamp that keeps changing is alive, however old it looks to the database', async () => {
    const inst = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    await recordRoutedEvent(db, inst.id);
    const held = await claimFor('replica-behind', 1);
    // The stamps of a live replica written just before the database's clock stepped an hour ahead.
    const restamp = () => db.raw(`insert into dispatcher_replicas (name, seen_at) values ('replica-behind', now() - interval '1 hour')
      on conflict (name) do update set seen_at = excluded.seen_at`);
    await restamp();
    let stamping = true;
    const stamper = (async () => {
      while (stamping) {
        await restamp();
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    await startReplica('replica-watcher', { heartbeatMs: 50, goneAfterMs: 800 });
    await new Promise((r) => setTimeout(r, 2000));
    stamping = false;
    await stamper;
    assert.deepEqual(await leasedTo('replica-behind'), held, 'a replica still stamping keeps its lease');
    await waitFor('the lease handed back once the stamps stop', async () => (await leasedTo('replica-behind')).length === 0);
  });

  it('starts every watch again after its own heartbeats failed (nobody could stamp meanwhile)', async () => {
    const { held, restamp } = await otherReplicaWithALease();
    // The watcher's view of the database, which the test can take away.
    let down = false;
    const refuse = () => {
      if (down) throw new Error('the database is not reachable');
    };
    const flaky = new Proxy(db, {
      apply: (target, self, args) => (refuse(), Reflect.apply(target, self, args)),
      get: (target, prop, receiver) => (prop === 'raw' || prop === 'transaction' ? (...args: unknown[]) => (refuse(), (target as any)[prop](...args)) : Reflect.get(target, prop, receiver)),
    });
    const watcher = new ReplicaLiveness({ db: flaky, log, name: 'replica-watcher', onReleased: () => undefined }, { heartbeatMs: 100, goneAfterMs: 1500 });
    running.push(watcher);
    await watcher.start();
    await new Promise((r) => setTimeout(r, 200)); // the other replica's stamp is being watched
    down = true; // an outage longer than goneAfterMs: neither replica can stamp
    await new Promise((r) => setTimeout(r, 1800));
    down = false;
    const seen = async () => (await db('dispatcher_replicas').where({ name: 'replica-watcher' }).first())?.seen_at as Date | undefined;
    const before = await seen();
    await waitFor('the watcher stamping again', async () => ((await seen())?.getTime() ?? 0) > (before?.getTime() ?? 0));
    // The other replica comes back a little later, well within goneAfterMs of the watcher's return.
    await new Promise((r) => setTimeout(r, 150));
    await restamp();
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(await leasedTo('replica-other'), held, 'a replica that stamps again after the outage keeps its lease');
  });

  it('judges nobody from a read that a stalled database held back (the others could not stamp either)', async () => {
    const { held, restamp } = await otherReplicaWithALease();
    // The watcher's own connections, through which the test can hold statements back, as a network
    // partition does (TCP delivers them once the link is back), instead of failing them.
    const watcherDb = openDatabase({ databaseUrl: url, dataDir: '/nonexistent' });
    const client = watcherDb.client as any;
    const query = client.query.bind(client);
    const heldBack: { sql: string; go: () => void }[] = [];
    let stalled = false;
    let stallNextRead = false;
    client.query = async (connection: unknown, q: { sql: string }) => {
      if (stallNextRead && /^select .* from "dispatcher_replicas"/i.test(q.sql)) [stalled, stallNextRead] = [true, false];
      if (stalled) await new Promise<void>((go) => heldBack.push({ sql: q.sql, go }));
      return query(connection, q);
    };
    try {
      const watcher = new ReplicaLiveness({ db: watcherDb, log, name: 'replica-watcher', onReleased: () => undefined }, { heartbeatMs: 100, goneAfterMs: 1500 });
      running.push(watcher);
      await watcher.start();
      await new Promise((r) => setTimeout(r, 200)); // the other replica's stamp is being watched
      stallNextRead = true; // a read of the stamps is on its way when the database stops answering
      await waitFor('a read of the stamps held back', async () => stalled);
      await new Promise((r) => setTimeout(r, 1800)); // longer than goneAfterMs: nobody can stamp
      stalled = false;
      // The order in which held statements come back is the network's: the worst is the read first.
      const [read, ...rest] = heldBack.splice(0);
      assert.match(read.sql, /dispatcher_replicas/);
      read.go();
      await new Promise((r) => setTimeout(r, 100));
      for (const r of rest) r.go();
      // The other replica comes back a little later, well within goneAfterMs.
      await new Promise((r) => setTimeout(r, 150));
      await restamp();
      await new Promise((r) => setTimeout(r, 100));
      assert.deepEqual(await leasedTo('replica-other'), held, 'a replica that stamps again after the stall keeps its lease');
    } finally {
      stalled = false;
      for (const r of heldBack.splice(0)) r.go();
      for (const r of running.splice(0)) await r.stop();
      await watcherDb.destroy();
    }
  });

  it('reads stamps the same whatever the session\'s TimeZone and DateStyle', async () => {
    const inst = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    await recordRoutedEvent(db, inst.id);
    await claimFor('replica-gone', 1);
    await stamp('replica-gone', '1 hour');
    // "IST" as printed for Asia/Kolkata reads back as Israel time: a stamp kept as text would never match.
    await db.raw(`ALTER DATABASE "${new URL(url).pathname.slice(1)}" SET timezone = 'Asia/Kolkata'`);
    await db.raw(`ALTER DATABASE "${new URL(url).pathname.slice(1)}" SET datestyle = 'SQL, DMY'`);
    const other = openDatabase({ databaseUrl: url, dataDir: '/nonexistent' });
    try {
      const watcher = new ReplicaLiveness({ db: other, log, name: 'replica-watcher', onReleased: () => undefined }, { heartbeatMs: 50, goneAfterMs: 300 });
      running.push(watcher);
      await watcher.start();
      await waitFor('the silent replica\'s lease handed back', async () => (await leasedTo('replica-gone')).length === 0);
      running.splice(running.indexOf(watcher), 1);
      await watcher.stop();
    } finally {
      await other.destroy();
    }
  });

  it('records itself while it runs and leaves the table when stopped', async () => {
    const replica = await startReplica('replica-a');
    const first = (await db('dispatcher_replicas').where({ name: 'replica-a' }).first()).seen_at as Date;
    await waitFor('a later heartbeat', async () => ((await db('dispatcher_replicas').where({ name: 'replica-a' }).first()).seen_at as Date) > first);
    running.splice(running.indexOf(replica), 1);
    await replica.stop();
    assert.equal((await db('dispatcher_replicas').where({ name: 'replica-a' })).length, 0);
  });

  it('says so when another replica took it for gone (its row was removed)', async () => {
    const lines: string[] = [];
    const captured = createLogger({ level: 'warn', destination: new Writable({ write: (chunk, _enc, done) => (lines.push(String(chunk)), done()) }) });
    const replica = new ReplicaLiveness({ db, log: captured, name: 'replica-b', onReleased: () => undefined }, { heartbeatMs: 50, goneAfterMs: 400 });
    running.push(replica);
    await replica.start();
    await new Promise((r) => setTimeout(r, 120));
    assert.equal(lines.length, 0, 'its own stamps are not news');
    await db('dispatcher_replicas').where({ name: 'replica-b' }).delete();
    await waitFor('the warning', () => lines.some((l) => l.includes('took this one for gone')));
  });

  it('refuses a silence shorter than two heartbeats', () => {
    assert.throws(() => new ReplicaLiveness({ db, log, name: 'x', onReleased: () => undefined }, { heartbeatMs: 1000, goneAfterMs: 1500 }), /goneAfterMs/);
  });
});
