// Shared set-up of the operator tests: a fake API server with our CRDs, a real PostgreSQL
// database, a KubeConfig pointing at the fake, a cuttable link to it, and a polling assertion helper.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { KubeConfig } from '@kubernetes/client-node';
import { Crypto, createLogger, migrate, openDatabase, type Db } from '@switchboard/core';
import { createTestDatabase } from '../../../test/support/services.ts';
import { parseAllDocuments } from 'yaml';
import { FakeApiServer, type FakeApiServerOptions, type PolicyRule } from './fake-apiserver.ts';
import { layerBinary } from './k8s-tools.ts';

export const NAMESPACE = 'switchboard';
export const CRD_FILES = ['instances.switchboard.dev.yaml', 'projects.switchboard.dev.yaml'].map((f) => fileURLToPath(new URL(`../../../crds/${f}`, import.meta.url)));

export const CHART = fileURLToPath(new URL('../../../charts/switchboard', import.meta.url));
/** The values every install of the chart must set. */
export const REQUIRED_VALUES = ['secrets.encryptionKey=MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=', 'secrets.adminApiKey=admin-key-of-16-chars'];

let chartRoles: Record<string, PolicyRule[]> | undefined;

/** The rules the chart's Role grants the operator or the gateway (release `sb`: the operator's
 *  Lease is `sb-switchboard-operator`), rendered by helm once per test run. */
export function chartRoleRules(component: 'operator' | 'gateway'): PolicyRule[] {
  chartRoles ??= renderChartRoles();
  return chartRoles[component];
}

function renderChartRoles(): Record<string, PolicyRule[]> {
  const roles = renderChart(REQUIRED_VALUES, ['--show-only', 'templates/rbac.yaml']).filter((o) => o.kind === 'Role');
  return Object.fromEntries(roles.map((r) => [r.metadata.name.replace(/^sb-switchboard-/, ''), r.rules]));
}

/** The chart's objects as `helm template` renders them with these `--set` values. */
export function renderChart(sets: string[], extra: string[] = [], release = 'sb'): Record<string, any>[] {
  const out = execFileSync(layerBinary('helm'), ['template', release, CHART, '--namespace', NAMESPACE, ...extra, ...sets.flatMap((s) => ['--set', s])], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  return parseAllDocuments(out).map((d) => d.toJSON()).filter(Boolean);
}

/** A KubeConfig for the fake whose requests carry `token` (one the fake may hold to a Role). */
export function kubeConfigFor(server: string, token = 'not-checked'): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'fake', server, skipTLSVerify: true }],
    users: [{ name: 'tester', token }],
    contexts: [{ name: 'fake', cluster: 'fake', user: 'tester', namespace: NAMESPACE }],
    currentContext: 'fake',
  });
  return kc;
}

export async function startFake(options: FakeApiServerOptions = {}): Promise<FakeApiServer> {
  const fake = new FakeApiServer({ crdFiles: CRD_FILES, podTerminationMs: 150, bookmarkIntervalMs: 200, ...options });
  await fake.start();
  return fake;
}

export interface TestDb {
  db: Db;
  crypto: Crypto;
  close(): Promise<void>;
}

export async function openTestDb(): Promise<TestDb> {
  const database = await createTestDatabase();
  const db = openDatabase({ databaseUrl: database.url, dataDir: '/nonexistent', poolMax: 4 });
  await migrate(db);
  return {
    db,
    crypto: new Crypto(randomBytes(32)),
    async close() {
      await db.destroy();
      await database.drop();
    },
  };
}

export const silentLogger = createLogger({ level: process.env.OPLOG ?? 'silent' });

/** Retries `check` until it stops throwing (or returns true), or fails with its last error.
 *  Give every assert.ok in `check` a message: without one, node:assert reads the TypeScript source
 *  to describe the failure, and on some files its parser spins for minutes on each retry. */
export async function eventually<T>(check: () => Promise<T> | T, timeoutMs = 8000, intervalMs = 25): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const result = await check();
      if (result !== false) return result;
      lastError = new Error('condition still false');
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) throw lastError;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** A TCP proxy in front of the fake API server whose link can be cut: a partitioned or crashed replica. */
export class LinkProxy {
  private server?: Server;
  private readonly sockets = new Set<Socket>();
  private up = true;

  constructor(private readonly target: string) {}

  async start(): Promise<string> {
    const { port, hostname } = new URL(this.target);
    this.server = createServer((client) => {
      if (!this.up) return client.destroy();
      const upstream = connect(Number(port), hostname);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {});
      }
      client.pipe(upstream).pipe(client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Drops every open connection and refuses new ones until restore(). */
  cut(): void {
    this.up = false;
    for (const s of this.sockets) s.destroy();
  }

  restore(): void {
    this.up = true;
  }

  async stop(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}
