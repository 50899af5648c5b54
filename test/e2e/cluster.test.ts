// Cluster mode end to end: gateway, session and dispatcher as separate processes on PostgreSQL and
// NATS. The gateway reaches the session over NATS request/reply; sends and events cross the bus.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import knexFactory from 'knex';
import { request as httpRequest } from 'node:http';
import { Objm } from '@nats-io/obj';
import { connect } from '@nats-io/transport-node';
import { natsMediaBucketName } from '@switchboard/core';
import { spawnManaged, startCluster, waitUntil, type Cluster, type ManagedProcess } from '../support/cluster.ts';
import { builtService } from '../support/built.ts';
import { freePort } from '../support/server.ts';
import { ApiClient, eventually } from '../support/http.ts';
import { createTestDatabase, NATS_URL, testNamespace } from '../support/services.ts';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver.ts';
import { mediaFixtures } from '../fixtures/media/index.ts';
import { waitForSendStatus, waitForState } from './support.ts';

describe('cluster mode (separate processes on PostgreSQL + NATS)', function () {
  this.timeout(120_000);
  let cluster: Cluster;
  let database: Awaited<ReturnType<typeof createTestDatabase>>;
  let receiver: HttpsReceiver;
  let admin: ApiClient;
  const namespace = testNamespace();

  before(async () => {
    database = await createTestDatabase();
    receiver = await startHttpsReceiver();
    cluster = await startCluster({ databaseUrl: database.url, natsUrl: NATS_URL, namespace, env: { SANDBOX_RECEIPT_DELAY_MS: '5' } });
    admin = new ApiClient(cluster.url, cluster.adminKey);
  });
  after(async () => {
    await cluster?.stop();
    await receiver?.close();
    await database?.drop();
  });

  it('pairs through the session process, sends, receives and delivers webhooks', async () => {
    const inst = (await admin.post('/api/instances', { name: 'Cluster instance' })).body;
    await admin.put(`/api/instances/${inst.id}/webhook`, { url: receiver.url('/hook') });
    assert.equal((await admin.post(`/api/instances/${inst.id}/connect`)).status, 200);
    cluster.startSession(inst.id); // what the operator does in Kubernetes
    const waiting = await waitForState(admin, inst.id, 'awaiting_scan', 30_000);
    assert.match(waiting.qrImage, /^data:image\/png;base64,/);
    assert.equal((await admin.post(`/sandbox/instances/${inst.id}/scan`, { phone: '5511900000030' })).status, 200);
    await waitForState(admin, inst.id, 'connected');

    const text = await admin.post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'text', text: 'across processes' });
    const image = await admin.post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'image', base64: mediaFixtures.png.base64(), mimetype: 'image/png' });
    const failing = await admin.post(`/api/instances/${inst.id}/messages`, { phone: '5511955550000', type: 'text', text: 'x' });
    await waitForSendStatus(admin, inst.id, text.body.id, ['read'], 20_000);
    await waitForSendStatus(admin, inst.id, image.body.id, ['read'], 20_000);
    await waitForSendStatus(admin, inst.id, failing.body.id, ['failed'], 20_000);

    const inbound = await admin.post(`/sandbox/instances/${inst.id}/inbound`, { from: '5511977776666', type: 'text', text: 'hello cluster' });
    assert.equal(inbound.status, 200);
    await eventually(async () => ((await admin.get(`/api/instances/${inst.id}/incoming`)).body.data as any[]).some((m) => m.messageId === inbound.body.messageId), 20_000, 'incoming');

    // A sandbox file larger than a NATS message reaches the session through the media store.
    const file = randomBytes(3 * 1024 * 1024);
    const large = await admin.post(`/sandbox/instances/${inst.id}/inbound`, { from: '5511977776666', type: 'document', mediaBase64: file.toString('base64'), mimetype: 'application/octet-stream', fileName: 'large.bin' });
    assert.equal(large.status, 200, JSON.stringify(large.body));
    const record = await eventually(async () => ((await admin.get(`/api/instances/${inst.id}/incoming`)).body.data as any[]).find((m) => m.messageId === large.body.messageId), 20_000, 'large incoming');
    const download = await fetch(record.media.url);
    assert.equal(download.status, 200);
    assert.ok(Buffer.from(await download.arrayBuffer()).equals(file), 'the file as sent');
    const nc = await connect({ servers: NATS_URL });
    try {
      const names = (await (await new Objm(nc).open(natsMediaBucketName(namespace))).list()).map((o) => o.name);
      assert.deepEqual(names.filter((name) => name.startsWith('stg_')), [], 'the staged copy is gone');
    } finally {
      await nc.close();
    }

    const delivered = await receiver.waitForRequests(1, 20_000, (r) => JSON.parse(r.rawBody.toString()).data?.messageId === text.body.id && JSON.parse(r.rawBody.toString()).type === 'message.sent');
    assert.equal(delivered[0].headers['x-service-signature'].startsWith('sha256='), true);

    // Pairing codes and disconnects reach the session over NATS request/reply.
    assert.equal((await admin.post(`/api/instances/${inst.id}/pairing-code`, { phone: '5511900000030' })).status, 409);
    const stopped = await admin.post(`/api/instances/${inst.id}/disconnect`);
    assert.equal(stopped.status, 200);
    await waitForState(admin, inst.id, 'stopped', 20_000);
    assert.equal((await admin.post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'text', text: 'x' })).body.code, 'instance_paused');
    await admin.post(`/api/instances/${inst.id}/connect`);
    const back = await waitForState(admin, inst.id, 'connected', 30_000);
    assert.equal(back.phone, '5511900000030', 'reconnects without a new scan');
    // A pairing code for the disconnected instance gives its link up (the session is not running
    // to do it) and pairs the phone it names, through the session started for it.
    await admin.post(`/api/instances/${inst.id}/disconnect`);
    await waitForState(admin, inst.id, 'stopped', 20_000);
    const code = await admin.post(`/api/instances/${inst.id}/pairing-code`, { phone: '5511900000031' });
    assert.equal(code.status, 200, JSON.stringify(code.body));
    assert.equal((await admin.post(`/sandbox/instances/${inst.id}/pair`, { code: code.body.code })).status, 200);
    assert.equal((await waitForState(admin, inst.id, 'connected', 30_000)).phone, '5511900000031');
  });

  /** A new instance, its session process started (the operator's part) and paired on the sandbox. */
  async function pairedSession(name: string, phone: string) {
    const inst = (await admin.post('/api/instances', { name })).body;
    await admin.post(`/api/instances/${inst.id}/connect`);
    const session = cluster.startSession(inst.id);
    await waitForState(admin, inst.id, 'awaiting_scan', 30_000);
    await admin.post(`/sandbox/instances/${inst.id}/scan`, { phone });
    await waitForState(admin, inst.id, 'connected');
    return { inst, session };
  }

  it('turns in-flight items into uncertain and loses nothing when the session process is killed', async () => {
    const { inst, session } = await pairedSession('Killed session', '5511900000031');
    const ids: string[] = [];
    for (let i = 0; i < 100; i++) ids.push((await admin.post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'text', text: `burst ${i}` })).body.id);
    await session.kill9(); // the supervisor starts it again, as Kubernetes would
    const terminal = ['sent', 'delivered', 'read', 'failed', 'uncertain'];
    for (const id of ids) await waitForSendStatus(admin, inst.id, id, terminal, 60_000);
    const statuses = await Promise.all(ids.map(async (id) => (await admin.get(`/api/instances/${inst.id}/messages/${id}`)).body.status));
    assert.ok(statuses.every((s) => s !== 'failed'), 'nothing failed');
    // The supervisor restarts the process 200 ms after it died: a fast machine may have finished
    // the burst before the kill, so wait for the restart rather than assume it happened already.
    await eventually(async () => session.restarts >= 1, 10_000, 'the supervisor to start the session again');
    await waitForState(admin, inst.id, 'connected', 30_000);
  });

  it('lets idle processes sleep (no timer wakes them many times a second) and names their database connections', async () => {
    // An idle pod's wake-ups are what a fleet of them costs its nodes (and, on a VM, each costs
    // far more than the work it does). Counted as the event loop thread's voluntary context
    // switches (it blocks in epoll between wake-ups). prom-client's event-loop monitor woke the
    // gateway and the dispatcher ~100 times a second, the publish-expiry timer every process 10.
    const { inst, session: connected } = await pairedSession('Idle session', '5511900000032');
    await new Promise((r) => setTimeout(r, 2000)); // earlier receipts and webhooks settle
    const processes = { gateway: cluster.gateway, dispatcher: cluster.dispatchers[0], session: connected };
    const switches = (pid: number) => Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
    const before = Object.fromEntries(Object.entries(processes).map(([name, p]) => [name, switches(p.pid!)]));
    const seconds = 6;
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const perSecond = Object.fromEntries(Object.entries(processes).map(([name, p]) => [name, (switches(p.pid!) - before[name]) / seconds]));
    assert.ok(perSecond.gateway < 40 && perSecond.dispatcher < 40 && perSecond.session < 10, `wake-ups a second when idle: ${JSON.stringify(perSecond)}`);
    // Idle, each holds a connection or two; pg_stat_activity names whose they are.
    const db = knexFactory({ client: 'pg', connection: database.url, pool: { min: 0, max: 1 } });
    try {
      const { rows } = await db.raw('SELECT application_name AS name, count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1');
      const held = Object.fromEntries(rows.map((r: { name: string; n: number }) => [r.name, r.n]));
      assert.ok(held['switchboard-gateway'] >= 1 && held['switchboard-dispatcher'] >= 1, JSON.stringify(held));
      assert.ok(held[`switchboard-session ${inst.id}`] >= 2, `the owner lock's connection and the pool's: ${JSON.stringify(held)}`);
    } finally {
      await db.destroy();
    }
  });
});

