// SharedRateWindows against PostgreSQL: two replicas (each with its own connection pool) count
// every client's requests together, exactly, also when they take for the same client at once;
// the window slides; a quiet client's row is swept; without the database each replica counts alone.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Knex } from 'knex';
import { createLogger, openDatabase } from '@switchboard/core';
import { SHARED_COUNT_DEADLINE_MS, SharedRateWindows, type SharedRateWindowsOptions } from '../src/http/shared-rate-windows.ts';
import { eventually } from '../../../test/support/http.ts';
import { openTestDatabase } from '../../../test/support/services.ts';

describe('SharedRateWindows (PostgreSQL)', () => {
  let db: Knex;
  let url: string;
  let drop: () => Promise<void>;
  const opened: { windows: SharedRateWindows; db: Knex }[] = [];
  const quiet = createLogger({ level: 'silent' });

  /** A replica: its own pool on the shared database, as a second gateway process has. */
  function replica(opts: Partial<SharedRateWindowsOptions> & { limit: number }): SharedRateWindows {
    const own = openDatabase({ databaseUrl: url, dataDir: '/nonexistent' });
    const windows = new SharedRateWindows({ db: own, log: quiet, ...opts });
    opened.push({ windows, db: own });
    return windows;
  }

  before(async () => ({ db, url, drop } = await openTestDatabase()));
  afterEach(async () => {
    for (const { windows, db: own } of opened.splice(0)) {
      await windows.stop();
      await own.destroy();
    }
    await db('rate_limit_windows').delete();
  });
  after(async () => drop());

  it('counts the requests reaching two replicas in one window, with the remaining count across both', async () => {
    const [a, b] = [replica({ limit: 5 }), replica({ limit: 5 })];
    const verdicts = [];
    for (let i = 0; i < 8; i++) verdicts.push(await (i % 2 ? b : a).take('203.0.113.7', Date.now()));
    assert.deepEqual(verdicts.map((v) => v.remaining), [4, 3, 2, 1, 0, -1, -1, -1]);
    for (const v of verdicts) assert.ok(v.resetMs > 0 && v.resetMs <= 61_000, `reset ${v.resetMs} ms`);
    assert.equal((await a.take('203.0.113.8', Date.now())).remaining, 4, 'another client has its own window');
  });

  it('lets exactly the limit through when both replicas take for one client at once', async () => {
    const [a, b] = [replica({ limit: 7 }), replica({ limit: 7 })];
    const burst = Array.from({ length: 60 }, (_, i) => (i % 2 ? b : a).take(i % 3 ? '198.51.100.1' : '198.51.100.2', Date.now()));
    const verdicts = await Promise.all(burst);
    const taken = (client: number) => verdicts.filter((v, i) => (i % 3 ? 1 : 2) === client && v.remaining >= 0);
    assert.equal(taken(1).length, 7);
    assert.equal(taken(2).length, 7);
    assert.deepEqual(taken(1).map((v) => v.remaining).sort(), [0, 1, 2, 3, 4, 5, 6], 'each one taken got its own place');
  });

  it('slides: a request leaves the count once its second has left the window', async () => {
    const windows = replica({ limit: 2, windowMs: 1_500 });
    assert.equal((await windows.take('192.0.2.1', Date.now())).remaining, 1);
    assert.equal((await windows.take('192.0.2.1', Date.now())).remaining, 0);
    const refused = await windows.take('192.0.2.1', Date.now());
    assert.equal(refused.remaining, -1);
    assert.ok(refused.resetMs > 500 && refused.resetMs <= 2_500, `reset ${refused.resetMs} ms`);
    await sleep(refused.resetMs + 50);
    assert.equal((await windows.take('192.0.2.1', Date.now())).remaining, 1, 'the oldest second has left, so both places are free');
  });

  it("sweeps the rows of clients that went quiet, keeps the others', and passes over rows a take holds", async () => {
    const windows = replica({ limit: 3, windowMs: 200 });
    await windows.take('192.0.2.10', Date.now());
    await windows.take('192.0.2.12', Date.now());
    await sleep(1_400); // past the window and the second that may still count
    await windows.take('192.0.2.11', Date.now());
    // A batch of another replica holds 192.0.2.12's row: waiting for it could deadlock with that batch.
    const holding = await db.transaction();
    try {
      await holding.raw("select 1 from rate_limit_windows where client = '192.0.2.12' for update");
      await windows.removeIdle();
    } finally {
      await holding.rollback();
    }
    assert.deepEqual((await db('rate_limit_windows').select('client').orderBy('client')).map((r) => r.client), ['192.0.2.11', '192.0.2.12']);
  });

  it('answers a refused client from memory until its window frees', async () => {
    const [a, b] = [replica({ limit: 2 }), replica({ limit: 2 })];
    await a.take('192.0.2.30', Date.now());
    await a.take('192.0.2.30', Date.now());
    assert.equal((await b.take('192.0.2.30', Date.now())).remaining, -1);
    // With the table locked, a take that asked the database would fall back to b's own count (one so far).
    const locking = await db.transaction();
    try {
      await locking.raw('lock table rate_limit_windows in access exclusive mode');
      const again = await b.take('192.0.2.30', Date.now());
      assert.equal(again.remaining, -1);
      assert.ok(again.resetMs > 0);
    } finally {
      await locking.rollback();
    }
  });

  it('decides alone when the database is stuck, without queueing behind the stuck statement, and counts those requests once it answers', async () => {
    const lines: string[] = [];
    const log = createLogger({ level: 'warn', destination: new Writable({ write: (chunk, _enc, done) => (lines.push(String(chunk)), done()) }) });
    const windows = replica({ limit: 5, log });
    const locking = await db.transaction();
    let verdicts: number[];
    try {
      await locking.raw('lock table rate_limit_windows in access exclusive mode');
      verdicts = [(await windows.take('192.0.2.40', Date.now())).remaining];
      await sleep(SHARED_COUNT_DEADLINE_MS + 100);
      verdicts.push((await windows.take('192.0.2.40', Date.now())).remaining, (await windows.take('192.0.2.40', Date.now())).remaining);
    } finally {
      await locking.rollback();
    }
    assert.deepEqual(verdicts, [4, 3, 2], "this replica's own count");
    assert.equal(lines.length, 1, 'one warning');
    assert.match(lines[0], /did not answer/);
    // The statement that was stuck (the first take alone: the others did not queue) went through.
    const counted = await eventually(async () => (await db('rate_limit_windows').where({ client: '192.0.2.40' }).first())?.counts);
    assert.deepEqual(counted, [1]);
    await windows.idle(); // the row is there a moment before the replica has its answer
    assert.equal((await windows.take('192.0.2.40', Date.now())).remaining, 3, 'the shared count again');
  });

  it('counts alone, and says so once, when the database does not answer', async () => {
    const lines: string[] = [];
    const log = createLogger({ level: 'warn', destination: new Writable({ write: (chunk, _enc, done) => (lines.push(String(chunk)), done()) }) });
    const unreachable = openDatabase({ databaseUrl: 'postgres://postgres@127.0.0.1:1/none', dataDir: '/nonexistent' });
    const windows = new SharedRateWindows({ db: unreachable, log, limit: 2 });
    opened.push({ windows, db: unreachable });
    const verdicts = [];
    for (let i = 0; i < 3; i++) verdicts.push((await windows.take('192.0.2.20', Date.now())).remaining);
    assert.deepEqual(verdicts, [1, 0, -1]);
    assert.equal(lines.length, 1);
    assert.match(lines[0], /counts alone/);
  });
});
