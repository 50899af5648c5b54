// Entry point of the bus: picks the adapter for the deployment (DESIGN §1) — NATS JetStream
// when a NATS URL is configured (cluster mode), the in-process bus otherwise (embedded mode).
import type { Logger } from '../logger.ts';
import type { Bus } from './types.ts';
import { JetStreamBus } from './jetstream.ts';
import { MemoryBus } from './memory.ts';

export interface OpenBusOptions {
  /** NATS server URL(s), comma-separated; unset → in-process bus. */
  natsUrl?: string;
  /** Prefix isolating this deployment's subjects and streams on a shared NATS server ('' for none). */
  namespace: string;
  log: Logger;
  /** NATS_STREAM_REPLICAS. */
  replicas?: number;
}

export async function openBus(opts: OpenBusOptions): Promise<Bus> {
  if (opts.natsUrl) {
    return JetStreamBus.open({ natsUrl: opts.natsUrl, namespace: opts.namespace, log: opts.log, replicas: opts.replicas });
  }
  return new MemoryBus({ log: opts.log });
}

export { busDefaults } from './semantics.ts';
export { JetStreamBus, type JetStreamBusOptions } from './jetstream.ts';
export { MemoryBus, type MemoryBusOptions } from './memory.ts';
