// Observability end to end in cluster mode: gateway, session and dispatcher run as separate
// processes (as built: node dist/<process>.mjs) on PostgreSQL and NATS JetStream, exporting their spans
// with OTLP/HTTP (JSON) to a collector in this test. One send must give one trace across the three
// processes, parent links carried by NATS headers and the stored trace contexts.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { NATS_URL, createTestDatabase, testNamespace } from '../support/services.ts';
import type { ServiceName } from '../../scripts/build.ts';
import { builtService } from '../support/built.ts';
import { freePort } from '../support/server.ts';
import { ApiClient, eventually } from '../support/http.ts';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver.ts';
import { startOtlpCollector, type OtlpCollector } from '../support/otlp-collector.ts';
import { SpanSet, assertOneTrace, sendAndDeliver } from './observability-support.ts';

const ROOT = join(import.meta.dirname, '..', '..');

async function startProcess(name: ServiceName, env: Record<string, string>, output: string[]): Promise<ChildProcess> {
  const child = spawn(process.execPath, [await builtService(name)], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const keep = (chunk: Buffer) => output.push(...chunk.toString('utf8').split('\n').filter(Boolean).map((l) => `[${name}] ${l}`));
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  return child;
}

async function stopProcess(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

describe('observability (cluster mode: three processes, NATS headers)', function () {
  this.timeout(90_000);
  const namespace = testNamespace();
  const output: string[] = [];
  const children: ChildProcess[] = [];
  let collector: OtlpCollector;
  let receiver: HttpsReceiver;
  let database: { url: string; drop(): Promise<void> };
  let dataDir: string;
  let env: Record<string, string>;
  let gatewayUrl: string;
  let admin: ApiClient;
  let dispatcherHealthPort: number;

  before(async () => {
    collector = await startOtlpCollector();
    receiver = await startHttpsReceiver();
    database = await createTestDatabase();
    dataDir = mkdtempSync(join(tmpdir(), 'sb-obs-cluster-'));
    const port = await freePort();
    gatewayUrl = `http://127.0.0.1:${port}`;
    env = {
      DATABASE_URL: database.url,
      NATS_URL,
      NATS_NAMESPACE: namespace,
      ADMIN_API_KEY: `sba_${randomBytes(24).toString('base64url')}`,
      ENCRYPTION_KEY: randomBytes(32).toString('base64'),
      NETWORK_DRIVER: 'sandbox',
      SANDBOX_RECEIPT_DELAY_MS: '10',
      WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
      PUBLIC_BASE_URL: gatewayUrl,
      DATA_DIR: dataDir,
      LOG_LEVEL: 'warn',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: collector.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '100',
      OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=obs-test',
      DISPATCHER_POLL_INTERVAL_MS: '100',
    };
    children.push(await startProcess('gateway', { ...env, PORT: String(port), HOST: '127.0.0.1' }, output));
    await eventually(async () => (await fetch(`${gatewayUrl}/health`)).ok, 30_000, 'gateway up');
    dispatcherHealthPort = await freePort();
    children.push(await startProcess('dispatcher', { ...env, HEALTH_PORT: String(dispatcherHealthPort) }, output));
    admin = new ApiClient(gatewayUrl, env.ADMIN_API_KEY);
  });

  after(async () => {
    await Promise.all(children.map(stopProcess));
    await receiver?.close();
    await collector?.close();
    await database?.drop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    const nc = await connect({ servers: NATS_URL });
    const jsm = await jetstreamManager(nc);
    for await (const name of jsm.streams.names()) if (name.startsWith(`${namespace.toUpperCase()}_`)) await jsm.streams.delete(name);
    await nc.close();
  });

  afterEach(function () {
    if (this.currentTest?.state === 'failed') console.log(output.slice(-60).join('\n'));
  });

  it('links the send request to its webhook deliveries across gateway, session and dispatcher', async () => {
    // The session process serves one existing instance: create it, then start its process.
    const created = await admin.post('/api/instances', { name: 'cluster-trace' });
    assert.equal(created.status, 201, created.text);
    children.push(await startProcess('session', { ...env, INSTANCE_ID: created.body.id }, output));
    await eventually(async () => (await admin.post(`/api/instances/${created.body.id}/connect`)).status === 200, 30_000, 'session process answering');
    await eventually(async () => (await admin.get(`/api/instances/${created.body.id}`)).body.state === 'awaiting_scan', 15_000, 'awaiting_scan');
    assert.equal((await admin.post(`/sandbox/instances/${created.body.id}/scan`, { phone: '5511988887777' })).status, 200);
    await eventually(async () => (await admin.get(`/api/instances/${created.body.id}`)).body.state === 'connected', 15_000, 'connected');
    const hook = await admin.put(`/api/instances/${created.body.id}/webhook`, { url: receiver.url('/hook') });
    assert.equal(hook.status, 200, hook.text);

    const { messageId, deliveries } = await sendAndDeliver(gatewayUrl, receiver, { instanceId: created.body.id, apiToken: created.body.apiToken });
    const attemptIds = deliveries.map((d) => d.headers.traceparent?.split('-')[2]);
    await eventually(async () => attemptIds.every((id) => collector.spans.some((s) => s.spanId === id)) && collector.spans.some((s) => s.name === 'session receipt'), 15_000, 'spans exported');
    // Batches still in flight may arrive later (a parent may be exported after its children, each
    // process on its own schedule): wait until the whole trace is there, or fail with what is missing.
    const spans = await eventually(async () => {
      const all = new SpanSet([...collector.spans]);
      assertOneTrace(all, deliveries, messageId, 'POST /api/instances/:id/messages');
      return all;
    }, 15_000, 'the whole trace exported');

    const trace = spans.inTrace(spans.one('accept send', (s) => s.attributes['switchboard.message.id'] === messageId).traceId);
    const servicesOf = (name: string) => new Set(trace.named(name).map((s) => s.service));
    assert.deepEqual([...servicesOf('accept send')], ['switchboard-gateway']);
    assert.deepEqual([...servicesOf('session send')], ['switchboard-session']);
    assert.deepEqual([...servicesOf('network send')], ['switchboard-session']);
    assert.deepEqual([...servicesOf('webhook attempt')], ['switchboard-dispatcher']);
    assert.ok(servicesOf('consume evt.message.sent').has('switchboard-dispatcher'));
    // The session's resource names its instance.
    const sessionSpan = trace.one('session send');
    assert.equal(sessionSpan.attributes['switchboard.instance_id'], created.body.id);
    assert.equal(sessionSpan.resource?.['switchboard.instance_id'], created.body.id);
    // Every process describes itself: release, SDK, host/process, and OTEL_RESOURCE_ATTRIBUTES.
    const { version } = JSON.parse(readFileSync(join(ROOT, 'services/core/package.json'), 'utf8'));
    for (const name of ['accept send', 'session send', 'webhook attempt']) {
      const resource = trace.one(name).resource ?? {};
      assert.equal(resource['service.version'], version, `${name}: service.version`);
      assert.equal(resource['telemetry.sdk.language'], 'nodejs', `${name}: telemetry.sdk.*`);
      assert.equal(resource['deployment.environment.name'], 'obs-test', `${name}: OTEL_RESOURCE_ATTRIBUTES`);
      assert.ok(resource['process.pid'], `${name}: process attributes`);
    }
  });

  it('serves /metrics from the gateway and the dispatcher health port', async () => {
    const text = await (await fetch(`${gatewayUrl}/metrics`)).text();
    assert.match(text, /switchboard_http_requests_total\{method="POST",route="\/api\/instances\/:id\/messages",status="202"\} 1/);
    assert.match(text, /switchboard_sessions\{state="connected"\} 1/);
    // Webhook attempts happen in the dispatcher process: its own registry, on its health port.
    const dispatcher = await (await fetch(`http://127.0.0.1:${dispatcherHealthPort}/metrics`)).text();
    assert.match(dispatcher, /switchboard_webhook_attempts_total\{outcome="delivered"\} [1-9]/);
    assert.match(dispatcher, /switchboard_bus_consumer_lag\{stream="events"\} 0/);
  });
});
