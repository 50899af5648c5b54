// The cluster-mode bus on NATS JetStream (nats.js v3). Two streams — commands (work queue) and
// events (limits) — are created or updated at open; publishes carry Nats-Msg-Id for dedup and
// retry briefly while NATS reconnects (acks gathered by jetstream-publisher.ts); consume() runs a
// self-healing pull loop (jetstream-consumer.ts); request/serve use core NATS request/reply with
// errors in headers.
// Works on NATS 2.9 (one filter subject per consumer, no per-message TTL).
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  RetentionPolicy,
  StorageType,
  jetstream,
  jetstreamManager,
  type ConsumerConfig,
  type JetStreamClient,
  type JetStreamManager,
  type StreamConfig,
} from '@nats-io/jetstream';
import {
  connect,
  headers as natsHeaders,
  nanos,
  type Msg,
  type NatsConnection,
  type Subscription as NatsSubscription,
} from '@nats-io/transport-node';
import type { Logger } from '../logger.ts';
import {
  BusClosedError,
  RpcError,
  type Bus,
  type ConsumeOptions,
  type MessageHandler,
  type PublishOptions,
  type RequestHandler,
  type StreamName,
  type Subscription,
} from './types.ts';
import { assertDurableName, assertSubject, busDefaults, rpcErrors, sleep, streamOfSubject, streamSubjects } from './semantics.ts';
import { NatsNames } from './jetstream-names.ts';
import { ConsumeLoop } from './jetstream-consumer.ts';
import { JetStreamPublisher } from './jetstream-publisher.ts';
import { tracedConsumer, tracedPublish, tracedServe } from '../telemetry/bus.ts';
import { withTraceHeaders } from '../telemetry/spans.ts';
import { fromNatsHeaders, toNatsHeaders } from './nats-headers.ts';
import { assertCanReplicate, explainReplicasRefusal, replicasToKeep } from './stream-replicas.ts';
import { natsServers } from './nats-servers.ts';

export interface JetStreamBusOptions {
  natsUrl: string;
  /** Subject/stream prefix; '' for none. */
  namespace: string;
  log: Logger;
  /** Connection name shown in NATS monitoring. */
  name?: string;
  /** How long publish() keeps retrying transient failures (NATS restarting) before it rejects. */
  publishRetryMs?: number;
  /** How long one publish attempt waits for its PubAck. Short, because a request sent while
   *  JetStream is still starting after a restart gets no answer; retrying is safe with a msgId. */
  publishAttemptTimeoutMs?: number;
  /** Lifetime of a pull request; missed heartbeats (every half of it) trigger consumer recreation. */
  pullExpiresMs?: number;
  /** Stream replicas (NATS_STREAM_REPLICAS: 1 on a single server; 3 on a NATS cluster). */
  replicas?: number;
}

/** Reply headers that carry an RpcError from serve() back to request(). */
const RPC_STATUS = 'Rpc-Error-Status';
const RPC_CODE = 'Rpc-Error-Code';

/** Errors worth retrying a publish for: the server is restarting, JetStream is not ready yet. */
const TRANSIENT_ERRORS = new Set(['TimeoutError', 'RequestError', 'NoResponders', 'JetStreamNotEnabled', 'ConnectionError']);
/** A publish nobody answered: the stream may have been deleted (its consumers recreate it, but a
 *  stream nothing consumes now — every session waiting for a scan — needs the publisher to). */
const STREAM_MISSING = new Set(['NoResponders', 'JetStreamNotEnabled']);

