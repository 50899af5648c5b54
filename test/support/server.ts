// Starts the real embedded server in this process for a test: temp DATA_DIR, random port,
// sandbox driver, and either PGlite (default) or a fresh PostgreSQL database.
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, createLogger, migrate, openDatabase } from '@switchboard/core';
import { startEmbeddedServer, type EmbeddedServer } from '@switchboard/server/embedded';
import { createTestDatabase } from './services.ts';
import { ApiClient } from './http.ts';
import { createServer } from 'node:net';

/** A port that was free a moment ago (the server binds it right after). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

export type StorageKind = 'pglite' | 'postgres';

export interface TestServer {
  url: string;
  adminKey: string;
  admin: ApiClient;
  server: EmbeddedServer;
  client(token?: string): ApiClient;
  /** Stops and starts again on the same storage (persistence checks). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

export async function startTestServer(opts: { storage?: StorageKind; env?: Record<string, string> } = {}): Promise<TestServer> {
  const dataDir = mkdtempSync(join(tmpdir(), 'sb-test-'));
  if (opts.storage !== 'postgres') cpSync(await pgliteTemplate(), join(dataDir, 'pgdata'), { recursive: true });
  const database = opts.storage === 'postgres' ? await createTestDatabase() : undefined;
  const env: Record<string, string> = {
    PORT: String(await freePort()),
    HOST: '127.0.0.1',
    DATA_DIR: dataDir,
    NETWORK_DRIVER: 'sandbox',
    RATE_LIMIT_PER_MINUTE: '100000',
    SANDBOX_RECEIPT_DELAY_MS: '10',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    ...(database ? { DATABASE_URL: database.url } : {}),
    ...opts.env,
  };
  const start = async () => {
    const config = loadConfig(env);
    const log = createLogger({ level: env.LOG_LEVEL, name: 'test-server' });
    const server = await startEmbeddedServer(config, { log });
    return server;
  };
  let server = await start();
  const make = (token?: string) => new ApiClient(server.url, token);
  const handle: TestServer = {
    url: server.url,
    adminKey: server.adminKey,
    admin: make(server.adminKey),
    server,
    client: make,
    async restart() {
      await server.stop();
      server = await start();
      handle.server = server;
    },
    async stop() {
      await server.stop();
      await database?.drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return handle;
}

// Creating a PGlite database (initdb in WASM) takes seconds; tests copy one migrated template.
let template: Promise<string> | undefined;
function pgliteTemplate(): Promise<string> {
  template ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sb-pglite-template-'));
    const db = openDatabase({ dataDir: dir });
    await migrate(db);
    await db.destroy();
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    return join(dir, 'pgdata');
  })();
  return template;
}
