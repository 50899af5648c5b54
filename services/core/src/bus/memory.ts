// The in-process bus of embedded mode: the same observable behaviour as the JetStream adapter
// (test/bus-contract runs against both), kept in memory. Streams keep messages until consumed
// (commands, work queue) or until they age out (events, limits); durable consumers remember their
// position across stop/consume; failed messages come back after retryDelayMs. Nothing survives a
// restart, which is fine: in embedded mode the outbox relay republishes from the database.
import { withDeadline } from '../deadline.ts';
import type { Logger } from '../logger.ts';
import {
  BusClosedError,
  RpcError,
  type Bus,
  type BusMessage,
  type ConsumeOptions,
  type MessageHandler,
  type PublishOptions,
  type RequestHandler,
  type StreamName,
  type Subscription,
} from './types.ts';
import {
  assertDurableName,
  assertSubject,
  busDefaults,
  rpcErrors,
  streamOfSubject,
  subjectMatches,
} from './semantics.ts';
import { tracedConsumer, tracedPublish } from '../telemetry/bus.ts';

export interface MemoryBusOptions {
  log: Logger;
  /** Clock, replaceable in tests of age limits. */
  now?: () => number;
  /** The events stream drops its oldest messages beyond this count (memory bound; JetStream keeps
   *  them on disk) — only those every durable consumer has taken: a lagging one loses none. */
  maxEventMessages?: number;
}

interface StoredMessage {
  seq: number;
  subject: string;
  data: Uint8Array;
  headers: Record<string, string>;
  msgId?: string;
  storedAt: number;
}

/** One stream: messages in sequence order plus the msgIds seen inside the duplicate window. */
class MemoryStream {
  private messages: StoredMessage[] = [];
  private lastSeq = 0;
  private recentMsgIds = new Map<string, number>();

  constructor(
    readonly workQueue: boolean,
    private readonly maxAgeMs: number,
    private readonly maxMessages: number,
    private readonly now: () => number,
    /** The lowest sequence a durable consumer of this stream still needs. */
    private readonly neededFrom: () => number = () => Number.POSITIVE_INFINITY,
  ) {}

  /** Stores a message; false when its msgId was already seen inside the duplicate window. */
  append(subject: string, data: Uint8Array, opts: PublishOptions): boolean {
    this.trim();
    const now = this.now();
    if (opts.msgId !== undefined) {
      if (this.recentMsgIds.has(opts.msgId)) return false;
      this.recentMsgIds.set(opts.msgId, now);
    }
    const headers = { ...(opts.headers ?? {}) };
    this.messages.push({ seq: ++this.lastSeq, subject, data: data.slice(), headers, msgId: opts.msgId, storedAt: now });
    if (this.messages.length > this.maxMessages && this.messages[0].seq < this.neededFrom()) this.messages.shift();
    return true;
  }

  get(seq: number): StoredMessage | undefined {
    const i = this.indexAtOrAfter(seq);
    return this.messages[i]?.seq === seq ? this.messages[i] : undefined;
  }

  /** The first message with sequence ≥ seq whose subject matches filter. */
  firstFrom(seq: number, filter: string): StoredMessage | undefined {
    this.trim();
    for (let i = this.indexAtOrAfter(seq); i < this.messages.length; i++) {
      if (subjectMatches(filter, this.messages[i].subject)) return this.messages[i];
    }
    return undefined;
  }

  size(): number {
    this.trim();
    return this.messages.length;
  }

  countFrom(seq: number, filter: string): number {
    this.trim();
    let n = 0;
    for (let i = this.indexAtOrAfter(seq); i < this.messages.length; i++) {
      if (subjectMatches(filter, this.messages[i].subject)) n++;
    }
    return n;
  }

  remove(seq: number): void {
    const i = this.indexAtOrAfter(seq);
    if (this.messages[i]?.seq === seq) this.messages.splice(i, 1);
  }

  /** Drops messages past their max age and msgIds past the duplicate window (both in time order). */
  private trim(): void {
    const now = this.now();
    while (this.messages.length > 0 && now - this.messages[0].storedAt > this.maxAgeMs) this.messages.shift();
    for (const [id, at] of this.recentMsgIds) {
      if (now - at < busDefaults.duplicateWindowMs) break;
      this.recentMsgIds.delete(id);
    }
  }

