// Test environment of the session package: a fresh PostgreSQL database, a bus (in-process or
// NATS JetStream in a namespace of its own), an outbox relay, encrypted media files in a temp dir.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import {
  Crypto,
  createLogger,
  enqueueOutbox,
  FileMediaStore,
  migrate,
  newId,
  newMessengerId,
  newResourceId,
  openDatabase,
  OutboxRelay,
  subjects,
  type Bus,
  type Db,
  type Logger,
} from '@switchboard/core';
import { openBus } from '@switchboard/core/bus/index';
import { createTestDatabase, NATS_URL, testNamespace } from '../../../test/support/services.ts';
import { LocalSessionRuntime, type LocalRuntimeOptions } from '../src/local-runtime.ts';
import { mediaArchive, type MediaArchive } from '../src/media-archive.ts';
import { sandboxDriverFactory } from '../src/sandbox/driver.ts';

export interface Env {
  db: Db;
  dbUrl: string;
  bus: Bus;
  namespace: string;
  relay: OutboxRelay;
  crypto: Crypto;
  encryptionKey: Buffer;
  media: MediaArchive;
  log: Logger;
  runtime(overrides?: Partial<LocalRuntimeOptions>): LocalSessionRuntime;
  createInstance(fields?: Record<string, unknown>): Promise<string>;
  close(): Promise<void>;
}

export const PUBLIC_BASE_URL = 'https://sb.example.test';

export async function openEnv(opts: { nats?: boolean } = {}): Promise<Env> {
  const created = await createTestDatabase();
  const db = openDatabase({ databaseUrl: created.url, dataDir: '/nonexistent' });
  await migrate(db);
  const log = createLogger({ level: 'silent' });
  const namespace = testNamespace();
  const bus = await openBus({ natsUrl: opts.nats ? NATS_URL : undefined, namespace, log });
  const relay = new OutboxRelay(db, bus, log, 100);
  relay.start();
  const encryptionKey = randomBytes(32);
  const crypto = new Crypto(encryptionKey);
  const dir = mkdtempSync(join(tmpdir(), 'sb-session-'));
  const store = new FileMediaStore(join(dir, 'media'), crypto);
  const media = mediaArchive({ db, store, crypto, publicBaseUrl: PUBLIC_BASE_URL, linkTtlSeconds: 600 });
  const runtimes: LocalSessionRuntime[] = [];
  return {
    db,
    dbUrl: created.url,
    bus,
    namespace,
    relay,
    crypto,
    encryptionKey,
    media,
    log,
    runtime(overrides = {}) {
      const rt = new LocalSessionRuntime({
        db,
        bus,
        relay,
        crypto,
        media,
        log,
        driverFactory: sandboxDriverFactory({ db, receiptDelayMs: 5, reconnectDelayMs: 10 }),
        lockRetryMs: 50,
        commandRetryDelayMs: 50,
        settingsRefreshMs: 0,
        ...overrides,
      });
      runtimes.push(rt);
      return rt;
    },
    async createInstance(fields = {}) {
      const id = newResourceId('inst');
      const token = randomBytes(24).toString('base64url');
      await db('instances').insert({ id, name: 'test instance', token_hash: crypto.hashToken(token), token_sealed: crypto.seal(token), ...fields });
      return id;
    },
    async close() {
      for (const rt of runtimes) await rt.close().catch(() => undefined);
      await relay.stop();
      await bus.close();
      await store.close();
      await db.destroy();
      await created.drop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** What the gateway's send acceptance writes: the item and its command, in one transaction. */
export async function enqueueSend(
  env: Pick<Env, 'db' | 'relay'>,
  instanceId: string,
  send: { phone: string; type?: string; text?: string; payload?: Record<string, unknown>; expiresAt?: Date; status?: string; publish?: boolean },
): Promise<{ id: string; messengerId: string }> {
  const id = newId('msg');
  const messengerId = newMessengerId();
  await env.db.transaction(async (trx) => {
    await trx('send_items').insert({
      id,
      instance_id: instanceId,
      messenger_id: messengerId,
      phone: send.phone,
      type: send.type ?? 'text',
      payload: JSON.stringify(send.payload ?? { text: send.text ?? 'hello' }),
      status: send.status ?? 'queued',
      expires_at: send.expiresAt ?? new Date(Date.now() + 3_600_000),
    });
    if (send.publish !== false) await enqueueOutbox(trx, { subject: subjects.command(instanceId), msgId: id, payload: JSON.stringify({ id }) });
  });
  env.relay.kick();
  return { id, messengerId };
}

export async function eventsOf(db: Db, instanceId: string, type?: string): Promise<{ type: string; data: Record<string, any> }[]> {
  const q = db('events').where({ instance_id: instanceId }).orderBy('created_at').orderBy('id');
  if (type) q.where({ type });
  return (await q).map((r: { body: string }) => JSON.parse(r.body));
}

export async function itemStatus(db: Db, id: string): Promise<string> {
  return (await db('send_items').where({ id }).first('status')).status;
}

export async function instanceRow(db: Db, id: string): Promise<Record<string, any>> {
  return db('instances').where({ id }).first();
}

export { until } from './driver-contract.ts';
