// Cluster mode on one machine, for the chaos tests and the benchmarks: private PostgreSQL and
// NATS servers this run alone may restart, and the gateway, dispatcher and session processes
// as production runs them (built files, `node <name>.mjs`, built once per test run from the
// current sources: test/support/built.ts) under a supervisor that restarts any process
// that exits — what Kubernetes does in a real cluster — so "killed and came back by itself" is
// exactly what the tests observe. Nothing here touches the shared servers on 5432/4222.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { builtService } from './built.ts';
import { freePort } from './server.ts';
import { eventually } from './http.ts';
import { TEST_CA_PATH } from './https-receiver.ts';

export const REPO_ROOT = resolve(import.meta.dirname, '..', '..');
const PG_BIN = '/usr/lib/postgresql/15/bin';

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls until `fn` is truthy; throws naming `what` after timeoutMs. */
export function waitUntil<T>(what: string, fn: () => Promise<T | undefined | null | false> | T | undefined | null | false, timeoutMs = 30_000, everyMs = 50): Promise<T> {
  return eventually(async () => fn(), timeoutMs, what, everyMs);
}

// ---------------------------------------------------------------------------------------------
// Supervised processes

export interface ManagedProcess {
  readonly name: string;
  readonly pid: number | undefined;
  /** How many times the supervisor started it again after it exited. */
  readonly restarts: number;
  /** The last 8 KB of stdout+stderr of the current and previous runs. */
  output(): string;
  /** SIGKILL; the supervisor starts it again after `restartDelayMs`. */
  kill9(): Promise<void>;
  /** SIGTERM (then SIGKILL after 10 s) and no restart. Resolves with the exit code. */
  stop(): Promise<number | null>;
}

export interface SpawnOptions {
  name: string;
  args: string[];
  env: Record<string, string>;
  /** Restart when it exits (default true), after this delay (default 200 ms). */
  supervise?: boolean;
  restartDelayMs?: number;
  command?: string;
}