  /** Binary search: index of the first message with sequence ≥ seq. */
  private indexAtOrAfter(seq: number): number {
    let lo = 0;
    let hi = this.messages.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.messages[mid].seq < seq) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/** A consume() call attached to a durable. */
interface Worker {
  handler: MessageHandler;
  inFlight: Set<Promise<void>>;
}

/** A durable consumer: its position in the stream and the messages delivered but not acked. */
class MemoryDurable {
  filter: string;
  maxAckPending: number;
  retryDelayMs: number;
  /** The first stream sequence never delivered to this durable. */
  nextSeq = 1;
  /** Delivered, not yet acknowledged: sequence → delivery count (counts against maxAckPending). */
  readonly unacked = new Map<number, number>();
  /** Failed messages whose retry delay has passed, in sequence order. */
  readonly dueForRedelivery: number[] = [];
  readonly workers: Worker[] = [];
  private nextWorker = 0;

  constructor(opts: ConsumeOptions) {
    this.filter = opts.filter;
    this.maxAckPending = opts.maxAckPending ?? busDefaults.maxAckPending;
    this.retryDelayMs = opts.retryDelayMs ?? busDefaults.retryDelayMs;
  }

  pickWorker(): Worker | undefined {
    if (this.workers.length === 0) return undefined;
    this.nextWorker = (this.nextWorker + 1) % this.workers.length;
    return this.workers[this.nextWorker];
  }
}

export class MemoryBus implements Bus {
  private readonly streams: Record<StreamName, MemoryStream>;
  private readonly durables = new Map<string, MemoryDurable>();
  private readonly servers: { pattern: string; handler: RequestHandler }[] = [];
  private readonly timers = new Set<NodeJS.Timeout>();
  private nextServer = 0;
  private closed = false;
  private readonly log: Logger;

  constructor(opts: MemoryBusOptions) {
    const now = opts.now ?? Date.now;
    this.log = opts.log;
    this.streams = {
      commands: new MemoryStream(true, busDefaults.commandsMaxAgeMs, Number.POSITIVE_INFINITY, now),
      events: new MemoryStream(false, busDefaults.eventsMaxAgeMs, opts.maxEventMessages ?? 100_000, now, () => this.neededFrom('events')),
    };
  }

  /** The lowest sequence a durable of the stream has not taken, or taken and not acknowledged. */
  private neededFrom(stream: StreamName): number {
    let lowest = Number.POSITIVE_INFINITY;
    for (const [key, durable] of this.durables) {
      if (!key.startsWith(`${stream}/`)) continue;
      lowest = Math.min(lowest, durable.nextSeq, ...durable.unacked.keys(), ...durable.dueForRedelivery);
    }
    return lowest;
  }

  /** Publishes inside a producer span whose traceparent rides in the message headers. */
  async publish(subject: string, data: Uint8Array, opts: PublishOptions = {}): Promise<void> {
    return tracedPublish(subject, opts, (traced) => this.publishNow(subject, data, traced));
  }

  private async publishNow(subject: string, data: Uint8Array, opts: PublishOptions): Promise<void> {
    this.assertOpen();
    assertSubject(subject);
    const streamName = streamOfSubject(subject);
    if (!streamName) throw new Error(`no stream stores subject ${subject}`);
    if (!this.streams[streamName].append(subject, data, opts)) return;
    for (const [key, durable] of this.durables) {
      if (key.startsWith(`${streamName}/`)) this.pump(streamName, durable);
    }
  }

  async consume(opts: ConsumeOptions, handler: MessageHandler): Promise<Subscription> {
    handler = tracedConsumer(opts.durable, handler); // a consumer span per handler run
    this.assertOpen();
    assertSubject(opts.filter, true);
    assertDurableName(opts.durable);
    const durable = this.durableFor(opts);
    const worker: Worker = { handler, inFlight: new Set() };
    durable.workers.push(worker);
    this.pump(opts.stream, durable);
    let stopped = false;
    return {
      stop: async () => {
        if (stopped) return;
        stopped = true;
        const i = durable.workers.indexOf(worker);
        if (i >= 0) durable.workers.splice(i, 1);
        // Let running handlers finish (and ack), as a drained NATS subscription would.
        while (worker.inFlight.size > 0) await Promise.allSettled([...worker.inFlight]);
        this.pump(opts.stream, durable);
      },
    };
  }

  async request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    this.assertOpen();
    assertSubject(subject);
    const servers = this.servers.filter((s) => subjectMatches(s.pattern, subject));
    if (servers.length === 0) throw rpcErrors.notRunning(subject);
    const server = servers[this.nextServer++ % servers.length];
    const reply = await withDeadline(this.runServer(server.handler, subject, data.slice()), timeoutMs, () => rpcErrors.timeout(subject, timeoutMs));
    return reply.slice();
  }

  async serve(subject: string, handler: RequestHandler): Promise<Subscription> {
    this.assertOpen();
    assertSubject(subject, true);
    const entry = { pattern: subject, handler };
    this.servers.push(entry);
    return {
      stop: async () => {
        const i = this.servers.indexOf(entry);
        if (i >= 0) this.servers.splice(i, 1);
      },
    };
  }

