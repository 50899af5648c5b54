// Chooses the media store of the deployment (DESIGN §1): a NATS Object Store bucket when a NATS
// URL is configured (cluster mode), otherwise encrypted files in DATA_DIR/media (embedded).
import { join } from 'node:path';
import type { Crypto } from '../crypto.ts';
import { FileMediaStore } from './file-store.ts';
import { NatsMediaStore } from './nats-store.ts';
import type { MediaStore } from './types.ts';

export interface OpenMediaStoreOptions {
  natsUrl?: string;
  namespace: string;
  dataDir: string;
  crypto: Crypto;
  /** NATS bucket TTL; default 30 days. */
  ttlMs?: number;
  /** NATS_STREAM_REPLICAS. */
  replicas?: number;
}

export async function openMediaStore(opts: OpenMediaStoreOptions): Promise<MediaStore> {
  if (opts.natsUrl) {
    return NatsMediaStore.open({ natsUrl: opts.natsUrl, namespace: opts.namespace, crypto: opts.crypto, ttlMs: opts.ttlMs, replicas: opts.replicas });
  }
  return new FileMediaStore(join(opts.dataDir, 'media'), opts.crypto);
}
