// A server without NATS_URL keeps its bus in its own process, so it must be the only server on its
// PostgreSQL database: another one would accept sends that no session hears.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, loadConfig, type Db } from '@switchboard/core';
import { startEmbeddedServer, type EmbeddedServer } from '../src/embedded.ts';
import { ANOTHER_SERVER, SERVER_LOCK_KEY, holdServerLock } from '../src/server-lock.ts';
import { NATS_URL, openTestDatabase, testNamespace } from '../../../test/support/services.ts';
import { freePort } from '../../../test/support/server.ts';
import { eventually } from '../../../test/support/http.ts';

describe('server lock: one server without NATS on a PostgreSQL database', function () {
  this.timeout(60_000);
  let database: { db: Db; url: string; drop(): Promise<void> };
  const dirs: string[] = [];
  const log = createLogger({ level: 'silent', name: 'test' });
  const encryptionKey = randomBytes(32).toString('base64'); // the servers' DATA_DIRs differ; their database is one

  before(async () => {
    database = await openTestDatabase();
  });
  after(async () => {
    await database?.drop();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  const start = async (env: Record<string, string> = {}): Promise<EmbeddedServer> => {
    const dir = mkdtempSync(join(tmpdir(), 'sb-server-lock-'));
    dirs.push(dir);
    const config = loadConfig({ PORT: String(await freePort()), HOST: '127.0.0.1', DATA_DIR: dir, NETWORK_DRIVER: 'sandbox', DATABASE_URL: database.url, ENCRYPTION_KEY: encryptionKey, ...env });
    return startEmbeddedServer(config, { log });
  };

  it('refuses a second server without NATS, naming DATABASE_URL, and lets it start once the first stopped', async () => {
    const first = await start();
    try {
      await assert.rejects(start(), (err: Error) => err.message.startsWith(`DATABASE_URL: cannot open or claim the database (${ANOTHER_SERVER}`));
    } finally {
      await first.stop();
    }
    const second = await start();
    await second.stop();
  });

  const noTaker = { onTaken: (err: Error) => assert.fail(err) };
  const advisoryHolders = async () =>
    (await database.db.raw(`select pid from pg_locks where locktype = 'advisory' and granted and database = (select oid from pg_database where datname = current_database())`)).rows as { pid: number }[];

  it('lets servers with NATS share the database, and keeps a server without NATS off it', async () => {
    const namespace = testNamespace();
    const a = await start({ NATS_URL, NATS_NAMESPACE: namespace });
    const b = await start({ NATS_URL, NATS_NAMESPACE: namespace });
    try {
      assert.ok((await fetch(`${b.url}/health`)).ok);
      await assert.rejects(holdServerLock(database.db, 'sole', { ...noTaker, waitMs: 300 }), { message: ANOTHER_SERVER });
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
    const sole = await holdServerLock(database.db, 'sole', { ...noTaker, waitMs: 300 });
    await assert.rejects(holdServerLock(database.db, 'shared', { ...noTaker, waitMs: 300 }), { message: ANOTHER_SERVER });
    await sole.release();
  });

  it('takes the lock again when the database ended its connection (a restart)', async () => {
    const held = await holdServerLock(database.db, 'sole', { ...noTaker, retakeEveryMs: 100 });
    try {
      const [holder] = await advisoryHolders();
      await database.db.raw('select pg_terminate_backend(?, 5000)', [holder.pid]);
      await eventually(async () => (await advisoryHolders()).some((h) => h.pid !== holder.pid), 10_000, 'the lock taken again');
      await assert.rejects(holdServerLock(database.db, 'sole', { ...noTaker, waitMs: 0 }), { message: ANOTHER_SERVER });
    } finally {
      await held.release();
    }
    assert.deepEqual(await advisoryHolders(), [], 'released');
  });

  it('tells a server whose lock another one took while its connection was away', async () => {
    const taken: Error[] = [];
    const held = await holdServerLock(database.db, 'sole', { onTaken: (err) => taken.push(err), retakeEveryMs: 100 });
    const other = new pg.Client(database.url);
    await other.connect();
    try {
      // End the holder's connection and take the lock before the holder connects again (it
      // usually needs a few round trips longer; when it wins, again).
      let took = false;
      for (let round = 0; round < 20 && !took; round++) {
        const holders = await advisoryHolders();
        for (const { pid } of holders) await other.query('select pg_terminate_backend($1)', [pid]);
        for (let i = 0; i < 500 && !took; i++) took = (await other.query('select pg_try_advisory_lock($1::bigint) as ok', [SERVER_LOCK_KEY])).rows[0].ok;
      }
      assert.ok(took, 'the other connection never got the lock');
      await eventually(async () => taken.length > 0, 10_000, 'the holder told');
      assert.equal(taken[0].message, ANOTHER_SERVER);
    } finally {
      await other.end();
      await held.release();
    }
  });
});

