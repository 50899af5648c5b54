// Trace propagation in core: our spans, the traceparent carried through bus headers (in-process
// bus and real NATS JetStream), the outbox relay's span, and event recording storing the
// traceparent its webhook attempts will continue. Spans go to an in-memory exporter.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { SpanKind as OtelKind } from '@opentelemetry/api';
import { createLogger } from '../src/logger.ts';
import { ConfigError } from '../src/config.ts';
import { JetStreamBus, MemoryBus } from '../src/bus/index.ts';
import type { Bus, BusMessage } from '../src/bus/types.ts';
import { OutboxRelay, enqueueOutbox } from '../src/outbox.ts';
import { recordEvent } from '../src/events.ts';
import type { Db } from '../src/db/connect.ts';
import { inSpan, injectTraceparent, startTelemetry, withParent, type Telemetry } from '../src/telemetry/index.ts';
import { NATS_URL, openTestDatabase, testNamespace } from '../../../test/support/services.ts';

const log = createLogger({ level: 'silent' });
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/;

function parentOf(span: ReadableSpan): string | undefined {
  return span.parentSpanContext?.spanId;
}

function waitFor<T>(get: () => T | undefined, timeoutMs = 5000): Promise<T> {
  const until = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const poll = () => {
      const value = get();
      if (value !== undefined) return resolve(value);
      if (Date.now() > until) return reject(new Error('timed out'));
      setTimeout(poll, 10);
    };
    poll();
  });
}

