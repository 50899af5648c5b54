// The message bus port (DESIGN §1). Two adapters implement it: JetStream (cluster mode) and an
// in-process bus (embedded mode); both pass test/bus-contract. The database stays the record:
// the bus only moves work, so every consumer must be idempotent.

/** Streams the bus knows. `commands`: per-instance send commands, work-queue semantics.
 *  `events`: recorded events for the dispatcher. */
export type StreamName = 'commands' | 'events';

export interface PublishOptions {
  /** Deduplication id (JetStream Nats-Msg-Id): a second publish with the same id is dropped. */
  msgId?: string;
  /** Extra headers (W3C trace context, for example). Never use the reserved `Nats-` prefix. */
  headers?: Record<string, string>;
}

export interface BusMessage {
  subject: string;
  data: Uint8Array;
  headers: Record<string, string>;
  /** How many times this message has been delivered (1 on first delivery). */
  deliveryCount: number;
  /** The publisher's deduplication id (PublishOptions.msgId), when one was given. */
  msgId?: string;
}

export interface ConsumeOptions {
  stream: StreamName;
  /** Subject filter relative to the namespace, e.g. `cmd.inst-abc` or `evt.>`. */
  filter: string;
  /** Durable consumer name: consumers with the same name share the work. */
  durable: string;
  /** Unacknowledged messages allowed at once; 1 gives strict in-order processing. */
  maxAckPending?: number;
  /** Wait before a failed message is redelivered. */
  retryDelayMs?: number;
  /** How long a delivered message may stay unacknowledged before the server redelivers it
   *  (the handler is still running or its process died). Default 30 s. */
  ackWaitMs?: number;
  /** The caller guarantees that only one consume() of this durable runs at a time (the session
   *  worker holds its instance's owner lock). Then any message still unacknowledged when consuming
   *  (re)starts belongs to no live handler — it was in flight to a subscription that was just
   *  stopped, or its process died — and is handed out again at once instead of after the ack wait. */
  singleOwner?: boolean;
  /** The server deletes the durable consumer once nobody has consumed from it for this long. Only
   *  for the work-queue commands stream, whose messages outlive their consumer (a new one with the
   *  same filter is given them): a deleted instance leaves no consumer behind for good. */
  idleLifetimeMs?: number;
}

/** Resolve to acknowledge; throw to have the message redelivered after `retryDelayMs`. */
export type MessageHandler = (msg: BusMessage) => Promise<void>;

export interface Subscription {
  stop(): Promise<void>;
}

/** Request/reply handler; the reply is returned to the requester. Throw a RpcError to fail. */
export type RequestHandler = (data: Uint8Array) => Promise<Uint8Array>;

/** Thrown by a bus that was closed (the process is stopping). */
export class BusClosedError extends Error {
  constructor() {
    super('bus is closed');
    this.name = 'BusClosedError';
  }
}

export class RpcError extends Error {
  constructor(
    public readonly status: number,
    public readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'RpcError';
  }
}

export interface Bus {
  /** Publishes to a stream subject (`cmd.<instanceId>` or `evt.<instanceId>.<type>`); resolves once stored. */
  publish(subject: string, data: Uint8Array, opts?: PublishOptions): Promise<void>;
  consume(opts: ConsumeOptions, handler: MessageHandler): Promise<Subscription>;
  /** Core request/reply (`rpc.<instanceId>.<op>`), not persisted. Rejects with RpcError or a timeout error. */
  request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array>;
  serve(subject: string, handler: RequestHandler): Promise<Subscription>;
  /** Number of messages not yet acknowledged by a durable consumer (for metrics and tests). */
  pending(stream: StreamName, durable: string): Promise<number>;
  /** Number of messages the stream holds; for the work-queue commands stream, those no session has
   *  acknowledged yet, whichever instance they are for (metrics). */
  stored(stream: StreamName): Promise<number>;
  close(): Promise<void>;
}

export const subjects = {
  command: (instanceId: string) => `cmd.${instanceId}`,
  event: (instanceId: string, type: string) => `evt.${instanceId}.${type}`,
  rpc: (instanceId: string, op: string) => `rpc.${instanceId}.${op}`,
};
