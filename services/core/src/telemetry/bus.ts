// Bus spans (nats.js v3 has no instrumentation of its own): a PRODUCER span around each publish,
// whose traceparent travels in the message headers, and a CONSUMER span around each handler run,
// child of the traceparent the message carries. Both bus adapters use these, so embedded and
// cluster mode trace alike. A request (RPC) carries its caller's trace the same way over NATS; in
// process, the active context already flows into the handler.
import type { BusMessage, MessageHandler, PublishOptions } from '../bus/types.ts';
import { inSpan, SpanKind, withTraceHeaders } from './spans.ts';

/** Runs `publish` inside a "publish <subject>" span, giving it the options with the span's traceparent. */
export function tracedPublish<T>(subject: string, opts: PublishOptions, publish: (opts: PublishOptions) => Promise<T>): Promise<T> {
  return inSpan(
    `publish ${subjectKind(subject)}`,
    { kind: SpanKind.PRODUCER, attributes: { 'messaging.system': 'nats', 'messaging.destination.name': subject, ...(opts.msgId ? { 'messaging.message.id': opts.msgId } : {}) } },
    () => publish({ ...opts, headers: withTraceHeaders(opts.headers) }),
  );
}

/** The handler wrapped in a "consume <subject>" span whose parent is the message's traceparent. */
export function tracedConsumer(durable: string, handler: MessageHandler): MessageHandler {
  return (msg: BusMessage) =>
    inSpan(
      `consume ${subjectKind(msg.subject)}`,
      {
        kind: SpanKind.CONSUMER,
        parent: traceparentOf(msg.headers) ?? null,
        attributes: {
          'messaging.system': 'nats',
          'messaging.destination.name': msg.subject,
          'messaging.consumer.group.name': durable,
          'messaging.message.delivery_count': msg.deliveryCount,
          ...(msg.msgId ? { 'messaging.message.id': msg.msgId } : {}),
        },
      },
      () => handler(msg),
    );
}

/** Runs a request's handler in a "serve <subject>" span whose parent is the request's traceparent. */
export function tracedServe<T>(subject: string, headers: Record<string, string>, serve: () => Promise<T>): Promise<T> {
  const parent = traceparentOf(headers) ?? null;
  return inSpan(`serve ${subjectKind(subject)}`, { kind: SpanKind.SERVER, parent, attributes: { 'messaging.system': 'nats', 'messaging.destination.name': subject } }, serve);
}

function traceparentOf(headers: Record<string, string>): string | undefined {
  const key = Object.keys(headers).find((k) => k.toLowerCase() === 'traceparent');
  return key === undefined ? undefined : headers[key];
}

/** Span names stay low-cardinality: `cmd`, `evt.message.sent`… without the instance id. */
function subjectKind(subject: string): string {
  const [head, , ...rest] = subject.split('.');
  return rest.length ? `${head}.${rest.join('.')}` : head;
}
