// One consume() of the JetStream bus: a supervised pull-consume loop. nats.js recovers from
// disconnects by itself, but when the consumer (or its stream) disappears — deleted by an operator,
// or lost with a NATS server's storage — it only keeps reporting the loss. This loop watches those
// reports, and on any of them (or on missed heartbeats) drops the subscription, recreates the
// stream and consumer, and consumes again. Handlers run concurrently up to maxAckPending.
import type { ConsumerMessages, JetStreamClient, JsMsg } from '@nats-io/jetstream';
import type { Logger } from '../logger.ts';
import type { BusMessage, MessageHandler, Subscription } from './types.ts';
import type { NatsNames } from './jetstream-names.ts';
import { sleep } from './semantics.ts';
import { fromNatsHeaders } from './nats-headers.ts';

export interface ConsumeLoopOptions {
  js: JetStreamClient;
  names: NatsNames;
  /** Wire name of the stream. */
  stream: string;
  durable: string;
  /** Creates or updates the stream and the durable consumer; runs before every (re)start. */
  ensureConsumer: () => Promise<void>;
  /** Single-owner consumers only: whether the server counts a delivery awaiting its ack. */
  stranded?: () => Promise<boolean>;
  /** Single-owner consumers only: makes deliveries that no handler holds deliverable again now.
   *  Runs before every (re)start at which none of this loop's handlers is running. */
  releaseStranded?: () => Promise<void>;
  handler: MessageHandler;
  maxAckPending: number;
  retryDelayMs: number;
  /** The consumer's ack wait: a running handler tells the server it is still working every half of it. */
  ackWaitMs: number;
  /** Lifetime of one pull request; the server's idle heartbeats come every half of it. */
  pullExpiresMs: number;
  log: Logger;
}

/** Notifications after which the current subscription can no longer receive anything. */
const LOST_CONSUMER = new Set(['consumer_deleted', 'consumer_not_found', 'stream_not_found', 'heartbeats_missed']);

const MAX_RESTART_DELAY_MS = 5000;

export class ConsumeLoop implements Subscription {
  private readonly stopping = new AbortController();
  private readonly inFlight = new Set<Promise<void>>();
  private messages: ConsumerMessages | undefined;
  private loop: Promise<void> = Promise.resolve();

  constructor(private readonly opts: ConsumeLoopOptions) {}

  start(): void {
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    this.messages?.stop();
    await this.loop;
    // Running handlers finish and ack, like a drained subscription.
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  /** The connection to NATS came back. A delivery or an ack can be lost with the old connection, and
   *  a single-owner queue would then wait the whole ack wait (max_ack_pending 1): restarting the
   *  subscription releases what no handler holds, as at any restart. Only when the server counts a
   *  delivery that no handler here holds, and within a second at random: every session process
   *  reconnects at once after a NATS restart, just as the server recovers, and a restart costs a
   *  few JetStream API calls where this look costs one. */
  reconnected(): void {
    const { stranded } = this.opts;
    if (!stranded) return;
    setTimeout(() => void this.restartIfStranded(stranded), Math.random() * 1000).unref();
  }

  private async restartIfStranded(stranded: () => Promise<boolean>): Promise<void> {
    // A restart hands nothing back while a handler runs (see run()), and with max_ack_pending 1,
    // as sessions consume, that handler holds the only delivery and acks it itself.
    if (this.stopped || this.inFlight.size > 0) return;
    // Unknown is treated as stranded: the restart retries until the server answers.
    const restart = await stranded().catch(() => true);
    if (restart && this.inFlight.size === 0) this.messages?.stop();
  }

  private get stopped(): boolean {
    return this.stopping.signal.aborted;
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      try {
        await this.opts.ensureConsumer();
        if (this.opts.releaseStranded && this.inFlight.size === 0) await this.opts.releaseStranded();
        await this.consumeUntilLost();
        failures = 0;
      } catch (err) {
        failures++;
        if (!this.stopped) {
          this.opts.log.warn({ durable: this.opts.durable, err: errorText(err) }, 'bus: consumer failed, restarting');
        }
      }
      this.messages = undefined;
      if (!this.stopped) await sleep(Math.min(50 * 2 ** failures, MAX_RESTART_DELAY_MS), this.stopping.signal);
    }
  }

  /** Consumes until the subscription ends: stop(), a lost consumer, or a closed connection. */
  private async consumeUntilLost(): Promise<void> {
    const { js, stream, durable, maxAckPending } = this.opts;
    const consumer = await js.consumers.get(stream, durable);
    const messages = await consumer.consume({ max_messages: Math.min(maxAckPending, 256), expires: this.opts.pullExpiresMs });
    this.messages = messages;
    if (this.stopped) messages.stop();
    void this.stopWhenLost(messages);
    for await (const m of messages) {
      while (this.inFlight.size >= maxAckPending) await Promise.race(this.inFlight);
      if (this.stopped) {
        // Pulled but not started: hand it back now rather than after the ack wait.
        nakOrIgnore(m);
        continue;
      }
      const run: Promise<void> = this.handle(m).finally(() => this.inFlight.delete(run));
      this.inFlight.add(run);
    }
  }

  private async stopWhenLost(messages: ConsumerMessages): Promise<void> {
    for await (const status of messages.status()) {
      if (LOST_CONSUMER.has(status.type)) {
        this.opts.log.warn({ durable: this.opts.durable, status: status.type }, 'bus: consumer lost, recreating it');
        messages.stop();
        return;
      }
    }
  }

  private async handle(m: JsMsg): Promise<void> {
    // A slow handler is not a dead one: without "in progress" the server would redeliver the
    // message to someone else while this handler still runs.
    const keepAlive = setInterval(() => workingOrIgnore(m), Math.max(this.opts.ackWaitMs / 2, 100));
    try {
      await this.opts.handler(toBusMessage(m, this.opts.names));
    } catch (err) {
      this.opts.log.warn(
        { durable: this.opts.durable, subject: this.opts.names.unprefixed(m.subject), err: errorText(err) },
        'bus: handler failed, message will be redelivered',
      );
      nakOrIgnore(m, this.opts.retryDelayMs);
      return;
    } finally {
      clearInterval(keepAlive);
    }
    try {
      m.ack();
    } catch {
      // The connection is closed: the server redelivers after the ack wait; consumers are idempotent.
    }
  }
}

function nakOrIgnore(m: JsMsg, delayMs?: number): void {
  try {
    m.nak(delayMs);
  } catch {
    // The connection is closed: the server redelivers after the ack wait anyway.
  }
}

function workingOrIgnore(m: JsMsg): void {
  try {
    m.working();
  } catch {
    // Disconnected: nothing to tell; the ack wait decides.
  }
}

function toBusMessage(m: JsMsg, names: NatsNames): BusMessage {
  const msgIdKey = m.headers?.keys().find((key) => key.toLowerCase() === 'nats-msg-id');
  const msgId = msgIdKey ? m.headers!.get(msgIdKey) : undefined;
  return {
    subject: names.unprefixed(m.subject),
    data: m.data,
    headers: fromNatsHeaders(m.headers),
    deliveryCount: m.info.deliveryCount,
    ...(msgId ? { msgId } : {}),
  };
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
