// Publishes to JetStream with one reply subscription for every acknowledgement. nats.js's
// js.publish() is a request per message, and each request starts its own timer and builds two
// error objects with stack traces in advance — under load the largest part of the gateway's NATS
// cost. Here a publish is a plain message with a reply subject; the PubAck settles its entry in a
// map, and one timer expires the entries that got no answer; it runs only while some wait, so an
// idle process is not woken ten times a second for nothing. Failures carry the names the bus
// retries on (TimeoutError, NoResponders, ConnectionError) or the JetStreamApiError the server sent.
import { JetStreamApiError } from '@nats-io/jetstream';
import { createInbox, headers as natsHeaders, type Msg, type NatsConnection, type Subscription } from '@nats-io/transport-node';
import { toNatsHeaders } from './nats-headers.ts';

interface Waiting {
  resolve(): void;
  reject(err: Error): void;
  deadline: number;
}

const decoder = new TextDecoder();

export class JetStreamPublisher {
  /** In publish order; all share one timeout, so deadlines are in that order too. */
  private readonly waiting = new Map<string, Waiting>();
  private readonly inbox = `${createInbox()}.`;
  private readonly replies: Subscription;
  private expiry: NodeJS.Timeout | undefined;
  private sequence = 0;

  constructor(
    private readonly nc: NatsConnection,
    private readonly timeoutMs: number,
  ) {
    this.replies = nc.subscribe(`${this.inbox}*`, {
      callback: (err, msg) => {
        if (!err) this.settle(msg); // a subscription error ends in close() or in expiry
      },
    });
  }

  /** Resolves once the stream has stored the message (or recognised `msgId` as a repeat). */
  publish(subject: string, data: Uint8Array, msgId: string | undefined, headers: Record<string, string> | undefined): Promise<void> {
    const token = (this.sequence++).toString(36);
    return new Promise<void>((resolve, reject) => {
      const h = toNatsHeaders(headers) ?? natsHeaders();
      if (msgId) h.set('Nats-Msg-Id', msgId);
      this.waiting.set(token, { resolve, reject, deadline: Date.now() + this.timeoutMs });
      this.armExpiry();
      try {
        this.nc.publish(subject, data, { reply: this.inbox + token, headers: h });
      } catch (err) {
        this.waiting.delete(token);
        throw err;
      }
    });
  }

  /** Fails whatever still waits (the connection is closing) and stops listening. */
  close(): void {
    this.disarmExpiry();
    for (const w of this.waiting.values()) w.reject(failure('ConnectionError', 'the bus closed before the publish was acknowledged'));
    this.waiting.clear();
    if (!this.replies.isClosed()) this.replies.unsubscribe();
  }

  private settle(msg: Msg): void {
    const token = msg.subject.slice(this.inbox.length);
    const w = this.waiting.get(token);
    if (!w) return; // answered after it expired: the retry carries the same msgId
    this.waiting.delete(token);
    if (msg.data.length === 0 && msg.headers?.code === 503) return w.reject(failure('NoResponders', 'no stream answered the publish'));
    let ack: { stream?: string; error?: { code: number; err_code: number; description: string } };
    try {
      ack = JSON.parse(decoder.decode(msg.data));
    } catch {
      return w.reject(new Error('JetStream answered a publish with something that is not a PubAck'));
    }
    if (ack.error) w.reject(new JetStreamApiError(ack.error));
    else if (!ack.stream) w.reject(new Error('JetStream answered a publish with an invalid PubAck'));
    else w.resolve();
  }

  private armExpiry(): void {
    if (this.expiry) return;
    this.expiry = setInterval(() => this.expire(), Math.min(100, this.timeoutMs));
    this.expiry.unref();
  }

  private disarmExpiry(): void {
    clearInterval(this.expiry);
    this.expiry = undefined;
  }

  private expire(): void {
    const now = Date.now();
    for (const [token, w] of this.waiting) {
      if (w.deadline > now) return;
      this.waiting.delete(token);
      w.reject(failure('TimeoutError', `no PubAck within ${this.timeoutMs} ms`));
    }
    this.disarmExpiry(); // nothing waits any more
  }
}

function failure(name: string, message: string): Error {
  const err = new Error(message);
  err.name = name;
  return err;
}
