// Observability end to end, embedded mode (one process: gateway, session runtime, dispatcher):
// - one trace from the send request to its message.sent / message.status webhook attempts;
// - /metrics counters move as sends and deliveries happen;
// - no secret used in the scenario appears in any log line.
// Spans go to an in-memory exporter; logs to a buffer at debug level.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { createLogger, loadConfig, SpanStatusCode, startTelemetry, type Telemetry } from '@switchboard/core';
import { startEmbeddedServer, type EmbeddedServer } from '@switchboard/server/embedded';
import { createTestDatabase } from '../support/services.ts';
import { freePort } from '../support/server.ts';
import { ApiClient, eventually } from '../support/http.ts';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver.ts';
import { SpanSet, assertOneTrace, connectedInstance, sendAndDeliver, type SpanRecord } from './observability-support.ts';
import { sample } from '../support/prometheus.ts';

function toRecord(span: ReadableSpan): SpanRecord {
  return {
    traceId: span.spanContext().traceId,
    spanId: span.spanContext().spanId,
    parentSpanId: span.parentSpanContext?.spanId,
    name: span.name,
    kind: span.kind,
    service: String(span.resource.attributes['service.name']),
    attributes: span.attributes,
  };
}

describe('observability (embedded)', function () {
  this.timeout(60_000);
  const exporter = new InMemorySpanExporter();
  const logStream = new PassThrough();
  const logLines: string[] = [];
  let telemetry: Telemetry;
  let receiver: HttpsReceiver;
  let server: EmbeddedServer;
  let database: { url: string; drop(): Promise<void> };
  let dataDir: string;
  let admin: ApiClient;

  before(async () => {
    let partial = '';
    logStream.on('data', (chunk: Buffer) => {
      const lines = (partial + chunk.toString('utf8')).split('\n');
      partial = lines.pop() ?? '';
      logLines.push(...lines.filter(Boolean));
    });
    telemetry = await startTelemetry({ serviceName: 'switchboard', spanExporter: exporter, autoInstrument: true });
    receiver = await startHttpsReceiver();
    database = await createTestDatabase();
    dataDir = mkdtempSync(join(tmpdir(), 'sb-observability-'));
    const config = loadConfig({
      PORT: String(await freePort()),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      DATABASE_URL: database.url,
      NETWORK_DRIVER: 'sandbox',
      SANDBOX_RECEIPT_DELAY_MS: '10',
      WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
      WEBHOOK_RETRY_SCHEDULE: '0,50,50,50,50,50,50,50',
      RATE_LIMIT_PER_MINUTE: '100000',
    });
    server = await startEmbeddedServer(config, { log: createLogger({ level: 'debug', name: 'switchboard', destination: logStream }) });
    admin = new ApiClient(server.url, server.adminKey);
  });

  after(async () => {
    await server?.stop();
    await receiver?.close();
    await telemetry?.shutdown();
    await database?.drop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('links the send request to its webhook deliveries in one trace', async () => {
    const instance = await connectedInstance(admin, receiver, 'trace-embedded');
    const { messageId, deliveries } = await sendAndDeliver(server.url, receiver, instance);
    const spans = () => new SpanSet(exporter.getFinishedSpans().map(toRecord));
    // An attempt span ends just after the receiver answered.
    const attemptIds = deliveries.map((d) => d.headers.traceparent?.split('-')[2]);
    await eventually(async () => attemptIds.every((id) => spans().spans.some((s) => s.spanId === id)), 5000, 'webhook attempt spans');
    // Other spans of the trace (a consumer's, say) may end a moment after the attempts: wait for
    // the whole trace, or fail with what is missing.
    await eventually(async () => (assertOneTrace(spans(), deliveries, messageId, 'POST /api/instances/:id/messages'), true), 5000, 'the whole trace');
    // Auto-instrumentation: PostgreSQL queries and undici requests (the webhook POSTs) are spans too.
    const all = spans().spans;
    assert.ok(all.some((s) => s.attributes['db.system'] === 'postgresql' || s.attributes['db.system.name'] === 'postgresql'), 'pg spans');
  });

  it("keeps a session's own work out of the trace of the request that started it", async () => {
    const instance = await connectedInstance(admin, receiver, 'session-trace');
    await new Promise((r) => setTimeout(r, 2300)); // a connected session re-reads its settings every 2 s
    const requestSpan = (method: string, path: string) =>
      exporter.getFinishedSpans().find((s) => s.kind === 1 /* SERVER */ && s.attributes['http.request.method'] === method && s.attributes['url.path'] === path);
    // The session's periodic statements: its settings poll and its owner lock's probe. (Events a
    // request causes do continue its trace after its answer, with statements of their own.)
    const periodic = (s: ReadableSpan) => /^(select "settings" from "instances" where "id" = \$1 limit \$2|SELECT 1)$/.test(String(s.attributes['db.statement'] ?? ''));
    assert.ok(exporter.getFinishedSpans().some(periodic), 'the session polled meanwhile');
    // (A scan is the session's own business: the connection it completes reloads the settings once.)
    for (const path of [`/api/instances`, `/api/instances/${instance.instanceId}/connect`]) {
      const request = requestSpan('POST', path);
      assert.ok(request, `the span of POST ${path}`);
      const joined = exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === request.spanContext().traceId && periodic(s));
      assert.deepEqual(joined.map((s) => s.attributes['db.statement']), [], `periodic statements in POST ${path}'s trace`);
    }
  });

  it('names no phone number in the status of a failed network send', async () => {
    const instance = await connectedInstance(admin, receiver, 'failed-send-trace');
    const sent = await new ApiClient(server.url, instance.apiToken).post(`/api/instances/${instance.instanceId}/messages`, { phone: '5511977770004', type: 'text', text: 'nobody' });
    assert.equal(sent.status, 202, sent.text);
    const failed = await eventually(async () => exporter.getFinishedSpans().find((s) => s.name === 'network send' && s.status.code === SpanStatusCode.ERROR), 10_000, 'the failed network send span');
    assert.match(failed.status.message ?? '', /\[number\] is not on the network/);
    assert.doesNotMatch(JSON.stringify({ status: failed.status, events: failed.events }), /5511977770004/);
  });

  it('moves the /metrics counters as sends and deliveries happen', async () => {
    const instance = await connectedInstance(admin, receiver, 'metrics-embedded');
    const scrape = async () => {
      const res = await fetch(`${server.url}/metrics`);
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type') ?? '', /^text\/plain/);
      return res.text();
    };
    const route = { method: 'POST', route: '/api/instances/:id/messages', status: '202' };
    const before = await scrape();
    await sendAndDeliver(server.url, receiver, instance);
    await sendAndDeliver(server.url, receiver, instance);
    // The delivery counters are recorded just after the receiver answered.
    const after = await eventually(async () => {
      const text = await scrape();
      return (sample(text, 'switchboard_webhook_attempts_total', { outcome: 'delivered' }) ?? 0) >= (sample(before, 'switchboard_webhook_attempts_total', { outcome: 'delivered' }) ?? 0) + 4 && text;
    }, 5000, 'delivered attempts counted');
    assert.equal((sample(after, 'switchboard_http_requests_total', route) ?? 0) - (sample(before, 'switchboard_http_requests_total', route) ?? 0), 2);
    assert.ok((sample(after, 'switchboard_http_request_duration_seconds_count', route) ?? 0) >= 2);
    assert.equal(sample(after, 'switchboard_webhook_urls_above_base_concurrency'), 0, 'the dispatcher reports its earned concurrency (none: no backlog here)');
    // Gauges read from the database may be up to a second old.
    const fresh = await eventually(async () => {
      const text = await scrape();
      const delivered = sample(text, 'switchboard_webhook_deliveries', { status: 'delivered' }) ?? 0;
      const read = sample(text, 'switchboard_send_items', { status: 'read', instance_state: 'connected' }) ?? 0;
      return delivered >= 4 && read >= 2 && text;
    }, 5000, 'deliveries and send-item gauges');
    assert.equal(sample(fresh, 'switchboard_send_queue_depth', { instance_state: 'connected' }), 0);
    assert.ok((sample(fresh, 'switchboard_sessions', { state: 'connected' }) ?? 0) >= 1);
    assert.equal(sample(fresh, 'switchboard_bus_consumer_lag', { stream: 'commands' }), 0);
    assert.ok(sample(after, 'switchboard_webhook_attempt_duration_seconds_count', { outcome: 'delivered' })! >= 4);
    // No per-message label anywhere.
    assert.ok(!after.includes('msg_'), 'no message id in any label');
  });

  it('counts failed attempts and exhausted deliveries', async () => {
    const instance = await connectedInstance(admin, receiver, 'exhaust-embedded');
    const before = await (await fetch(`${server.url}/metrics`)).text();
    receiver.respondWith(() => ({ status: 500 }));
    try {
      const test = await admin.post(`/api/instances/${instance.instanceId}/webhook/test`);
      assert.equal(test.status, 200, test.text);
      const after = await eventually(async () => {
        const text = await (await fetch(`${server.url}/metrics`)).text();
        const exhausted = (sample(text, 'switchboard_webhook_exhausted_total') ?? 0) > (sample(before, 'switchboard_webhook_exhausted_total') ?? 0);
        return exhausted && (sample(text, 'switchboard_webhook_deliveries', { status: 'exhausted' }) ?? 0) >= 1 && text;
      }, 15_000, 'an exhausted delivery');
      assert.ok((sample(after, 'switchboard_webhook_attempts_total', { outcome: 'failed' }) ?? 0) - (sample(before, 'switchboard_webhook_attempts_total', { outcome: 'failed' }) ?? 0) >= 8);
      // Seven routine failures at info, and the exhaustion an operator acts on at warn.
      const eventId = test.body.id;
      const attempts = await eventually(async () => {
        const lines = logLines.map((l) => JSON.parse(l)).filter((l) => l.eventId === eventId && l.attempt);
        return lines.length === 8 && lines;
      }, 5000, 'the log lines of the 8 attempts');
      assert.deepEqual(attempts.map((l) => [l.attempt, l.level, l.exhausted]), [1, 2, 3, 4, 5, 6, 7, 8].map((n) => [n, n < 8 ? 30 : 40, n === 8]));
    } finally {
      receiver.respondWith(() => ({ status: 200 }));
    }
  });

  it('joins log lines to their spans: a request, a failed webhook attempt; a 5xx fails its request span', async () => {
    const instance = await connectedInstance(admin, receiver, 'joined-embedded');
    const lineOf = async (pred: (l: Record<string, any>) => boolean) => logLines.map((l) => JSON.parse(l)).find(pred);
    const spanOf = async (pred: (s: ReadableSpan) => boolean) => exporter.getFinishedSpans().find(pred);

    const read = await admin.get(`/api/instances/${instance.instanceId}`);
    const requestId = read.headers.get('x-request-id');
    const requestSpan = await eventually(() => spanOf((s) => s.attributes['switchboard.request_id'] === requestId), 5000, 'the request span');
    const requestLine = await eventually(() => lineOf((l) => l.msg === 'request' && l.requestId === requestId), 5000, 'the request line');
    assert.deepEqual([requestLine.trace_id, requestLine.span_id], [requestSpan.spanContext().traceId, requestSpan.spanContext().spanId]);

    // A failed attempt is logged in its own span's trace, whatever started its claim.
    receiver.respondWith(() => ({ status: 500 }));
    try {
      const test = await admin.post(`/api/instances/${instance.instanceId}/webhook/test`);
      const eventId = test.body.id;
      const failedLine = await eventually(() => lineOf((l) => l.msg === 'webhook attempt failed' && l.eventId === eventId && l.attempt === 2), 10_000, 'the second failed attempt');
      const attemptSpan = (await spanOf((s) => s.name === 'webhook attempt' && s.attributes['switchboard.event.id'] === eventId && s.attributes['switchboard.webhook.attempt'] === 2))!;
      assert.deepEqual([failedLine.trace_id, failedLine.span_id], [attemptSpan.spanContext().traceId, attemptSpan.spanContext().spanId]);
      assert.equal(attemptSpan.attributes['switchboard.webhook.concurrency'], 4, 'the URL\'s attempts at once: its base, as it earned none');
    } finally {
      receiver.respondWith(() => ({ status: 200 }));
    }

    // A fault of ours (a table gone) answers 500, and the request's span says it failed.
    const db = server.platform.db;
    await db.raw('ALTER TABLE app_keys RENAME TO app_keys_away');
    try {
      const failed = await admin.get(`/api/instances/${instance.instanceId}/apps`);
      assert.equal(failed.status, 500);
      const failedId = failed.headers.get('x-request-id');
      const span = await eventually(() => spanOf((s) => s.attributes['switchboard.request_id'] === failedId), 5000, 'the failed request span');
      assert.equal(span.status.code, SpanStatusCode.ERROR);
    } finally {
      await db.raw('ALTER TABLE app_keys_away RENAME TO app_keys');
    }
  });

  it('shows the query values of outgoing requests as REDACTED (WhatsApp media links carry access tokens there)', async () => {
    const cdnPath = '/v/t62.7118-24/1_2_n.enc?ccb=11-4&oh=01_MEDIA_ACCESS_SECRET&oe=68000000';
    const uploadPath = '/mms/image/abc?auth=MEDIA_UPLOAD_SECRET&token=abc&BARE_SECRET';
    const cdn = await startHttpsReceiver(); // not the webhook receiver: its requests are events
    try {
      assert.equal((await fetch(cdn.url(cdnPath))).status, 200); // undici, as media downloads
      // node:https, as Baileys' uploads; through require, which the instrumentation patches even
      // when an earlier test loaded the module.
      const https = createRequire(import.meta.url)('node:https') as typeof import('node:https');
      await new Promise<void>((resolve, reject) => {
        const req = https.request({ host: '127.0.0.1', port: cdn.port, path: uploadPath, method: 'POST' }, (res) => res.resume().on('end', resolve));
        req.once('error', reject).end('x');
      });
    } finally {
      await cdn.close();
    }
    const outgoing = await eventually(async () => {
      const spans = exporter.getFinishedSpans().filter((s) => /1_2_n\.enc|mms\/image\/abc/.test(JSON.stringify(s.attributes)));
      return spans.length >= 2 && spans;
    }, 5000, 'the spans of both requests');
    const text = JSON.stringify(exporter.getFinishedSpans().map((s) => s.attributes));
    for (const secret of ['01_MEDIA_ACCESS_SECRET', 'MEDIA_UPLOAD_SECRET', 'BARE_SECRET', '68000000']) assert.ok(!text.includes(secret), `${secret} in a span`);
    const urls = outgoing.map((s) => String(s.attributes['url.full'] ?? s.attributes['http.url']));
    assert.ok(urls.some((u) => u.endsWith('/v/t62.7118-24/1_2_n.enc?ccb=REDACTED&oh=REDACTED&oe=REDACTED')), urls.join(' '));
    assert.ok(urls.some((u) => u.endsWith('/mms/image/abc?auth=REDACTED&token=REDACTED&REDACTED')), urls.join(' '));
  });

  it('never writes a secret used in the scenario to the logs, the spans or an error body', async () => {
    const instance = await connectedInstance(admin, receiver, 'secrets-embedded');
    const app = await admin.post(`/api/instances/${instance.instanceId}/apps`, { name: 'backend' });
    assert.equal(app.status, 201, app.text);
    const appKey: string = app.body.key;
    const viaKey = new ApiClient(server.url, appKey);
    assert.equal((await viaKey.get(`/api/instances/${instance.instanceId}/messages`)).status, 200);
    const { deliveries } = await sendAndDeliver(server.url, receiver, instance);
    // A pairing code, on an instance waiting for pairing.
    const pairing = await admin.post('/api/instances', { name: 'pairing' });
    await admin.post(`/api/instances/${pairing.body.id}/connect`);
    await eventually(async () => (await admin.get(`/api/instances/${pairing.body.id}`)).body.state === 'awaiting_scan', 15_000, 'awaiting_scan');
    const code = await admin.post(`/api/instances/${pairing.body.id}/pairing-code`, { phone: '5511977776666' });
    assert.equal(code.status, 200, code.text);
    // An inbound image: its event carries a signed media link.
    const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');
    const inbound = await admin.post(`/sandbox/instances/${instance.instanceId}/inbound`, { from: '5511955554444', type: 'image', mediaBase64: png.toString('base64'), mimetype: 'image/png' });
    assert.equal(inbound.status, 200, inbound.text);
    const mediaUrl = await eventually(async () => {
      const events = await admin.get(`/api/instances/${instance.instanceId}/events`);
      return events.body.data?.find((e: any) => e.type === 'message.received' && e.data?.media?.url)?.data.media.url as string | undefined;
    }, 15_000, 'inbound media event');
    const signature = new URL(mediaUrl).searchParams.get('signature')!;
    assert.equal((await fetch(mediaUrl)).status, 200);
    // Renewing the token and regenerating the webhook secret return new secrets in their answers.
    const renewed = await admin.post(`/api/instances/${instance.instanceId}/token`);
    assert.equal(renewed.status, 200, renewed.text);
    const regenerated = await admin.post(`/api/instances/${instance.instanceId}/webhook/secret`);
    assert.equal(regenerated.status, 200, regenerated.text);
    assert.equal((await new ApiClient(server.url, renewed.body.apiToken).get(`/api/instances/${instance.instanceId}/messages`)).status, 200);
    // Requests that fail also log; a wrong token must not be echoed either.
    const wrongToken = `${instance.apiToken.slice(0, -4)}zzzz`;
    assert.equal((await new ApiClient(server.url, wrongToken).get(`/api/instances/${instance.instanceId}/messages`)).status, 401);
    // Credentials put where they do not belong (a path) are not repeated by spans or error bodies.
    const encoded = `/api/instances/${instance.apiToken.replace('_', '%5F')}`; // sbi%5F…
    for (const misplaced of [`/api/instances/${instance.apiToken}`, encoded, `/api/instances/msg_${instance.apiToken}`, `/api/${server.adminKey}`, `/api/instances/${instance.instanceId}/messages/${appKey}`]) {
      const res = await admin.get(misplaced);
      assert.equal(res.status, 404, misplaced);
      assert.match(res.body.detail, /^(The instance|The message|No route answers GET on this path)/, 'the detail names the kind of thing, never the id or path');
      for (const secret of [instance.apiToken, server.adminKey, appKey]) assert.ok(!res.text.includes(secret), `${misplaced}: a credential in the error body`);
    }
    // The server's spans: the test's own requests to it are traced in this process too. Read once
    // the span of the last request above has ended.
    const toGateway = (url: unknown) => typeof url === 'string' && new URL(url).port === new URL(server.url).port;
    const serverSpans = await eventually(async () => {
      const spans = exporter.getFinishedSpans().filter((s) => !toGateway(s.attributes['url.full']));
      return spans.some((s) => String(s.attributes['url.path']).endsWith('/messages/sbk_[redacted]')) && spans;
    }, 5000, 'the span of the last misplaced credential');
    await new Promise((r) => setTimeout(r, 100)); // let the last log lines flush
    const spanText = JSON.stringify(serverSpans.map((s) => ({ name: s.name, attributes: s.attributes, events: s.events })));

    const secrets: Record<string, string> = {
      'admin key': server.adminKey,
      'instance token': instance.apiToken,
      'wrong token': wrongToken,
      'integration key': appKey,
      'webhook secret': instance.webhookSecret,
      'renewed instance token': renewed.body.apiToken,
      'regenerated webhook secret': regenerated.body.secret,
      'encryption key': readFileSync(join(dataDir, 'encryption-key'), 'utf8').trim(),
      'pairing code': code.body.code,
      'media link signature': signature,
      'webhook signature': deliveries[0].headers['x-service-signature'].replace(/^sha256=/, ''),
    };
    assert.ok(logLines.length > 20, `expected a real log (got ${logLines.length} lines)`);
    for (const line of logLines) JSON.parse(line); // every line is JSON
    assert.ok(logLines.some((l) => /"requestId":"[^"]+"/.test(l)), 'request ids are logged');
    assert.ok(logLines.some((l) => /"trace_id":"[0-9a-f]{32}","span_id":"[0-9a-f]{16}"/.test(l)), 'lines inside spans carry trace_id/span_id');
    for (const [what, secret] of Object.entries(secrets)) {
      assert.ok(secret && secret.length >= 6, `${what} is known`);
      const leaking = logLines.filter((l) => l.includes(secret));
      assert.deepEqual(leaking, [], `${what} appears in the logs`);
      assert.ok(!spanText.includes(secret), `${what} appears in a span`);
    }
    // The percent-encoded token: its part after the prefix must not travel either.
    assert.ok(!spanText.includes(instance.apiToken.slice(4)), 'the percent-encoded instance token appears in a span');
  });
});