export class JetStreamBus implements Bus {
  private readonly names: NatsNames;
  private readonly loops = new Set<ConsumeLoop>();
  private readonly servers = new Set<NatsSubscription>();
  private readonly publisher: JetStreamPublisher;
  private closed = false;
  /** Between a `disconnect` and the `reconnect` of the NATS connection. */
  private disconnected = false;
  /** Disconnects so far: a request that saw one while it waited timed out for the outage's sake. */
  private disconnects = 0;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly opts: JetStreamBusOptions,
  ) {
    this.names = new NatsNames(opts.namespace);
    this.publisher = new JetStreamPublisher(nc, opts.publishAttemptTimeoutMs ?? 2000);
  }

  /** Connects (reconnecting forever afterwards) and creates or updates both streams. */
  static async open(opts: JetStreamBusOptions): Promise<JetStreamBus> {
    new NatsNames(opts.namespace); // validates before connecting
    const nc = await connect({
      servers: natsServers(opts.natsUrl),
      name: opts.name ?? 'switchboard',
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
    });
    try {
      assertCanReplicate(nc, opts.replicas ?? 1);
      const bus = new JetStreamBus(nc, jetstream(nc), await jetstreamManager(nc), opts);
      await bus.ensureStream('commands');
      await bus.ensureStream('events');
      bus.watchConnection();
      return bus;
    } catch (err) {
      await nc.close();
      throw explainReplicasRefusal(err, opts.replicas ?? 1);
    }
  }

  /** Publishes inside a producer span whose traceparent rides in the message headers. */
  async publish(subject: string, data: Uint8Array, opts: PublishOptions = {}): Promise<void> {
    return tracedPublish(subject, opts, (traced) => this.publishNow(subject, data, traced));
  }

  private async publishNow(subject: string, data: Uint8Array, opts: PublishOptions): Promise<void> {
    this.assertOpen();
    assertSubject(subject);
    const stream = streamOfSubject(subject);
    if (!stream) throw new Error(`no stream stores subject ${subject}`);
    const retryUntil = Date.now() + (this.opts.publishRetryMs ?? 10_000);
    for (let attempt = 0; ; attempt++) {
      try {
        await this.publisher.publish(this.names.subject(subject), data, opts.msgId, opts.headers);
        return;
      } catch (err) {
        if (!isTransient(err) || Date.now() >= retryUntil || this.closed) throw err;
        // No responder on a stream subject may also mean the stream was deleted: recreate it.
        if (STREAM_MISSING.has((err as Error).name)) await this.ensureStream(stream).catch(() => undefined);
        await sleep(Math.min(100 * 2 ** attempt, 1000));
      }
    }
  }

  async consume(opts: ConsumeOptions, handler: MessageHandler): Promise<Subscription> {
    handler = tracedConsumer(opts.durable, handler); // a consumer span per handler run
    this.assertOpen();
    assertSubject(opts.filter, true);
    assertDurableName(opts.durable);
    const maxAckPending = opts.maxAckPending ?? busDefaults.maxAckPending;
    const ackWaitMs = opts.ackWaitMs ?? busDefaults.ackWaitMs;
    const config: Partial<ConsumerConfig> = {
      durable_name: opts.durable,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: this.names.subject(opts.filter),
      max_ack_pending: maxAckPending,
      ack_wait: nanos(ackWaitMs),
      ...(opts.idleLifetimeMs ? { inactive_threshold: nanos(opts.idleLifetimeMs) } : {}),
    };
    // Create it now so that bad settings (e.g. a filter overlapping another consumer's on the work
    // queue) fail here; while NATS is unreachable the loop keeps trying instead.
    await this.ensureConsumer(opts.stream, config).catch((err: unknown) => {
      if (!isTransient(err)) throw err;
      this.opts.log.warn({ durable: opts.durable, err: errorText(err) }, 'bus: consumer not created yet, will retry');
    });
    const loop = new ConsumeLoop({
      js: this.js,
      names: this.names,
      stream: this.names.stream(opts.stream),
      durable: opts.durable,
      ensureConsumer: () => this.ensureConsumer(opts.stream, config),
      stranded: opts.singleOwner ? async () => (await this.unacknowledged(opts.stream, opts.durable)) > 0 : undefined,
      releaseStranded: opts.singleOwner ? () => this.releaseStranded(opts.stream, config) : undefined,
      handler,
      maxAckPending,
      retryDelayMs: opts.retryDelayMs ?? busDefaults.retryDelayMs,
      ackWaitMs,
      pullExpiresMs: this.opts.pullExpiresMs ?? 30_000,
      log: this.opts.log,
    });
    this.loops.add(loop);
    loop.start();
    return {
      stop: async () => {
        this.loops.delete(loop);
        await loop.stop();
      },
    };
  }

  async request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    this.assertOpen();
    assertSubject(subject);
    // nats.js holds a request through a reconnect and then times it out: without a connection the
    // answer is "the bus is down" at once, not "the session did not answer" after the whole wait.
    if (this.disconnected) throw rpcErrors.unavailable();
    const disconnectsBefore = this.disconnects;
    let reply: Msg;
    try {
      reply = await this.nc.request(this.names.subject(subject), data, { timeout: timeoutMs, headers: toNatsHeaders(withTraceHeaders()) });
    } catch (err) {
      if (this.disconnects !== disconnectsBefore) throw rpcErrors.unavailable();
      throw requestFailure(err, subject, timeoutMs, data.length, this.nc.info?.max_payload);
    }
    const status = reply.headers?.get(RPC_STATUS);
    if (status) throw new RpcError(Number(status), reply.headers!.get(RPC_CODE), reply.string());
    return reply.data;
  }

  async serve(subject: string, handler: RequestHandler): Promise<Subscription> {
    this.assertOpen();
    assertSubject(subject, true);
    // A queue group: replicas serving the same subject share requests instead of all answering.
    const sub = this.nc.subscribe(this.names.subject(subject), {
      queue: 'rpc',
      callback: (err, msg) => {
        if (!err) void this.answer(msg, handler);
      },
    });
    this.servers.add(sub);
    await this.nc.flush(); // the subscription is registered on the server when serve() resolves
    return {
      stop: async () => {
        this.servers.delete(sub);
        if (!sub.isClosed()) await sub.drain();
      },
    };
  }

  async stored(stream: StreamName): Promise<number> {
    try {
      return (await this.jsm.streams.info(this.names.stream(stream))).state.messages;
    } catch (err) {
      if (isApiError(err, JetStreamApiCodes.StreamNotFound)) return 0;
      throw err;
    }
  }

  async pending(stream: StreamName, durable: string): Promise<number> {
    try {
      const info = await this.jsm.consumers.info(this.names.stream(stream), durable);
      return info.num_pending + info.num_ack_pending;
    } catch (err) {
      if (isApiError(err, JetStreamApiCodes.ConsumerNotFound) || isApiError(err, JetStreamApiCodes.StreamNotFound)) return 0;
      throw err;
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.loops].map((loop) => loop.stop()));
    this.loops.clear();
    this.publisher.close();
    if (!this.nc.isClosed()) await this.nc.drain();
  }

  /** Creates the stream, or brings an existing one's subjects and limits to what this code expects. */
  async ensureStream(name: StreamName): Promise<void> {
    const wanted = this.streamConfig(name);
    try {
      const info = await this.jsm.streams.info(wanted.name);
      const c = info.config;
      const configured = this.opts.replicas ?? 1;
      const replicas = replicasToKeep(c.num_replicas, configured);
      if (replicas > configured) this.opts.log.warn({ stream: wanted.name, replicas, configured }, 'bus: the stream has more replicas than NATS_STREAM_REPLICAS; kept (lower them with the nats CLI)');
      const differs =
        c.subjects.join(',') !== wanted.subjects.join(',') ||
        c.max_age !== wanted.max_age ||
        c.duplicate_window !== wanted.duplicate_window ||
        c.num_replicas !== replicas; // NATS moves a stream to more servers in place
      if (differs) await this.jsm.streams.update(wanted.name, { ...c, ...wanted, num_replicas: replicas });
    } catch (err) {
      if (!isApiError(err, JetStreamApiCodes.StreamNotFound)) throw err;
      // Adding an identical stream is idempotent, so a concurrent creator is harmless.
      await this.jsm.streams.add(wanted);
    }
  }

  private streamConfig(name: StreamName): Partial<StreamConfig> & { name: string; subjects: string[] } {
    const common = {
      name: this.names.stream(name),
      subjects: [this.names.subject(streamSubjects[name])],
      storage: StorageType.File,
      discard: DiscardPolicy.Old,
      num_replicas: this.opts.replicas ?? 1,
      duplicate_window: nanos(busDefaults.duplicateWindowMs),
    };
    return name === 'commands'
      ? { ...common, retention: RetentionPolicy.Workqueue, max_age: nanos(busDefaults.commandsMaxAgeMs) }
      : { ...common, retention: RetentionPolicy.Limits, max_age: nanos(busDefaults.eventsMaxAgeMs) };
  }

  /** Creates the durable consumer (and its stream when missing) or updates its settings. */
  private async ensureConsumer(stream: StreamName, config: Partial<ConsumerConfig>): Promise<void> {
    const streamName = this.names.stream(stream);
    const durable = config.durable_name!;
    let existing;
    try {
      existing = await this.jsm.consumers.info(streamName, durable);
    } catch (err) {
      if (isApiError(err, JetStreamApiCodes.StreamNotFound)) await this.ensureStream(stream);
      else if (!isApiError(err, JetStreamApiCodes.ConsumerNotFound)) throw err;
      await this.jsm.consumers.add(streamName, config);
      return;
    }
    const c = existing.config;
    const sameIdleLifetime = (c.inactive_threshold ?? 0) === (config.inactive_threshold ?? 0);
    if (c.filter_subject === config.filter_subject && c.max_ack_pending === config.max_ack_pending && c.ack_wait === config.ack_wait && sameIdleLifetime) {
      return;
    }
    if (c.filter_subject === config.filter_subject) {
      await this.jsm.consumers.update(streamName, durable, { max_ack_pending: config.max_ack_pending, ack_wait: config.ack_wait, inactive_threshold: config.inactive_threshold ?? 0 });
      return;
    }
    // NATS 2.9 cannot change a consumer's filter: replace the consumer.
    this.opts.log.warn({ stream: streamName, durable }, 'bus: consumer filter changed, recreating the consumer');
    await this.replaceConsumer(streamName, config);
  }

  /** Deletes and re-creates a durable consumer. NATS 2.9 can fail a delete with "directory not
   *  empty" while it is still flushing the consumer's state to disk; that passes in moments. */
  private async replaceConsumer(streamName: string, config: Partial<ConsumerConfig>): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.jsm.consumers.delete(streamName, config.durable_name!);
        break;
      } catch (err) {
        if (attempt >= 5 || !/directory not empty/i.test(String(err))) throw err;
        await new Promise((r) => setTimeout(r, 100 * attempt));
      }
    }
    await this.jsm.consumers.add(streamName, config);
  }

  /**
   * For a single-owner consumer about to (re)start with no handler running: a message still
   * awaiting its ack was lost on its way — delivered to a pull subscription as it was being
   * stopped (the server had already sent it), or to a process that died — and the server would
   * hold it back for the whole ack wait, blocking the queue behind it (max_ack_pending 1).
   * JetStream cannot hand a delivery back without the message, so the consumer is replaced: on a
   * work-queue stream unacknowledged messages stay stored and the new consumer delivers them at once.
   */
  private async releaseStranded(stream: StreamName, config: Partial<ConsumerConfig>): Promise<void> {
    const durable = config.durable_name!;
    const unacknowledged = await this.unacknowledged(stream, durable);
    if (unacknowledged === 0) return;
    this.opts.log.info({ durable, unacknowledged }, 'bus: redelivering messages no handler holds');
    await this.replaceConsumer(this.names.stream(stream), config);
  }

  private async unacknowledged(stream: StreamName, durable: string): Promise<number> {
    return (await this.jsm.consumers.info(this.names.stream(stream), durable)).num_ack_pending;
  }

  private async answer(msg: Msg, handler: RequestHandler): Promise<void> {
    try {
      const subject = this.names.unprefixed(msg.subject);
      msg.respond(await tracedServe(subject, fromNatsHeaders(msg.headers), () => handler(msg.data)));
    } catch (err) {
      const rpcError = err instanceof RpcError ? err : rpcErrors.internal();
      if (!(err instanceof RpcError)) {
        this.opts.log.warn({ subject: this.names.unprefixed(msg.subject), err: errorText(err) }, 'bus: request handler failed');
      }
      const h = natsHeaders();
      h.set(RPC_STATUS, String(rpcError.status));
      h.set(RPC_CODE, rpcError.code);
      msg.respond(new TextEncoder().encode(rpcError.message), { headers: h });
    }
  }

  private watchConnection(): void {
    void (async () => {
      for await (const s of this.nc.status()) {
        if (s.type === 'disconnect' || s.type === 'reconnect') this.opts.log.warn({ nats: s.type }, 'bus: NATS connection changed');
        if (s.type === 'disconnect') {
          this.disconnected = true;
          this.disconnects++;
        }
        if (s.type === 'reconnect') {
          this.disconnected = false;
          for (const loop of this.loops) loop.reconnected();
        }
      }
    })();
  }

  private assertOpen(): void {
    if (this.closed) throw new BusClosedError();
  }
}

function requestFailure(err: unknown, subject: string, timeoutMs: number, size: number, maxPayload: number | undefined): RpcError {
  const e = err as Error & { isNoResponders?: () => boolean };
  if (e.name === 'NoResponders' || (e.name === 'RequestError' && e.isNoResponders?.())) return rpcErrors.notRunning(subject);
  if (e.name === 'TimeoutError') return rpcErrors.timeout(subject, timeoutMs);
  // Retrying cannot help a request larger than the server's max_payload: not a 503.
  if (maxPayload !== undefined && size > maxPayload) return rpcErrors.tooLarge(size, maxPayload);
  return rpcErrors.unavailable();
}

function isTransient(err: unknown): boolean {
  if (err instanceof JetStreamApiError) return err.status >= 500;
  return err instanceof Error && TRANSIENT_ERRORS.has(err.name);
}

function isApiError(err: unknown, code: number): boolean {
  return err instanceof JetStreamApiError && err.code === code;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
