// Real PostgreSQL and NATS for tests, isolated per test run: each call makes a fresh database
// and a fresh NATS namespace, so parallel or repeated runs never see each other's data.
import { randomBytes } from 'node:crypto';
import knexFactory, { type Knex } from 'knex';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { migrate, openDatabase } from '@switchboard/core';

export const PG_ADMIN_URL = process.env.TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const NATS_URL = process.env.TEST_NATS_URL ?? 'nats://127.0.0.1:4222';

function uniqueSuffix(): string {
  return `${process.pid}_${randomBytes(4).toString('hex')}`;
}

/** Creates an empty database; returns its URL and a function that drops it. */
export async function createTestDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `sb_test_${uniqueSuffix()}`;
  const admin = knexFactory({ client: 'pg', connection: PG_ADMIN_URL, pool: { min: 0, max: 1 } });
  try {
    await admin.raw(`CREATE DATABASE ${name}`);
  } finally {
    await admin.destroy();
  }
  const url = new URL(PG_ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const a = knexFactory({ client: 'pg', connection: PG_ADMIN_URL, pool: { min: 0, max: 1 } });
      try {
        await a.raw(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await a.destroy();
      }
    },
  };
}

/** A NATS namespace (subject/stream prefix) of this test run alone. */
export function testNamespace(): string {
  return `t${uniqueSuffix()}`.replace(/_/g, '');
}

/** A fresh database, migrated unless a test runs the migrations itself, and its knex handle;
 *  drop() closes the handle and drops it. */
export async function openTestDatabase(opts: { migrated?: boolean } = {}): Promise<{ db: Knex; url: string; drop(): Promise<void> }> {
  const created = await createTestDatabase();
  const db = openDatabase({ databaseUrl: created.url, dataDir: '/nonexistent' });
  if (opts.migrated !== false) await migrate(db);
  return {
    db,
    url: created.url,
    async drop() {
      await db.destroy();
      await created.drop();
    },
  };
}

/** Deletes the JetStream streams of a test namespace (the bus creates `<NS>_COMMANDS`, `<NS>_EVENTS`). */
export async function deleteNamespaceStreams(natsUrl: string, namespace: string): Promise<void> {
  const nc = await connect({ servers: natsUrl });
  try {
    const jsm = await jetstreamManager(nc);
    for await (const name of jsm.streams.names()) {
      if (name.startsWith(`${namespace.toUpperCase()}_`)) await jsm.streams.delete(name);
    }
  } finally {
    await nc.close();
  }
}