export function spawnManaged(opts: SpawnOptions): ManagedProcess {
  let child: ChildProcess | undefined;
  let restarts = 0;
  let stopping = false;
  let log = '';
  const append = (chunk: Buffer) => {
    log = (log + chunk.toString('utf8')).slice(-8192);
  };
  const exits: ((code: number | null) => void)[] = [];

  const start = () => {
    const c = spawn(opts.command ?? process.execPath, opts.args, { cwd: REPO_ROOT, env: { PATH: process.env.PATH ?? '', ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    child = c;
    c.stdout!.on('data', append);
    c.stderr!.on('data', append);
    c.once('exit', (code) => {
      for (const resolveExit of exits.splice(0)) resolveExit(code);
      if (stopping || opts.supervise === false) return;
      setTimeout(() => {
        if (stopping) return;
        restarts++;
        start();
      }, opts.restartDelayMs ?? 200);
    });
  };
  const exited = (c: ChildProcess) => (c.exitCode !== null || c.signalCode !== null ? Promise.resolve(c.exitCode) : new Promise<number | null>((r) => exits.push(r)));
  start();

  return {
    name: opts.name,
    get pid() {
      return child?.pid;
    },
    get restarts() {
      return restarts;
    },
    output: () => log,
    async kill9() {
      const c = child!;
      const done = exited(c);
      c.kill('SIGKILL');
      await done;
    },
    async stop() {
      stopping = true;
      const c = child!;
      if (c.exitCode !== null || c.signalCode !== null) return c.exitCode;
      const done = exited(c);
      c.kill('SIGTERM');
      const force = setTimeout(() => c.kill('SIGKILL'), 10_000);
      const code = await done;
      clearTimeout(force);
      return code;
    },
  };
}

/** Resident set size of a process in bytes (Linux /proc). */
export function rssBytes(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').split('\n').find((l) => l.startsWith('VmRSS:'));
  return Number(line?.match(/(\d+)/)?.[1] ?? 0) * 1024;
}

// ---------------------------------------------------------------------------------------------
// Private servers

export interface PrivateServer {
  readonly url: string;
  /** Stops the server abruptly and starts it again on the same port and data. */
  restart(opts?: { downMs?: number }): Promise<void>;
  close(): Promise<void>;
}

/** A throwaway PostgreSQL 15 cluster (initdb as the `postgres` user when running as root). */
export async function startPrivatePostgres(): Promise<PrivateServer> {
  const dir = mkdtempSync(join(tmpdir(), 'sb-chaos-pg-'));
  const data = join(dir, 'data');
  const port = await freePort();
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const pg = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
    const uid = Number(pg.stdout.trim());
    const gid = Number(spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).stdout.trim());
    chownSync(dir, uid, gid);
    chmodSync(dir, 0o700);
  }
  const run = (bin: string, args: string[]) => {
    const cmd = asRoot ? 'runuser' : join(PG_BIN, bin);
    const full = asRoot ? ['-u', 'postgres', '--', join(PG_BIN, bin), ...args] : args;
    const out = spawnSync(cmd, full, { encoding: 'utf8', timeout: 60_000 });
    if (out.status !== 0) throw new Error(`${bin} ${args.join(' ')} failed: ${out.stderr || out.stdout}`);
  };
  run('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']);
  // fsync off: an immediate stop is a server crash, not a machine crash, so the OS cache keeps
  // every committed write; it saves seconds per run on a busy disk.
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`;
  const start = () => run('pg_ctl', ['-D', data, '-o', options, '-l', join(dir, 'log'), '-w', 'start']);
  const stop = (mode: 'immediate' | 'fast') => run('pg_ctl', ['-D', data, '-m', mode, '-w', 'stop']);
  start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    async restart({ downMs = 500 } = {}) {
      stop('immediate');
      await sleep(downMs);
      start();
    },
    async close() {
      try {
        stop('immediate');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

/** A throwaway nats-server with JetStream, its store in a temp dir that survives restarts. */
export async function startPrivateNats(): Promise<PrivateServer> {
  const dir = mkdtempSync(join(tmpdir(), 'sb-chaos-nats-'));
  const port = await freePort();
  const server = spawnManaged({ name: 'nats', command: '/usr/sbin/nats-server', args: ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir], env: {}, supervise: false });
  let current = server;
  const url = `nats://127.0.0.1:${port}`;
  await waitForPort(port);
  return {
    url,
    async restart({ downMs = 500 } = {}) {
      await current.kill9();
      await sleep(downMs);
      current = spawnManaged({ name: 'nats', command: '/usr/sbin/nats-server', args: ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir], env: {}, supervise: false });
      await waitForPort(port);
    },
    async close() {
      await current.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function waitForPort(port: number): Promise<void> {
  const { connect } = await import('node:net');
  await waitUntil(`port ${port}`, () => new Promise<boolean>((r) => {
    const s = connect(port, '127.0.0.1', () => (s.end(), r(true)));
    s.once('error', () => r(false));
  }), 15_000, 50);
}

// ---------------------------------------------------------------------------------------------
// The Switchboard processes

export interface ClusterOptions {
  databaseUrl: string;
  natsUrl: string;
  namespace: string;
  /** Extra environment for every process (tuning, retry schedule). */
  env?: Record<string, string>;
  /** Extra node flags for every process (e.g. --cpu-prof while investigating). */
  nodeArgs?: string[];
}

export interface Cluster {
  readonly url: string;
  readonly adminKey: string;
  readonly env: Record<string, string>;
  readonly gateway: ManagedProcess;
  readonly dispatchers: ManagedProcess[];
  readonly sessions: Map<string, ManagedProcess>;
  /** `extraEnv`: settings of this replica only (tuning variables, for example). */
  startDispatcher(extraEnv?: Record<string, string>): ManagedProcess;
  /** The operator's job without Kubernetes: one session process per instance. */
  startSession(instanceId: string): ManagedProcess;
  /** Resolves once /health answers (after a gateway restart, for example). */
  ready(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export async function startCluster(opts: ClusterOptions & { dispatchers?: number }): Promise<Cluster> {
  const entries = { gateway: await builtService('gateway'), dispatcher: await builtService('dispatcher'), session: await builtService('session') };
  const port = await freePort();
  const adminKey = `admin-${randomBytes(16).toString('hex')}`;
  const dataDir = mkdtempSync(join(tmpdir(), 'sb-cluster-'));
  const env: Record<string, string> = {
    DATABASE_URL: opts.databaseUrl,
    NATS_URL: opts.natsUrl,
    NATS_NAMESPACE: opts.namespace,
    ADMIN_API_KEY: adminKey,
    ENCRYPTION_KEY: randomBytes(32).toString('base64'),
    NETWORK_DRIVER: 'sandbox',
    PORT: String(port),
    HOST: '127.0.0.1',
    PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
    DATA_DIR: dataDir,
    WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
    NODE_EXTRA_CA_CERTS: TEST_CA_PATH,
    RATE_LIMIT_PER_MINUTE: '1000000',
    LOG_LEVEL: 'warn',
    ...opts.env,
  };
  const service = (name: keyof typeof entries) => [...(opts.nodeArgs ?? []), entries[name]];
  const url = `http://127.0.0.1:${port}`;
  const ready = (timeoutMs = 60_000) =>
    waitUntil('gateway /health', async () => (await fetch(`${url}/health`).catch(() => undefined))?.ok, timeoutMs, 100).then(() => undefined);

  // The gateway migrates the schema; the others start after it so they never race the migration.
  const gateway = spawnManaged({ name: 'gateway', args: service('gateway'), env });
  try {
    await ready();
  } catch (err) {
    await gateway.stop();
    throw new Error(`${String(err)}\n${gateway.output()}`);
  }
  const dispatchers: ManagedProcess[] = [];
  const sessions = new Map<string, ManagedProcess>();
  const cluster: Cluster = {
    url,
    adminKey,
    env,
    gateway,
    dispatchers,
    sessions,
    startDispatcher(extraEnv) {
      const p = spawnManaged({ name: `dispatcher-${dispatchers.length}`, args: service('dispatcher'), env: { ...env, ...extraEnv } });
      dispatchers.push(p);
      return p;
    },
    startSession(instanceId) {
      const p = spawnManaged({ name: `session-${instanceId}`, args: service('session'), env: { ...env, INSTANCE_ID: instanceId, SESSION_LOCK_RETRY_MS: '200' } });
      sessions.set(instanceId, p);
      return p;
    },
    ready,
    async stop() {
      await Promise.all([gateway, ...dispatchers, ...sessions.values()].map((p) => p.stop()));
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  for (let i = 0; i < (opts.dispatchers ?? 1); i++) cluster.startDispatcher();
  return cluster;
}
