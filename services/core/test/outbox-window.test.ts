// The outbox relay publishes a window of rows at once (issue 10): per subject, order is kept and a
// failed publish keeps that subject's later rows for the next pass.
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { createLogger, enqueueOutbox, migrate, openDatabase, OutboxRelay, type BusMessage } from '../src/index.ts';
import { MemoryBus } from '../src/bus/memory.ts';
import { publishedInOrder } from '../src/outbox.ts';
import { createTestDatabase } from '../../../test/support/services.ts';
import { waitFor } from './bus-contract.ts';

const log = createLogger({ level: 'silent', name: 'outbox-test' });
const ok = { status: 'fulfilled', value: undefined } as const;
const failed = { status: 'rejected', reason: new Error('no ack') } as const;

describe('outbox relay publish window', () => {
  it('deletes, per subject, only the rows before its first failed publish', () => {
    const rows = [
      { seq: 1, subject: 'cmd.a' },
      { seq: 2, subject: 'cmd.b' },
      { seq: 3, subject: 'cmd.a' },
      { seq: 4, subject: 'cmd.b' },
      { seq: 5, subject: 'cmd.a' },
    ];
    // cmd.a's second row failed: its third stays too, although it was acknowledged.
    assert.deepEqual(publishedInOrder(rows, [ok, ok, failed, ok, ok]), [1, 2, 4]);
    assert.deepEqual(publishedInOrder(rows, [failed, failed, ok, ok, ok]), []);
    assert.deepEqual(publishedInOrder(rows, [ok, ok, ok, ok, ok]), [1, 2, 3, 4, 5]);
  });

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
  });
});
