// Helpers of the observability end-to-end tests: a sandbox scenario driven through the public API
// (instance connected by a sandbox scan, webhook on a real HTTPS receiver, one text send), span
// lookup by name/parent, and Prometheus text parsing.
import assert from 'node:assert/strict';
import { ApiClient, eventually } from '../support/http.ts';
import type { HttpsReceiver, ReceivedRequest } from '../support/https-receiver.ts';
import type { SpanRecord } from '../support/otlp-collector.ts';

export type { SpanRecord };

export interface ScenarioResult {
  instanceId: string;
  apiToken: string;
  webhookSecret: string;
  messageId: string;
  /** The webhook requests of the send: message.sent and the message.status ones. */
  deliveries: ReceivedRequest[];
}

/** Creates and connects an instance, points its webhook at the receiver. */
export async function connectedInstance(admin: ApiClient, receiver: HttpsReceiver, name: string): Promise<{ instanceId: string; apiToken: string; webhookSecret: string }> {
  const created = await admin.post('/api/instances', { name });
  assert.equal(created.status, 201, created.text);
  const instanceId: string = created.body.id;
  const connect = await admin.post(`/api/instances/${instanceId}/connect`);
  assert.equal(connect.status, 200, connect.text);
  await eventually(async () => (await admin.get(`/api/instances/${instanceId}`)).body.state === 'awaiting_scan', 15_000, 'awaiting_scan');
  const scan = await admin.post(`/sandbox/instances/${instanceId}/scan`, { phone: '5511988887777' });
  assert.equal(scan.status, 200, scan.text);
  await eventually(async () => (await admin.get(`/api/instances/${instanceId}`)).body.state === 'connected', 15_000, 'connected');
  const hook = await admin.put(`/api/instances/${instanceId}/webhook`, { url: receiver.url('/hook') });
  assert.equal(hook.status, 200, hook.text);
  return { instanceId, apiToken: created.body.apiToken, webhookSecret: hook.body.secret };
}

/** Sends one text and waits for its message.sent and message.status (read) webhooks. */
export async function sendAndDeliver(baseUrl: string, receiver: HttpsReceiver, instance: { instanceId: string; apiToken: string }): Promise<{ messageId: string; deliveries: ReceivedRequest[] }> {
  const client = new ApiClient(baseUrl, instance.apiToken);
  const sent = await client.post(`/api/instances/${instance.instanceId}/messages`, { phone: '5511999991234', type: 'text', text: 'hello trace' });
  assert.equal(sent.status, 202, sent.text);
  const messageId: string = sent.body.id;
  const ofThisMessage = (r: ReceivedRequest) => {
    const body = JSON.parse(r.rawBody.toString('utf8'));
    return body.data?.messageId === messageId && (body.type === 'message.sent' || (body.type === 'message.status' && body.data.status === 'read'));
  };
  const deliveries = await receiver.waitForRequests(2, 20_000, ofThisMessage);
  return { messageId, deliveries };
}

export class SpanSet {
  constructor(readonly spans: SpanRecord[]) {}

  inTrace(traceId: string): SpanSet {
    return new SpanSet(this.spans.filter((s) => s.traceId === traceId));
  }

  named(name: string): SpanRecord[] {
    return this.spans.filter((s) => s.name === name);
  }

  one(name: string, where: (s: SpanRecord) => boolean = () => true): SpanRecord {
    const found = this.named(name).filter(where);
    assert.ok(found.length >= 1, `no span "${name}" (have: ${[...new Set(this.spans.map((s) => s.name))].join(', ')})`);
    return found[0];
  }

  parentOf(span: SpanRecord): SpanRecord | undefined {
    return this.spans.find((s) => s.spanId === span.parentSpanId);
  }

  childrenOf(span: SpanRecord, name?: string): SpanRecord[] {
    return this.spans.filter((s) => s.parentSpanId === span.spanId && (name === undefined || s.name === name));
  }

  /** Walks up from `span` and returns the names on the way (nearest first). */
  ancestry(span: SpanRecord): string[] {
    const names: string[] = [];
    for (let p = this.parentOf(span); p; p = this.parentOf(p)) names.push(p.name);
    return names;
  }
}

/** Asserts the chain HTTP → accept → relay → publish → consume → session send → network send →
 *  record event → relay → publish → consume → …, and one webhook attempt per delivery, each the
 *  parent of the request the receiver got. */
export function assertOneTrace(all: SpanSet, deliveries: ReceivedRequest[], messageId: string, httpSpanName: string): void {
  const accept = all.one('accept send', (s) => s.attributes['switchboard.message.id'] === messageId);
  const trace = all.inTrace(accept.traceId);
  const http = trace.parentOf(accept);
  assert.ok(http, 'accept send has a parent span');
  assert.equal(http.name, httpSpanName);
  assert.equal(http.kind, 1 /* SERVER */);
  // Its parent, if any, is the caller's client span (the test's fetch, instrumented through undici).
  const caller = trace.parentOf(http);
  assert.ok(http.parentSpanId === undefined || caller?.kind === 2 /* CLIENT */, 'the HTTP span is the root of the trace or continues its caller');

  const relay = trace.childrenOf(accept, 'outbox relay')[0];
  assert.ok(relay, 'the outbox relay continues the accept span');
  const publish = trace.childrenOf(relay, 'publish cmd')[0];
  assert.ok(publish, 'publish cmd under the relay');
  const consume = trace.childrenOf(publish, 'consume cmd')[0];
  assert.ok(consume, 'consume cmd continues the publish span (traceparent header)');
  const sessionSend = trace.childrenOf(consume, 'session send')[0];
  assert.ok(sessionSend, 'session send under consume cmd');
  assert.ok(trace.childrenOf(sessionSend, 'network send')[0], 'network send under session send');
  const recordSent = trace.childrenOf(sessionSend, 'record event').find((s) => s.attributes['switchboard.event.type'] === 'message.sent');
  assert.ok(recordSent, 'message.sent recorded under session send');
  const publishSent = trace.named('publish evt.message.sent').find((p) => trace.parentOf(p)?.name === 'outbox relay' && trace.parentOf(trace.parentOf(p)!) === recordSent);
  assert.ok(publishSent, 'message.sent published through the relay, in the trace');
  assert.ok(trace.childrenOf(publishSent, 'consume evt.message.sent')[0], 'the dispatcher consumed message.sent in the trace');

  const receipts = trace.named('session receipt');
  assert.ok(receipts.length >= 1, 'receipts are in the trace');

  for (const request of deliveries) {
    const traceparent = request.headers.traceparent;
    assert.match(traceparent ?? '', /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/, 'the webhook carries a traceparent');
    const [, traceId, spanId] = traceparent.split('-');
    assert.equal(traceId, accept.traceId, 'the webhook belongs to the send trace');
    const attempt = trace.spans.find((s) => s.spanId === spanId);
    assert.ok(attempt, 'the webhook traceparent names an exported span');
    assert.equal(attempt.name, 'webhook attempt');
    assert.equal(trace.parentOf(attempt)?.name, 'record event', 'a webhook attempt continues the recorded event');
    assert.ok(trace.ancestry(attempt).includes(httpSpanName), 'the attempt descends from the HTTP request');
  }
}

