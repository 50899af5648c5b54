// Embedded mode: PGlite in a data directory + the in-process bus, as the single-process server runs
// sessions. Checks the in-process owner lock and the send path on PGlite's single connection.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Crypto, createLogger, FileMediaStore, migrate, newResourceId, openDatabase, OutboxRelay, type Db } from '@switchboard/core';
import { MemoryBus } from '@switchboard/core/bus/memory';
import { LocalSessionRuntime } from '../src/local-runtime.ts';
import { mediaArchive } from '../src/media-archive.ts';
import { sandboxDriverFactory } from '../src/sandbox/driver.ts';
import { enqueueSend, instanceRow, itemStatus, until } from './harness.ts';

describe('session runtime on embedded PGlite', function () {
  this.timeout(30_000);
  let dir: string;
  let db: Db;
  let relay: OutboxRelay;
  let bus: MemoryBus;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sb-embedded-'));
    db = openDatabase({ dataDir: dir });
    await migrate(db);
    const log = createLogger({ level: 'silent' });
    bus = new MemoryBus({ log });
    relay = new OutboxRelay(db, bus, log, 100);
    relay.start();
  });
  after(async () => {
    await relay?.stop();
    await bus?.close();
    await db?.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  it('pairs, sends, and a second runtime on the same database cannot take the instance', async () => {
    const crypto = new Crypto(randomBytes(32));
    const log = createLogger({ level: 'silent' });
    const options = {
      db, bus, relay, crypto, log,
      media: mediaArchive({ db, store: new FileMediaStore(join(dir, 'media'), crypto), crypto, publicBaseUrl: 'http://localhost:8080', linkTtlSeconds: 60 }),
      driverFactory: sandboxDriverFactory({ db, receiptDelayMs: 1, reconnectDelayMs: 5 }),
      lockRetryMs: 50,
      commandRetryDelayMs: 50,
    };
    const instanceId = newResourceId('inst');
    await db('instances').insert({ id: instanceId, name: 'embedded', token_hash: randomBytes(32).toString('hex'), token_sealed: 'x' });
    const runtime = new LocalSessionRuntime(options);
    const other = new LocalSessionRuntime(options);
    try {
      await runtime.start(instanceId);
      await until(async () => (await instanceRow(db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
      await runtime.call(instanceId, 'sandbox.scan', { phone: '5511900001111' });
      const item = await enqueueSend({ db, relay }, instanceId, { phone: '5511912345678' });
      await until(async () => (await itemStatus(db, item.id)) === 'read', 'read');
      await other.resume(instanceId);
      assert.equal(other.worker(instanceId)!.isOwner, false);
      await runtime.stop(instanceId);
      assert.deepEqual([(await instanceRow(db, instanceId)).state], ['stopped']);
    } finally {
      await other.close();
      await runtime.close();
    }
  });
});