describe('cluster mode: a gateway stopped during a rollout (SHUTDOWN_DELAY_MS)', function () {
  this.timeout(120_000);
  let cluster: Cluster;
  let database: Awaited<ReturnType<typeof createTestDatabase>>;

  before(async () => {
    database = await createTestDatabase();
    cluster = await startCluster({ databaseUrl: database.url, natsUrl: NATS_URL, namespace: testNamespace(), dispatchers: 0, env: { SHUTDOWN_DELAY_MS: '2000' } });
  });
  after(async () => {
    await cluster?.stop();
    await database?.drop();
  });

  it('fails readiness at SIGTERM but serves what still comes for the delay, each answer closing its connection, then exits cleanly', async () => {
    const admin = new ApiClient(cluster.url, cluster.adminKey);
    assert.equal((await admin.get('/ready')).status, 200);
    const signalled = performance.now();
    const exited = cluster.gateway.stop(); // SIGTERM, as Kubernetes sends it with the endpoint's removal
    const notReady = await eventually(async () => {
      const ready = await admin.get('/ready');
      return ready.status === 503 && ready.body;
    }, 1_500, 'readiness fails at once');
    assert.equal(notReady.code, 'not_ready');
    assert.match(notReady.detail, /stopping/);

    // A client (or a proxy) that has not heard yet is still served, on a new connection.
    const created = await rawRequest(cluster.url, 'POST', '/api/instances', cluster.adminKey, { name: 'created while draining' });
    assert.equal(created.status, 201, created.body);
    assert.equal(created.connection, 'close', 'its next request goes to another replica');
    assert.equal((await admin.get(`/api/instances/${JSON.parse(created.body).id}`)).status, 200);

    assert.equal(await exited, 0);
    assert.ok(performance.now() - signalled >= 1_900, 'it served for the whole delay');
    await assert.rejects(fetch(`${cluster.url}/health`), 'the port is closed once it has stopped');
  });
});