  async stored(stream: StreamName): Promise<number> {
    return this.streams[stream].size();
  }

  async pending(stream: StreamName, durableName: string): Promise<number> {
    const durable = this.durables.get(`${stream}/${durableName}`);
    if (!durable) return 0;
    return this.streams[stream].countFrom(durable.nextSeq, durable.filter) + durable.unacked.size;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    this.servers.length = 0;
    const running: Promise<void>[] = [];
    for (const durable of this.durables.values()) {
      for (const worker of durable.workers.splice(0)) running.push(...worker.inFlight);
    }
    await Promise.allSettled(running);
  }

  private assertOpen(): void {
    if (this.closed) throw new BusClosedError();
  }

  /** The durable's state, created on first use; later consume() calls update its settings. */
  private durableFor(opts: ConsumeOptions): MemoryDurable {
    const key = `${opts.stream}/${opts.durable}`;
    let durable = this.durables.get(key);
    if (!durable) {
      durable = new MemoryDurable(opts);
      this.durables.set(key, durable);
      return durable;
    }
    durable.filter = opts.filter;
    if (opts.maxAckPending !== undefined) durable.maxAckPending = opts.maxAckPending;
    if (opts.retryDelayMs !== undefined) durable.retryDelayMs = opts.retryDelayMs;
    return durable;
  }

  /** Hands out messages while the durable has a worker and room under maxAckPending. */
  private pump(streamName: StreamName, durable: MemoryDurable): void {
    if (this.closed) return;
    const stream = this.streams[streamName];
    for (;;) {
      if (durable.workers.length === 0) return;
      const redeliverSeq = durable.dueForRedelivery.shift();
      if (redeliverSeq !== undefined) {
        const msg = stream.get(redeliverSeq);
        const count = durable.unacked.get(redeliverSeq);
        if (!msg || count === undefined) {
          durable.unacked.delete(redeliverSeq); // aged out or acked meanwhile
          continue;
        }
        durable.unacked.set(redeliverSeq, count + 1);
        this.deliver(streamName, durable, msg, count + 1);
        continue;
      }
      if (durable.unacked.size >= durable.maxAckPending) return;
      const msg = stream.firstFrom(durable.nextSeq, durable.filter);
      if (!msg) return;
      durable.nextSeq = msg.seq + 1;
      durable.unacked.set(msg.seq, 1);
      this.deliver(streamName, durable, msg, 1);
    }
  }

  private deliver(streamName: StreamName, durable: MemoryDurable, msg: StoredMessage, deliveryCount: number): void {
    const worker = durable.pickWorker()!;
    const busMessage: BusMessage = {
      subject: msg.subject,
      data: msg.data.slice(),
      headers: { ...msg.headers },
      deliveryCount,
      ...(msg.msgId !== undefined ? { msgId: msg.msgId } : {}),
    };
    // Start the handler on a later turn of the event loop, as a network delivery would: never
    // inside publish(), and never as a microtask chained to the previous message's ack. PGlite
    // answers without yielding to the loop, so a backlog drained in one microtask chain would
    // keep every HTTP request waiting until the whole queue was sent.
    const run = new Promise<void>((turn) => setImmediate(turn))
      .then(() => worker.handler(busMessage))
      .then(
        () => this.ack(streamName, durable, msg.seq),
        (err: unknown) => this.nak(streamName, durable, msg, err),
      )
      .finally(() => worker.inFlight.delete(run));
    worker.inFlight.add(run);
  }

  private ack(streamName: StreamName, durable: MemoryDurable, seq: number): void {
    durable.unacked.delete(seq);
    if (this.streams[streamName].workQueue) this.streams[streamName].remove(seq);
    this.pump(streamName, durable);
  }

  private nak(streamName: StreamName, durable: MemoryDurable, msg: StoredMessage, err: unknown): void {
    this.log.warn({ subject: msg.subject, err: errorText(err) }, 'bus: handler failed, message will be redelivered');
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      insertSorted(durable.dueForRedelivery, msg.seq);
      this.pump(streamName, durable);
    }, durable.retryDelayMs);
    this.timers.add(timer);
  }

  private async runServer(handler: RequestHandler, subject: string, data: Uint8Array): Promise<Uint8Array> {
    try {
      return await handler(data);
    } catch (err) {
      if (err instanceof RpcError) throw new RpcError(err.status, err.code, err.message);
      this.log.warn({ subject, err: errorText(err) }, 'bus: request handler failed');
      throw rpcErrors.internal();
    }
  }
}

function insertSorted(list: number[], value: number): void {
  let i = list.length;
  while (i > 0 && list[i - 1] > value) i--;
  list.splice(i, 0, value);
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
