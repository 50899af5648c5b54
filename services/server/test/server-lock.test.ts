// A server without NATS_URL keeps its bus in its own process, so it must be the only server on its
// PostgreSQL database: another one would accept sends that no session hears.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, loadConfig, type Db } from '@switchboard/core';
import { startEmbeddedServer, type EmbeddedServer } from '../src/embedded.ts';
import { ANOTHER_SERVER, holdServerLock, type ServerLock } from '../src/server-lock.ts';
import { NATS_URL, openTestDatabase, testNamespace } from '../../../test/support/services.ts';
import { freePort } from '../../../test/support/server.ts';

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
      await assert.rejects(start(), (err: Error) => err.message.startsWith(`DATABASE_URL: cannot be used (${ANOTHER_SERVER}`));
    } finally {
      await first.stop();
    }
    const second = await start();
    await second.stop();
  });

  it('lets servers with NATS share the database, and keeps a server without NATS off it', async () => {
    const namespace = testNamespace();
    const a = await start({ NATS_URL, NATS_NAMESPACE: namespace });
    const b = await start({ NATS_URL, NATS_NAMESPACE: namespace });
    try {
      assert.ok((await fetch(`${b.url}/health`)).ok);
      await assert.rejects(holdServerLock(database.db, log, 'sole', { waitMs: 300 }), { message: ANOTHER_SERVER });
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
    const sole = await holdServerLock(database.db, log, 'sole', { waitMs: 300 });
    await assert.rejects(holdServerLock(database.db, log, 'shared', { waitMs: 300 }), { message: ANOTHER_SERVER });
    await sole.release();
  });

  it('takes the lock again when the database ended its connection (a restart)', async () => {
    let held: ServerLock | undefined = await holdServerLock(database.db, log, 'sole', { retakeEveryMs: 100 });
    try {
      const terminated = await database.db.raw(`select pg_terminate_backend(pid) as ok from pg_locks where locktype = 'advisory' and granted and database = (select oid from pg_database where datname = current_database())`);
      assert.equal(terminated.rows.length, 1, 'the lock had its own connection');
      // Free while the holder reconnects, then held again: another server is refused.
      const deadline = Date.now() + 10_000;
      for (;;) {
        const other = await holdServerLock(database.db, log, 'sole', { waitMs: 0 }).catch(() => undefined);
        if (!other) break;
        await other.release();
        assert.ok(Date.now() < deadline, 'the lock was not taken again');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await held.release();
      held = undefined;
      const after = await holdServerLock(database.db, log, 'sole', { waitMs: 300 });
      await after.release();
    } finally {
      await held?.release();
    }
  });
});
