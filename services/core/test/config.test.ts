// Configuration: defaults, every variable validated, and one clear line per bad variable.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig, readEnvironment, requireSettings } from '../src/config.ts';
import { builtService } from '../../../test/support/built.ts';
import type { ServiceName } from '../../../scripts/build.ts';
import { createTestDatabase } from '../../../test/support/services.ts';

/** The built embedded server on `dataDir`, any port, the sandbox network. `onOutput` sees its
 *  stdout so far after each chunk (and the child, to signal it); resolves once it has ended. No
 *  time limit of its own: a first start creates a database, which a busy machine makes slow. */
async function runServer(dataDir: string, onOutput: (out: string, child: ChildProcess) => void, env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [await builtService('server')], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', NETWORK_DRIVER: 'sandbox', LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => {
    out += d.toString('utf8');
    onOutput(out, child);
  });
  child.stderr.on('data', (d) => (err += d.toString('utf8')));
  const [code, signal] = await new Promise<[number | null, string | null]>((resolve) => child.on('close', (c, sig) => resolve([c, sig])));
  return { code, signal, out, err };
}

const untilExit = () => undefined;

/** Runs `body` with a fresh data directory, removed afterwards. */
async function withDataDir(prefix: string, body: (dataDir: string) => Promise<void>): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), prefix));
  try {
    await body(dataDir);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

describe('configuration', () => {
  it('has the documented defaults', () => {
    const c = loadConfig({});
    assert.equal(c.port, 8080);
    assert.equal(c.host, '0.0.0.0');
    assert.equal(c.publicBaseUrl, 'http://localhost:8080');
    assert.equal(c.dataDir, './data');
    assert.equal(c.networkDriver, 'baileys');
    assert.deepEqual(c.webhookRetrySchedule, [0, 5000, 300000, 1800000, 7200000, 18000000, 36000000, 36000000]);
    assert.equal(c.webhookAllowPrivateTargets, false);
    assert.equal(c.rateLimitPerMinute, 300);
    assert.equal(c.trustProxy, false);
    assert.deepEqual(c.allowedOrigins, []);
    assert.equal(c.sendExpiryMs, 86_400_000);
    assert.equal(c.pairingCodeIntervalMs, 60_000);
    assert.equal(c.pairingTimeoutMs, 600_000);
    assert.equal(c.natsStreamReplicas, 1);
    assert.equal(c.mediaLinkTtlSeconds, 3600);
    assert.equal(c.eventRetentionMs, 30 * 86_400_000);
    assert.equal(c.messageRetentionMs, 0, 'messages are kept unless asked');
    assert.equal(c.sandboxReceiptDelayMs, 50);
    assert.equal(c.databaseUrl, undefined);
    assert.equal(c.natsUrl, undefined);
  });

  it('reads every variable', () => {
    const key = Buffer.alloc(32, 1).toString('base64');
    const c = loadConfig({
      PORT: '9000',
      PUBLIC_BASE_URL: 'https://api.example.com/',
      ADMIN_API_KEY: 'a-long-enough-admin-key',
      DATABASE_URL: 'postgres://u@db/x',
      NATS_URL: 'nats://nats:4222',
      NETWORK_DRIVER: 'sandbox',
      ENCRYPTION_KEY: key,
      WEBHOOK_RETRY_SCHEDULE: '0,1,2,3,4,5,6,7',
      TRUST_PROXY: 'true',
      ALLOWED_ORIGINS: 'https://app.example.com, https://admin.example.com/',
      PAIRING_TIMEOUT_MS: '0',
      NATS_STREAM_REPLICAS: '3',
    });
    assert.equal(c.port, 9000);
    assert.equal(c.publicBaseUrl, 'https://api.example.com');
    assert.equal(c.networkDriver, 'sandbox');
    assert.deepEqual(c.encryptionKey, Buffer.alloc(32, 1));
    assert.deepEqual(c.webhookRetrySchedule, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert.deepEqual(c.allowedOrigins, ['https://app.example.com', 'https://admin.example.com']);
    assert.equal(c.pairingTimeoutMs, 0, 'never');
    assert.equal(c.natsStreamReplicas, 3);
  });

  it('keeps media at least as long as a queued send may wait for its file (SEND_EXPIRY_MS and a sweep)', () => {
    const day = 86_400_000;
    assert.equal(loadConfig({ MEDIA_RETENTION_MS: String(2 * day) }).mediaRetentionMs, 2 * day);
    assert.equal(loadConfig({ MEDIA_RETENTION_MS: '1000' }).mediaRetentionMs, day + 3_600_000);
    assert.equal(loadConfig({ SEND_EXPIRY_MS: String(60 * day) }).mediaRetentionMs, 60 * day + 3_600_000, 'beyond the 30-day default');
  });

  it('takes a short ADMIN_API_KEY (test rigs use them; the server warns at start)', () => {
    assert.equal(loadConfig({ ADMIN_API_KEY: 'admin' }).adminApiKey, 'admin');
  });

  it('refuses an ADMIN_API_KEY no Bearer header could carry (blanks, non-ASCII)', () => {
    for (const key of ['my admin key 12345', 'schlüssel-0123456789']) {
      assert.throws(() => loadConfig({ ADMIN_API_KEY: key }), (err: Error) => err instanceof ConfigError && /ADMIN_API_KEY/.test(err.message) && !err.message.includes(key));
    }
  });

  it('takes an ENCRYPTION_KEY of base64 characters only (Buffer.from would skip stray ones)', () => {
    const key = Buffer.alloc(32, 0xfb).toString('base64');
    for (const form of [key, key.replace(/=$/, ''), key.replace(/\+/g, '-').replace(/\//g, '_')]) {
      assert.deepEqual(loadConfig({ ENCRYPTION_KEY: form }).encryptionKey, Buffer.alloc(32, 0xfb), `${form}: standard or URL-safe, padded or not`);
    }
    for (const bad of [`${key}!!!`, `${key.slice(0, 10)}*${key.slice(11)}`, key.slice(4)]) {
      assert.throws(() => loadConfig({ ENCRYPTION_KEY: bad }), (err: unknown) => err instanceof ConfigError && err.problems[0].startsWith('ENCRYPTION_KEY: '));
    }
  });

  it('lists one line per bad variable, naming it', () => {
    try {
      loadConfig({ PORT: 'eighty', NETWORK_DRIVER: 'carrier-pigeon', ENCRYPTION_KEY: 'short', WEBHOOK_RETRY_SCHEDULE: '1,2', TRUST_PROXY: 'maybe', DATABASE_URL: 'mysql://x', PAIRING_TIMEOUT_MS: '-1', NATS_STREAM_REPLICAS: '6', MESSAGE_RETENTION_MS: '3600000' });
      assert.fail('expected a ConfigError');
    } catch (err) {
      assert.ok(err instanceof ConfigError);
      const names = err.problems.map((p) => p.split(':')[0]).sort();
      assert.deepEqual(names, ['DATABASE_URL', 'ENCRYPTION_KEY', 'MESSAGE_RETENTION_MS', 'NATS_STREAM_REPLICAS', 'NETWORK_DRIVER', 'PAIRING_TIMEOUT_MS', 'PORT', 'TRUST_PROXY', 'WEBHOOK_RETRY_SCHEDULE']);
    }
  });

  it('refuses an origin without an http(s) scheme, a retry delay no date can hold, a NATS seed list with a bad entry', () => {
    for (const [name, value] of [
      ['ALLOWED_ORIGINS', 'https://app.example.com,localhost:3000'], // parses as scheme "localhost:", origin "null"
      ['ALLOWED_ORIGINS', 'file:///tmp/page.html'],
      ['WEBHOOK_RETRY_SCHEDULE', '0,1,2,3,4,5,6,99999999999999999999999'],
    ]) {
      assert.throws(() => loadConfig({ [name]: value }), (err: unknown) => err instanceof ConfigError && err.problems.length === 1 && err.problems[0].startsWith(`${name}: `), `${name}=${value}`);
    }
    assert.throws(() => loadConfig({ DATABASE_URL: 'postgres://postgres:pass word' }), (err: unknown) => err instanceof ConfigError && err.problems[0].startsWith('DATABASE_URL: ') && !err.problems[0].includes('pass word'));
    // The base of every link the API gives out: no credentials (not even echoed), nothing after the path.
    for (const base of ['http://user:BaseUrlPw@localhost:8080', 'https://wa.example.com/base?x=1', 'https://wa.example.com/#frag', 'https://wa.example.com/?', 'ftp://wa.example.com', 'wa.example.com']) {
      assert.throws(() => loadConfig({ PUBLIC_BASE_URL: base }), (err: unknown) => err instanceof ConfigError && err.problems[0].startsWith('PUBLIC_BASE_URL: ') && !err.problems[0].includes('BaseUrlPw'), base);
    }
    assert.equal(loadConfig({ PUBLIC_BASE_URL: 'https://wa.example.com/switchboard/' }).publicBaseUrl, 'https://wa.example.com/switchboard');
    for (const seeds of ['nats://a:4222,http://b:4222', 'nats://a:4222, b c', ' , ']) {
      assert.throws(() => loadConfig({ NATS_URL: seeds }), (err: unknown) => err instanceof ConfigError && err.problems[0].startsWith('NATS_URL: '), seeds);
    }
    // A prefix of subjects: the line says in words what it may hold, not a regular expression.
    assert.throws(() => loadConfig({ NATS_NAMESPACE: 'team.a' }), (err: unknown) => err instanceof ConfigError && err.problems[0] === 'NATS_NAMESPACE: must be letters, digits, "_" and "-" only (got "team.a")');
    assert.equal(loadConfig({ NATS_NAMESPACE: 'team_a-2' }).natsNamespace, 'team_a-2');
    assert.equal(loadConfig({ NATS_URL: 'nats://a:4222, nats://b:4222,c:4222' }).natsUrl, 'nats://a:4222, nats://b:4222,c:4222');
    assert.deepEqual(loadConfig({ ALLOWED_ORIGINS: 'http://localhost:3000' }).allowedOrigins, ['http://localhost:3000']);
    assert.equal(loadConfig({ WEBHOOK_RETRY_SCHEDULE: '0,1,2,3,4,5,6,2592000000' }).webhookRetrySchedule[7], 2_592_000_000);
    // HOST is an address or a name: a URL or host:port is named with the other bad variables.
    for (const host of ['http://0.0.0.0', '0.0.0.0:8080', 'two words', '-bad.example']) {
      assert.throws(() => loadConfig({ HOST: host, PORT: 'x' }), (err: unknown) => err instanceof ConfigError && err.problems.some((p) => p.startsWith('HOST: ')) && err.problems.length === 2, host);
    }
    for (const host of ['0.0.0.0', '::', '::1', '127.0.0.1', 'localhost', 'gateway.switchboard.svc.cluster.local', 'my_host', 'fe80::1%eth0']) assert.equal(loadConfig({ HOST: host }).host, host);
  });

  it('makes the server exit non-zero with the bad variable named', async function () {
    this.timeout(30_000);
    const run = spawnSync(process.execPath, [await builtService('server')], {
      env: { ...process.env, PORT: '-1', RATE_LIMIT_PER_MINUTE: 'lots', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_TRACES_EXPORTER: 'fax' },
      encoding: 'utf8',
      timeout: 25_000,
    });
    assert.equal(run.status, 2);
    assert.match(run.stderr, /configuration error: PORT: /);
    assert.match(run.stderr, /configuration error: RATE_LIMIT_PER_MINUTE: /);
    assert.match(run.stderr, /configuration error: OTEL_TRACES_EXPORTER: /);
  });

  it('gathers the problems of every reader of the environment into one ConfigError', () => {
    const fails = (...problems: string[]) => () => {
      throw new ConfigError(problems);
    };
    assert.deepEqual(readEnvironment({ a: () => 1, b: () => 'two', c: () => requireSettings({ X: 'x' }, { X: 'for x' }) }), { a: 1, b: 'two', c: undefined });
    assert.throws(
      () => readEnvironment({ a: fails('A: bad'), b: () => 2, c: () => requireSettings({ X: ' ' }, { X: 'for the test', Y: 'too' }), d: fails('D: bad', 'E: bad') }),
      (err: unknown) => err instanceof ConfigError && JSON.stringify(err.problems) === JSON.stringify(['A: bad', 'X: required for the test', 'Y: required too', 'D: bad', 'E: bad']),
    );
    // A fault that is no configuration problem is no list entry: it is thrown as it is.
    assert.throws(() => readEnvironment({ a: fails('A: bad'), b: () => JSON.parse('{') }), SyntaxError);
  });

  it('makes every cluster process name all its bad and missing variables in one start', async function () {
    this.timeout(60_000);
    // Each line is a separate problem; before, a process stopped at its first group of checks.
    const common = { PATH: process.env.PATH, HOME: '/nonexistent', PORT: 'eighty', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_TRACES_SAMPLER: 'sometimes' };
    const cases: [ServiceName, Record<string, string>, string[]][] = [
      ['gateway', {}, ['DATABASE_URL', 'NATS_URL', 'ADMIN_API_KEY', 'ENCRYPTION_KEY']],
      // Durations beyond a timer's range (a Node.js timer fires after 1 ms then: a busy loop), and
      // numbers Number() would take but no one means as a port.
      ['dispatcher', { HEALTH_PORT: '1e3', DISPATCHER_POLL_INTERVAL_MS: 'soon', DISPATCHER_ATTEMPT_TIMEOUT_MS: '3000000000' }, ['DATABASE_URL', 'NATS_URL', 'ENCRYPTION_KEY', 'HEALTH_PORT', 'DISPATCHER_POLL_INTERVAL_MS', 'DISPATCHER_ATTEMPT_TIMEOUT_MS']],
      ['session', { HEALTH_PORT: 'x', SESSION_LOCK_RETRY_MS: '0', SESSION_RUN_STATE_CHECK_MS: '3000000000', SESSION_UNLINK_MARK_WAIT_MS: 'long' }, ['INSTANCE_ID', 'DATABASE_URL', 'NATS_URL', 'ENCRYPTION_KEY', 'HEALTH_PORT', 'SESSION_LOCK_RETRY_MS', 'SESSION_RUN_STATE_CHECK_MS', 'SESSION_UNLINK_MARK_WAIT_MS']],
      ['operator', { HEALTH_PORT: '0x1F90' }, ['DATABASE_URL', 'ENCRYPTION_KEY', 'KUBERNETES_NAMESPACE', 'KUBECONFIG', 'HEALTH_PORT']],
    ];
    for (const [service, env, names] of cases) {
      const run = spawnSync(process.execPath, [await builtService(service)], { env: { ...common, ...env }, encoding: 'utf8', timeout: 25_000 });
      assert.equal(run.status, 2, `${service}: ${run.stderr}`);
      for (const name of [...names, 'PORT', 'OTEL_TRACES_SAMPLER']) assert.match(run.stderr, new RegExp(`configuration error: ${name}: `), `${service} names ${name}: ${run.stderr}`);
      assert.doesNotMatch(run.stdout + run.stderr, /^\s+at /m, 'no stack trace');
    }
  });

  it('names the variable when a start step fails: the database, the bus, the listen address', async function () {
    this.timeout(120_000);
    const cases: [Record<string, string>, RegExp][] = [
      // The embedded server claims its database (server-lock.ts) before it migrates it.
      [{ DATABASE_URL: 'postgres://127.0.0.1:1/none' }, /^Switchboard failed to start: DATABASE_URL: cannot open or claim the database \(.*ECONNREFUSED/m],
      [{ NATS_URL: 'nats://127.0.0.1:1' }, /^Switchboard failed to start: NATS_URL: cannot open the bus/m],
      [{ HOST: 'no-such-host.invalid' }, /^Switchboard failed to start: HOST\/PORT: cannot listen on no-such-host.invalid:/m],
      // A parent that refuses new entries with ENOENT made Node's recursive mkdir loop for ever.
      [{ DATA_DIR: '/proc/switchboard-test/data' }, /^Switchboard failed to start: DATA_DIR: cannot create the data directory \(ENOENT/m],
    ];
    // Side by side: the bus and listen cases create a database first, the slow part of this test.
    await Promise.all(
      cases.map(([env, expected]) =>
        withDataDir('sb-start-', async (dataDir) => {
          const run = await runServer(dataDir, untilExit, env);
          assert.equal(run.code, 1, `${JSON.stringify(env)}: ${run.err}`);
          assert.match(run.err, expected);
          assert.doesNotMatch(run.out + run.err, /^\s+at /m, 'no stack trace');
        }),
      ),
    );
  });

  it('refuses to start on a database written with another ENCRYPTION_KEY, naming it', async function () {
    this.timeout(60_000);
    const database = await createTestDatabase();
    try {
      await withDataDir('sb-key-a-', async (dataDir) => {
        const first = await runServer(dataDir, (out, child) => !child.killed && /listening on/.test(out) && child.kill('SIGTERM'), { DATABASE_URL: database.url });
        assert.equal(first.code, 0, first.out);
      });
      await withDataDir('sb-key-b-', async (dataDir) => {
        // A new data directory: a new key is generated, which did not write this database.
        const env = { PATH: process.env.PATH, HOME: process.env.HOME, DATA_DIR: dataDir, PORT: '0', NETWORK_DRIVER: 'sandbox', LOG_LEVEL: 'warn', DATABASE_URL: database.url };
        const run = spawnSync(process.execPath, [await builtService('server')], { env, encoding: 'utf8', timeout: 25_000 });
        assert.equal(run.status, 1, run.stderr);
        assert.match(run.stderr, /^Switchboard failed to start: ENCRYPTION_KEY: does not fit this database \(the database was written with another key/m);
        assert.doesNotMatch(run.stdout + run.stderr, /^\s+at /m, 'no stack trace');
      });
    } finally {
      await database.drop();
    }
  });

  it('shows a generated admin key on the first start that succeeds, then never again; PORT=0 names the port it got', async function () {
    this.timeout(90_000);
    const dataDir = mkdtempSync(join(tmpdir(), 'sb-admin-key-'));
    /** Starts the server until it says it listens (then stops it); its stdout. */
    const startOnce = async () => {
      const run = await runServer(dataDir, (out, child) => !child.killed && /API description at/.test(out) && child.kill('SIGTERM'));
      assert.equal(run.code, 0, run.out);
      return run.out;
    };
    try {
      const failed = await runServer(dataDir, untilExit, { NATS_URL: 'nats://127.0.0.1:1', LOG_LEVEL: 'info' });
      assert.equal(failed.code, 1, failed.err);
      const key = readFileSync(join(dataDir, 'admin-key'), 'utf8').trim();
      assert.doesNotMatch(failed.out + failed.err, new RegExp(key), 'a start that failed printed nothing of it');
      assert.match(failed.out, /first start: creating the database in .*pgdata/, 'a new data directory says why the start takes a while');
      const second = await startOnce();
      assert.ok(second.includes(`: ${key}`), 'the next start shows it');
      // PORT=0: the port the server got is the one its public URL names.
      const [, named, bound] = /listening on http:\/\/localhost:(\d+) \(bound to 127\.0\.0\.1:(\d+)\)/.exec(second) ?? [];
      assert.ok(Number(named) > 0 && named === bound, second);
      const third = await startOnce();
      assert.ok(!third.includes(key) && third.includes('administrative key is in'), third);
      assert.doesNotMatch(third, /first start/);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('keeps the embedded data private: a data directory it makes and the database directory are its owner\'s alone', async function () {
    this.timeout(60_000);
    await withDataDir('sb-private-', async (parent) => {
      const fresh = join(parent, 'new');
      const earlier = join(parent, 'earlier'); // as an earlier version left it
      mkdirSync(join(earlier, 'pgdata'), { recursive: true, mode: 0o755 });
      chmodSync(join(earlier, 'pgdata'), 0o755);
      // Side by side: each start creates a database, the slow part of this test.
      await Promise.all(
        [fresh, earlier].map(async (dataDir) => {
          const run = await runServer(dataDir, (out, child) => !child.killed && /listening on/.test(out) && child.kill('SIGTERM'));
          assert.equal(run.code, 0, run.out);
          assert.equal(statSync(join(dataDir, 'pgdata')).mode & 0o777, 0o700, dataDir);
        }),
      );
      assert.equal(statSync(fresh).mode & 0o777, 0o700, 'a data directory the server made');
      assert.equal(statSync(earlier).mode & 0o777, 0o755, 'one it was given keeps what its owner set');
    });
  });

  it('a SIGTERM during start-up stops the server cleanly once it has started, not half-way', async function () {
    this.timeout(60_000);
    await withDataDir('sb-early-stop-', async (dataDir) => {
      // After its first line, "starting…": the database is not even open.
      const { code, signal, out } = await runServer(dataDir, (_out, child) => child.killed || child.kill('SIGTERM'));
      assert.deepEqual([code, signal], [0, null], out);
      assert.match(out, /stopping…/);
    });
  });

  it('a second SIGINT while still starting exits at once (Ctrl-C twice)', async function () {
    this.timeout(60_000);
    await withDataDir('sb-early-exit-', async (dataDir) => {
      const { code, out } = await runServer(dataDir, (_out, child) => {
        if (child.killed) return;
        child.kill('SIGINT');
        setTimeout(() => child.kill('SIGINT'), 100); // apart: two pending signals of one kind are one
      });
      assert.equal(code, 1, out);
      assert.doesNotMatch(out, /listening on/, 'it did not wait to finish starting');
    });
  });

  it('the dispatcher refuses a bad HEALTH_PORT before it starts anything; the operator names DATABASE_URL, or KUBECONFIG without a cluster', async function () {
    this.timeout(60_000);
    const key = Buffer.alloc(32, 7).toString('base64');
    const base = { PATH: process.env.PATH, HOME: process.env.HOME, ENCRYPTION_KEY: key, LOG_LEVEL: 'info' };
    const dispatcher = spawnSync(process.execPath, [await builtService('dispatcher')], {
      env: { ...base, DATABASE_URL: 'postgres://127.0.0.1:1/none', NATS_URL: 'nats://127.0.0.1:1', HEALTH_PORT: 'x' },
      encoding: 'utf8',
      timeout: 25_000,
    });
    assert.equal(dispatcher.status, 2, dispatcher.stderr);
    assert.match(dispatcher.stderr, /configuration error: HEALTH_PORT: /);
    assert.doesNotMatch(dispatcher.stdout + dispatcher.stderr, /dispatcher started|DATABASE_URL/, 'nothing was started or tried first');
    await withDataDir('sb-kube-', async (home) => {
      const kubeconfig = join(home, 'kubeconfig');
      writeFileSync(kubeconfig, 'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n');
      const operator = (env: Record<string, string>) =>
        spawnSync(process.execPath, [builtOperator], {
          env: { ...base, HOME: home, DATABASE_URL: 'postgres://127.0.0.1:1/none', SESSION_IMAGE: 'switchboard:test', KUBERNETES_NAMESPACE: 'switchboard', ...env },
          encoding: 'utf8',
          timeout: 25_000,
        });
      const builtOperator = await builtService('operator');
      const noDatabase = operator({ KUBECONFIG: kubeconfig });
      assert.equal(noDatabase.status, 1, noDatabase.stderr);
      assert.match(noDatabase.stderr, /failed to start: DATABASE_URL: cannot open or migrate the database \(.*ECONNREFUSED/);
      assert.doesNotMatch(noDatabase.stdout + noDatabase.stderr, /^\s+at /m, 'no stack trace');
      // No pod, no KUBECONFIG, no ~/.kube/config: said at once, not retried every 2 s.
      const noCluster = operator({});
      assert.equal(noCluster.status, 2, noCluster.stderr);
      assert.match(noCluster.stderr, /configuration error: KUBECONFIG: no Kubernetes cluster/);
    });
  });
});