describe('cluster mode: two gateway replicas share one rate limit', function () {
  this.timeout(120_000);
  let cluster: Cluster;
  let second: ManagedProcess;
  let secondUrl: string;
  let database: Awaited<ReturnType<typeof createTestDatabase>>;

  before(async () => {
    database = await createTestDatabase();
    cluster = await startCluster({ databaseUrl: database.url, natsUrl: NATS_URL, namespace: testNamespace(), dispatchers: 0, env: { RATE_LIMIT_PER_MINUTE: '6' } });
    const port = await freePort();
    secondUrl = `http://127.0.0.1:${port}`;
    second = spawnManaged({ name: 'gateway-2', args: [await builtService('gateway')], env: { ...cluster.env, PORT: String(port), PUBLIC_BASE_URL: secondUrl } });
    await waitUntil('second gateway /health', async () => (await fetch(`${secondUrl}/health`).catch(() => undefined))?.ok);
  });
  after(async () => {
    await second?.stop();
    await cluster?.stop();
    await database?.drop();
  });

  it('lets a client through as many times in a minute as one replica would, whichever replica it reaches', async () => {
    const replicas = [cluster.url, secondUrl];
    const answers = [];
    for (let i = 0; i < 8; i++) {
      const res = await fetch(`${replicas[i % 2]}/api/instances`, { headers: { Authorization: `Bearer ${cluster.adminKey}` } });
      answers.push({ status: res.status, remaining: res.headers.get('ratelimit-remaining'), retryAfter: res.headers.get('retry-after') });
    }
    assert.deepEqual(answers.map((a) => a.status), [200, 200, 200, 200, 200, 200, 429, 429]);
    assert.deepEqual(answers.map((a) => a.remaining), ['5', '4', '3', '2', '1', '0', '0', '0']);
    for (const refused of answers.slice(6)) assert.ok(Number(refused.retryAfter) >= 1 && Number(refused.retryAfter) <= 61, `Retry-After ${refused.retryAfter}`);
    assert.equal((await fetch(`${replicas[1]}/health`)).status, 200, 'probes stay exempt');
  });
});

/** One request on its own connection (node:http, which shows the Connection header fetch hides). */
function rawRequest(base: string, method: string, path: string, key: string, body: unknown): Promise<{ status: number; connection: string | undefined; body: string }> {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(new URL(path, base), { method, agent: false, headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) } }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString('utf8')));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body: text }));
    });
    req.on('error', reject);
    req.end(payload);
  });
}
