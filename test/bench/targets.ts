// The servers the benchmarks drive: the bare Koa baseline, the durability floor (Koa + one
// group-commit INSERT), the embedded server (PGlite + in-process bus) and cluster mode (gateway,
// dispatcher and sessions as separate processes on PostgreSQL + NATS). Each runs in its own
// process, as in production; the load generator stays here.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { builtService } from '../support/built.ts';
import { spawnManaged, startCluster, startPrivateNats, waitUntil, type Cluster, type ManagedProcess, type PrivateServer } from '../support/cluster.ts';
import { createTestDatabase } from '../support/services.ts';
import { freePort } from '../support/server.ts';

export interface ServerUnderTest {
  url: string;
  adminKey: string;
  process: ManagedProcess;
  stop(): Promise<void>;
}

/** A reference server: test/bench/<name>.ts, which prints "listening <port>" once ready. */
async function startReference(name: string, env: Record<string, string>, cleanUp: () => Promise<void> = async () => {}): Promise<ServerUnderTest> {
  const p = spawnManaged({ name, args: ['--import', 'tsx', `test/bench/${name}.ts`], env, supervise: false });
  const stop = async () => {
    await p.stop();
    await cleanUp();
  };
  try {
    const port = await waitUntil(`${name} listening`, () => p.output().match(/listening (\d+)/)?.[1], 30_000);
    return { url: `http://127.0.0.1:${port}`, adminKey: '', process: p, stop };
  } catch (err) {
    await stop();
    throw new Error(`${String(err)}\n${p.output()}`);
  }
}

export function startBareKoa(): Promise<ServerUnderTest> {
  return startReference('bare-koa', {});
}

/** Bare Koa plus a group-commit INSERT per request (durable-floor.ts), on a fresh database. */
export async function startDurableFloor(): Promise<ServerUnderTest> {
  const database = await createTestDatabase();
  return startReference('durable-floor', { DATABASE_URL: database.url }, () => database.drop());
}

export async function startEmbedded(extraEnv: Record<string, string> = {}): Promise<ServerUnderTest> {
  const dataDir = mkdtempSync(join(tmpdir(), 'sb-bench-embedded-'));
  const port = await freePort();
  const adminKey = `admin-${randomBytes(16).toString('hex')}`;
  const p = spawnManaged({
    name: 'embedded',
    args: [await builtService('server')],
    env: { PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, ADMIN_API_KEY: adminKey, NETWORK_DRIVER: 'sandbox', RATE_LIMIT_PER_MINUTE: '1000000', LOG_LEVEL: 'warn', ...extraEnv },
    supervise: false,
  });
  const url = `http://127.0.0.1:${port}`;
  await waitUntil('embedded server /health', async () => (await fetch(`${url}/health`).catch(() => undefined))?.ok, 90_000, 100).catch((err) => {
    throw new Error(`${String(err)}\n${p.output()}`);
  });
  return {
    url,
    adminKey,
    process: p,
    async stop() {
      await p.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface BenchCluster {
  cluster: Cluster;
  databaseUrl: string;
  natsUrl: string;
  namespace: string;
  stop(): Promise<void>;
}

/** Cluster mode on the shared PostgreSQL (a fresh database) and a private NATS server. */
export async function startBenchCluster(opts: { dispatchers?: number; env?: Record<string, string>; nodeArgs?: string[] } = {}): Promise<BenchCluster> {
  const database = await createTestDatabase();
  let nats: PrivateServer | undefined;
  try {
    nats = await startPrivateNats();
    const namespace = `bench${randomBytes(3).toString('hex')}`;
    const cluster = await startCluster({ databaseUrl: database.url, natsUrl: nats.url, namespace, dispatchers: opts.dispatchers ?? 1, env: opts.env, nodeArgs: opts.nodeArgs });
    return {
      cluster,
      databaseUrl: database.url,
      natsUrl: nats.url,
      namespace,
      async stop() {
        await cluster.stop();
        await nats!.close();
        await database.drop();
      },
    };
  } catch (err) {
    await nats?.close();
    await database.drop();
    throw err;
  }
}
