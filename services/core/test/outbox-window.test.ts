// The outbox relay publishes a window of rows at once (issue 10): per subject, order is kept, and
// a failed publish leaves every row of its round for the next pass.
import assert from 'node:assert/strict';
import knex, { type Knex } from 'knex';
import { createLogger, enqueueOutbox, migrate, openDatabase, OutboxRelay, type BusMessage } from '../src/index.ts';
import { MemoryBus } from '../src/bus/memory.ts';
import { createTestDatabase } from '../../../test/support/services.ts';
import { waitFor } from './bus-contract.ts';

const log = createLogger({ level: 'silent', name: 'outbox-test' });

describe('outbox relay publish window', () => {
  describe('with PostgreSQL and the in-process bus', () => {
    let db: Knex;
    let drop: () => Promise<void>;
    beforeEach(async () => {
      const created = await createTestDatabase();
      db = openDatabase({ databaseUrl: created.url, dataDir: '/nonexistent' });
      await migrate(db);
      drop = async () => {
        await db.destroy();
        await created.drop();
      };
    });
    afterEach(async () => drop());

    it('publishes every row once, each subject in order, and empties the outbox', async () => {
      const bus = new MemoryBus({ log });
      const seen: string[] = [];
      await bus.consume({ stream: 'commands', filter: 'cmd.>', durable: 'test', maxAckPending: 1 }, async (m: BusMessage) => {
        seen.push(`${m.subject} ${Buffer.from(m.data).toString('utf8')}`);
      });
      for (let i = 0; i < 450; i++) await enqueueOutbox(db, { subject: `cmd.inst${i % 3}`, msgId: `m${i}`, payload: String(i) });
      const relay = new OutboxRelay(db, bus, log, 60_000, 200);
      await relay.flush();
      // The consumer gets one message per turn of the event loop: wait for all of them.
      await waitFor(() => seen.length === 450, 'the consumer to see every message');
      await bus.close();
      assert.equal(Number((await db('outbox').count({ n: '*' }).first())!.n), 0);
      for (let s = 0; s < 3; s++) {
        const order = seen.filter((l) => l.startsWith(`cmd.inst${s} `)).map((l) => Number(l.split(' ')[1]));
        assert.deepEqual(order, Array.from({ length: 150 }, (_, k) => k * 3 + s));
      }
    });

    it('leaves every row of a round in the outbox when one publish fails, and publishes them all on the next pass', async () => {
      const seen: string[] = [];
      let failOnce = true;
      const bus = { publish: async (subject: string, data: Uint8Array, opts: { msgId: string }) => {
        if (opts.msgId === 'm2' && failOnce) {
          failOnce = false;
          throw new Error('no ack');
        }
        seen.push(`${subject} ${Buffer.from(data).toString('utf8')}`);
      } } as unknown as MemoryBus;
      for (let i = 1; i <= 4; i++) await enqueueOutbox(db, { subject: `cmd.inst${i % 2}`, msgId: `m${i}`, payload: String(i) });
      const relay = new OutboxRelay(db, bus, log, 60_000, 200);
      await assert.rejects(relay.flush(), /no ack/);
      assert.equal(Number((await db('outbox').count({ n: '*' }).first())!.n), 4, 'nothing was taken out');
      await relay.flush();
      assert.equal(Number((await db('outbox').count({ n: '*' }).first())!.n), 0);
      // The repeats of the first pass carry the same msgIds, which the bus drops.
      assert.deepEqual(seen.slice(-4), ['cmd.inst1 1', 'cmd.inst0 2', 'cmd.inst1 3', 'cmd.inst0 4']);
    });

    it('keeps a subject in order across relays: a second relay waits for the rows the first is publishing', async () => {
      // Relays run in every gateway and session process. The first one's bus is slow to answer.
      const published: string[] = [];
      const release: (() => void)[] = [];
      const slowBus = { publish: async (_s: string, data: Uint8Array) => {
        await new Promise<void>((r) => release.push(r));
        published.push(Buffer.from(data).toString('utf8'));
      } } as unknown as MemoryBus;
      const quickBus = { publish: async (_s: string, data: Uint8Array) => void published.push(Buffer.from(data).toString('utf8')) } as unknown as MemoryBus;
      const first = new OutboxRelay(db, slowBus, log, 60_000, 200);
      const second = new OutboxRelay(db, quickBus, log, 60_000, 200);
      for (let i = 1; i <= 3; i++) await enqueueOutbox(db, { subject: 'cmd.inst', msgId: `m${i}`, payload: String(i) });
      const firstDone = first.flush();
      await waitFor(() => release.length === 3, 'the first relay to publish rows 1–3');
      for (let i = 4; i <= 6; i++) await enqueueOutbox(db, { subject: 'cmd.inst', msgId: `m${i}`, payload: String(i) });
      const secondDone = second.flush();
      await new Promise((r) => setTimeout(r, 100)); // time enough to overtake, were it allowed to
      for (const r of release.splice(0)) r();
      await Promise.all([firstDone, secondDone]);
      assert.deepEqual(published, ['1', '2', '3', '4', '5', '6']);
      assert.equal(Number((await db('outbox').count({ n: '*' }).first())!.n), 0);
    });

    it('sweeps up rows no writer published, and looks with one plain statement while the outbox is empty', async () => {
      const published: string[] = [];
      const bus = { publish: async (_s: string, data: Uint8Array) => void published.push(Buffer.from(data).toString('utf8')) } as unknown as MemoryBus;
      const relay = new OutboxRelay(db, bus, log, 50, 200);
      relay.start();
      await relay.flush();
      // Every gateway and session process sweeps, a fleet of them often: an empty pass opens no transaction.
      const statements: string[] = [];
      const record = (q: { sql: string }) => statements.push(q.sql.trim().split(/\s+/)[0].toLowerCase());
      db.on('query', record);
      await new Promise((r) => setTimeout(r, 300));
      db.off('query', record);
      assert.ok(statements.length >= 3, `the sweep ran (${statements.length} statements)`);
      assert.deepEqual([...new Set(statements)], ['select'], statements.join(' '));
      // A row its writer never published (it crashed after the commit) goes out on the next pass.
      await enqueueOutbox(db, { subject: 'cmd.inst', msgId: 'lost', payload: 'left behind' });
      await waitFor(() => published.includes('left behind'), 'the sweep to publish the row');
      await relay.stop();
      assert.equal(Number((await db('outbox').count({ n: '*' }).first())!.n), 0);
    });

    it('asks a database that does not answer one sweep at a time, not one per tick', async () => {
      const tight = knex({ client: 'pg', connection: (db.client.config as { connection: unknown }).connection as string, pool: { min: 0, max: 1 } });
      const bus = { publish: async () => undefined } as unknown as MemoryBus;
      const relay = new OutboxRelay(tight, bus, log, 20, 200);
      relay.start();
      await relay.flush();
      let release!: () => void;
      const held = tight.transaction(() => new Promise<void>((r) => (release = r))); // the only connection, from now on
      try {
        await new Promise((r) => setTimeout(r, 300)); // fifteen ticks
        const waiting = (tight.client as { pool: { numPendingAcquires(): number } }).pool.numPendingAcquires();
        assert.ok(waiting <= 2, `connection requests queued by the sweeps: ${waiting}`);
      } finally {
        release();
        await held;
        await relay.stop();
        await tight.destroy();
      }
    });
  });
});