describe('telemetry', () => {
  const exporter = new InMemorySpanExporter();
  let telemetry: Telemetry;
  before(async () => {
    telemetry = await startTelemetry({ serviceName: 'core-test', spanExporter: exporter, autoInstrument: false });
  });
  after(() => telemetry.shutdown());
  beforeEach(() => exporter.reset());

  const spansNamed = (name: string) => exporter.getFinishedSpans().filter((s) => s.name === name);

  it('is off without an OTLP endpoint', async () => {
    const off = await startTelemetry({ serviceName: 'x', env: {} });
    assert.equal(off.enabled, false);
    const disabled = await startTelemetry({ serviceName: 'x', env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1', OTEL_SDK_DISABLED: 'true' } });
    assert.equal(disabled.enabled, false);
  });

  it('refuses OTEL_* values the SDK would drop without a word (tracing silently off)', async () => {
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' };
    for (const [name, value] of [
      ['OTEL_EXPORTER_OTLP_ENDPOINT', 'notaurl'],
      ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'collector:4318'],
      ['OTEL_EXPORTER_OTLP_PROTOCOL', 'http/xml'],
      ['OTEL_TRACES_EXPORTER', 'otlp,zipkinish'],
      ['OTEL_TRACES_SAMPLER', 'sometimes'],
    ]) {
      await assert.rejects(startTelemetry({ serviceName: 'x', env: { ...endpoint, [name]: value } }), (err: unknown) => err instanceof ConfigError && err.problems.length === 1 && err.problems[0].startsWith(`${name}: `), `${name}=${value}`);
    }
  });

  it('describes the process in its resource: service, version, SDK, host and process', async () => {
    await inSpan('resource probe', {}, async () => undefined);
    const attributes = (await waitFor(() => spansNamed('resource probe')[0])).resource.attributes;
    const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    assert.equal(attributes['service.name'], 'core-test');
    assert.equal(attributes['service.version'], version);
    assert.equal(attributes['telemetry.sdk.language'], 'nodejs');
    assert.equal(attributes['telemetry.sdk.name'], 'opentelemetry');
    assert.ok(attributes['host.name'], 'host attributes');
    assert.equal(attributes['process.pid'], process.pid);
  });

  it('injects the current span as traceparent and continues a stored one', async () => {
    assert.equal(injectTraceparent(), undefined);
    let outer = '';
    await inSpan('outer', {}, async () => {
      outer = injectTraceparent()!;
    });
    assert.match(outer, TRACEPARENT);
    await withParent(outer, () => inSpan('later', {}, async () => undefined));
    const later = await waitFor(() => spansNamed('later')[0]);
    const [, traceId, spanId] = TRACEPARENT.exec(outer)!;
    assert.equal(later.spanContext().traceId, traceId);
    assert.equal(parentOf(later), spanId);
    // A malformed stored value starts a fresh trace instead of failing.
    await withParent('garbage', () => inSpan('fresh', {}, async () => undefined));
    assert.equal(parentOf(await waitFor(() => spansNamed('fresh')[0])), undefined);
  });

  it('records a failed span and rethrows', async () => {
    await assert.rejects(inSpan('boom', {}, async () => { throw new Error('nope'); }), /nope/);
    assert.equal((await waitFor(() => spansNamed('boom')[0])).status.code, 2);
  });

  async function checkBusPropagation(bus: Bus, durable: string): Promise<void> {
    const received: BusMessage[] = [];
    const sub = await bus.consume({ stream: 'events', filter: 'evt.inst-trace.>', durable }, async (msg) => {
      await inSpan('handler work', {}, async () => undefined);
      received.push(msg);
    });
    try {
      await inSpan('origin', {}, () => bus.publish('evt.inst-trace.message.sent', new TextEncoder().encode('{}'), { msgId: `m-${durable}`, headers: { 'x-other': 'kept' } }));
      const msg = await waitFor(() => received[0]);
      assert.equal(msg.headers['x-other'], 'kept');
      assert.match(msg.headers.traceparent, TRACEPARENT);
      const [origin] = spansNamed('origin');
      const [publish] = spansNamed('publish evt.message.sent');
      const consume = await waitFor(() => spansNamed('consume evt.message.sent')[0]);
      const work = await waitFor(() => spansNamed('handler work')[0]);
      assert.equal(publish.kind, OtelKind.PRODUCER);
      assert.equal(consume.kind, OtelKind.CONSUMER);
      assert.equal(parentOf(publish), origin.spanContext().spanId);
      assert.equal(parentOf(consume), publish.spanContext().spanId, 'consumer span continues the producer span from the header');
      assert.equal(parentOf(work), consume.spanContext().spanId);
      assert.equal(new Set([origin, publish, consume, work].map((s) => s.spanContext().traceId)).size, 1);
      assert.equal(consume.attributes['messaging.consumer.group.name'], durable);
    } finally {
      await sub.stop();
    }
  }

  it('carries traceparent through the in-process bus', async () => {
    const bus = new MemoryBus({ log });
    try {
      await checkBusPropagation(bus, 'trace-mem');
    } finally {
      await bus.close();
    }
  });

  describe('on NATS JetStream', () => {
    const namespace = testNamespace();
    let bus: JetStreamBus;
    before(async () => {
      bus = await JetStreamBus.open({ natsUrl: NATS_URL, namespace, log });
    });
    after(async () => {
      await bus.close();
      const nc = await connect({ servers: NATS_URL });
      const jsm = await jetstreamManager(nc);
      for await (const name of jsm.streams.names()) if (name.startsWith(`${namespace.toUpperCase()}_`)) await jsm.streams.delete(name);
      await nc.close();
    });

    it('carries traceparent in NATS headers (no Nats- prefix)', () => checkBusPropagation(bus, 'trace-js'));

    it("continues a request's trace in the process that serves it (its callback runs in no caller's context)", async () => {
      const sub = await bus.serve('rpc.inst-trace.op', async () => {
        await inSpan('handler work', {}, async () => undefined);
        return new Uint8Array();
      });
      try {
        await inSpan('caller', {}, () => bus.request('rpc.inst-trace.op', new Uint8Array(), 5000));
        const [caller] = spansNamed('caller');
        const serve = await waitFor(() => spansNamed('serve rpc.op')[0]);
        const work = await waitFor(() => spansNamed('handler work')[0]);
        assert.equal(serve.kind, OtelKind.SERVER);
        assert.equal(parentOf(serve), caller.spanContext().spanId);
        assert.equal(parentOf(work), serve.spanContext().spanId);
        assert.equal(work.spanContext().traceId, caller.spanContext().traceId);
      } finally {
        await sub.stop();
      }
    });

    it('rejects a reserved Nats- header rather than sending it', async () => {
      await assert.rejects(bus.publish('evt.inst-trace.x', new Uint8Array(), { headers: { 'Nats-Trace': '1' } }), /reserved/);
    });
  });

  describe('outbox relay and event recording', () => {
    let database: { db: Db; drop(): Promise<void> };
    let db: Db;
    before(async () => {
      database = await openTestDatabase();
      db = database.db;
      await db('instances').insert({ id: 'inst-trace', name: 't', token_hash: 'h'.repeat(64), token_sealed: 's' });
    });
    after(async () => {
      await database?.drop();
    });

    it('relays a row inside a span continuing the trace stored with it', async () => {
      const bus = new MemoryBus({ log });
      const relay = new OutboxRelay(db, bus, log, 60_000);
      const received: BusMessage[] = [];
      const sub = await bus.consume({ stream: 'commands', filter: 'cmd.inst-trace', durable: 'relay-trace' }, async (m) => void received.push(m));
      try {
        let accepted = '';
        await inSpan('accept send', {}, async () => {
          accepted = injectTraceparent()!;
          await enqueueOutbox(db, { subject: 'cmd.inst-trace', msgId: 'msg-1', payload: '{"id":"msg-1"}', headers: { traceparent: accepted } });
        });
        await relay.flush();
        await waitFor(() => received[0]);
        const [accept] = spansNamed('accept send');
        const [relaySpan] = spansNamed('outbox relay');
        const [publish] = spansNamed('publish cmd');
        assert.equal(parentOf(relaySpan), accept.spanContext().spanId);
        assert.equal(parentOf(publish), relaySpan.spanContext().spanId);
        assert.equal(received[0].headers.traceparent.split('-')[2], publish.spanContext().spanId, 'the header names the publish span');
      } finally {
        await sub.stop();
        await relay.stop();
        await bus.close();
      }
    });

    it('stores the record-event span as the event trace context', async () => {
      let sendTrace = '';
      await inSpan('session send', {}, async () => {
        sendTrace = injectTraceparent()!;
      });
      const event = await db.transaction((trx) => recordEvent(trx, { instanceId: 'inst-trace', type: 'message.sent', data: {}, traceContext: sendTrace }));
      const [record] = spansNamed('record event');
      assert.equal(parentOf(record), TRACEPARENT.exec(sendTrace)![2]);
      const row = await db('events').where({ id: event.id }).first();
      assert.equal(row.trace_context.split('-')[2], record.spanContext().spanId);
      const outbox = await db('outbox').where({ msg_id: event.id }).first();
      const headers = typeof outbox.headers === 'string' ? JSON.parse(outbox.headers) : outbox.headers;
      assert.equal(headers.traceparent, row.trace_context);
    });
  });
});
