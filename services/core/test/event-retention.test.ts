// Event retention: old events whose delivery is over go (their delivery rows with them); a delivery
// still pending or retrying, a recent event and an unrouted one stay. On PostgreSQL and PGlite.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestDatabase } from '../../../test/support/services.ts';
import { migrate, openDatabase, type Db } from '../src/db/connect.ts';
import { deleteFinishedEvents, startEventRetention } from '../src/event-retention.ts';
import { retryEvent } from '../src/deliveries.ts';
import { Problem } from '../src/problem.ts';

const silentLog = { info() {}, error() {} };
const DAY = 86_400_000;

async function eventWith(db: Db, id: string, ageDays: number, delivery: string | null): Promise<void> {
  const createdAt = new Date(Date.now() - ageDays * DAY);
  await db('events').insert({ id, instance_id: 'inst-ret', type: 'message.status', body: '{}', created_at: createdAt });
  if (delivery) await db('deliveries').insert({ event_id: id, instance_id: 'inst-ret', status: delivery, url: 'https://example.com/hook', attempts: 1 });
}

for (const storage of ['postgres', 'pglite'] as const) {
  describe(`event retention (${storage})`, function () {
    this.timeout(30_000);
    let db: Db;
    let cleanup: () => Promise<void>;

    before(async () => {
      if (storage === 'postgres') {
        const created = await createTestDatabase();
        db = openDatabase({ databaseUrl: created.url, dataDir: '/nonexistent' });
        cleanup = async () => (await db.destroy(), await created.drop());
      } else {
        const dir = mkdtempSync(join(tmpdir(), 'sb-event-retention-'));
        db = openDatabase({ dataDir: dir });
        cleanup = async () => (await db.destroy(), rmSync(dir, { recursive: true, force: true }));
      }
      await migrate(db);
      await db('instances').insert({ id: 'inst-ret', name: 'retention', token_hash: randomBytes(16).toString('hex'), token_sealed: 'x' });
    });
    after(async () => cleanup?.());

    it('deletes old events whose delivery is over, with their delivery rows, and keeps the rest', async () => {
      const finished = ['delivered', 'filtered', 'no_destination', 'cancelled', 'exhausted'];
      for (const [i, status] of finished.entries()) await eventWith(db, `evt_old_${i}`, 31, status);
      await eventWith(db, 'evt_old_pending', 31, 'pending');
      await eventWith(db, 'evt_old_retrying', 31, 'retrying');
      await eventWith(db, 'evt_old_unrouted', 31, null);
      await eventWith(db, 'evt_recent', 29, 'delivered');
      const retention = startEventRetention({ db, maxAgeMs: 30 * DAY, log: silentLog, batchSize: 2, firstRunAfterMs: 3_600_000 });
      try {
        assert.equal(await retention.runOnce(), 5);
      } finally {
        retention.stop();
      }
      assert.deepEqual((await db('events').orderBy('id').pluck('id')).sort(), ['evt_old_pending', 'evt_old_retrying', 'evt_old_unrouted', 'evt_recent']);
      assert.deepEqual((await db('deliveries').orderBy('event_id').pluck('event_id')).sort(), ['evt_old_pending', 'evt_old_retrying', 'evt_recent']);
    });

    if (storage === 'postgres') {
      it('a retry racing the sweep that deletes its event answers 404, never a half-done retry', async () => {
        await eventWith(db, 'evt_raced', 40, 'exhausted');
        const sweeping = await db.transaction();
        try {
          assert.equal(await deleteFinishedEvents(sweeping, new Date(Date.now() - 30 * DAY), 10), 1); // holds its locks
          const retry = retryEvent(db, 'inst-ret', 'evt_raced').then(() => 'retried', (err: unknown) => err);
          await new Promise((r) => setTimeout(r, 200));
          await sweeping.commit();
          const outcome = await retry;
          assert.ok(outcome instanceof Problem && outcome.status === 404, String(outcome));
        } finally {
          if (!sweeping.isCompleted()) await sweeping.rollback();
        }
      });

      it('skips an event whose retry holds its delivery row', async () => {
        await eventWith(db, 'evt_retried', 40, 'exhausted');
        const retrying = await db.transaction();
        try {
          await retrying('deliveries').where({ event_id: 'evt_retried' }).forUpdate().first(); // as retryEvent does first
          assert.equal(await deleteFinishedEvents(db, new Date(Date.now() - 30 * DAY), 10), 0);
        } finally {
          await retrying.rollback();
        }
        assert.equal(await deleteFinishedEvents(db, new Date(Date.now() - 30 * DAY), 10), 1);
      });
    }
  });
}
