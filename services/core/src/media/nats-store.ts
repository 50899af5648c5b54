// MediaStore adapter for cluster mode: encrypted objects in a NATS JetStream Object Store bucket
// (one bucket per namespace, entries expire after the bucket TTL, 30 days by default).
// Only stream features of NATS 2.9 are used (the bucket TTL is the stream's max_age).
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeWebReadableStream } from 'node:stream/web';
import { jetstreamManager } from '@nats-io/jetstream';
import { Objm, setSha256Backend, type ObjectStore } from '@nats-io/obj';
import { connect, nanos, type NatsConnection } from '@nats-io/transport-node';
import { natsServers } from '../bus/nats-servers.ts';
import { assertCanReplicate, explainReplicasRefusal, replicasToKeep } from '../bus/stream-replicas.ts';
import type { Crypto } from '../crypto.ts';
import { MediaCipher } from './encryption.ts';
import { collectStream, inChunks, isSafeMediaId } from './stream-util.ts';
import { MediaIntegrityError, MediaNotFoundError, type MediaStore } from './types.ts';

export const DEFAULT_MEDIA_TTL_MS = 30 * 86_400_000;

/** The Object Store bucket that holds a namespace's media. */
export function natsMediaBucketName(namespace: string): string {
  return namespace ? `${namespace}_media` : 'media';
}

export interface NatsMediaStoreOptions {
  namespace: string;
  crypto: Crypto;
  /** An existing connection (left open by close()), or a URL to open one owned by the store. */
  nc?: NatsConnection;
  natsUrl?: string;
  /** How long the bucket keeps an object at least (MEDIA_RETENTION_MS): an existing bucket with a
   *  shorter TTL is raised to it, never lowered. Default for a new bucket: 30 days. */
  ttlMs?: number;
  /** On how many servers of a NATS cluster the bucket is kept (NATS_STREAM_REPLICAS, default 1);
   *  an existing bucket is moved to that many. */
  replicas?: number;
}

/**
 * Creating a bucket that exists keeps its settings. Its TTL: without this, a TTL set before
 * MEDIA_RETENTION_MS was raised (or by a session process, which has the default) would delete
 * media the records still list. Only ever raised: the media retention sweep deletes by age, the
 * TTL is its backstop, and processes that disagree (sessions do not get MEDIA_RETENTION_MS) must
 * not lower it. Its replicas: NATS_STREAM_REPLICAS raised for a cluster applies to the media too
 * (only raised, as for the bus's streams: bus/stream-replicas.ts).
 */
async function keepBucketSettings(nc: NatsConnection, bucketName: string, opts: { ttlMs?: number; replicas: number }): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const stream = `OBJ_${bucketName}`;
  const { config } = await jsm.streams.info(stream);
  const wanted = { ...config };
  if (opts.ttlMs !== undefined && config.max_age !== 0 && config.max_age < nanos(opts.ttlMs)) wanted.max_age = nanos(opts.ttlMs);
  wanted.num_replicas = replicasToKeep(config.num_replicas, opts.replicas);
  if (wanted.max_age !== config.max_age || wanted.num_replicas !== config.num_replicas) await jsm.streams.update(stream, wanted);
}

export class NatsMediaStore implements MediaStore {
  private readonly cipher: MediaCipher;

  private constructor(
    private readonly bucket: ObjectStore,
    private readonly nc: NatsConnection,
    private readonly ownsConnection: boolean,
    crypto: Crypto,
  ) {
    this.cipher = new MediaCipher(crypto);
  }

  /** Connects (when given a URL) and creates or opens the namespace's bucket. */
  static async open(opts: NatsMediaStoreOptions): Promise<NatsMediaStore> {
    if (!opts.nc && !opts.natsUrl) throw new Error('NatsMediaStore needs a connection or a NATS URL');
    // The library digests every object it writes and reads with a pure-JS SHA-256 by default:
    // seconds of a blocked event loop for a 32 MiB file, which stalled every request of the
    // process. Node's own is the same digest. The setting is process-wide; this store is its only user.
    setSha256Backend('native');
    const nc = opts.nc ?? (await connect({ servers: natsServers(opts.natsUrl!), name: 'switchboard-media' }));
    try {
      const replicas = opts.replicas ?? 1;
      assertCanReplicate(nc, replicas);
      const bucket = await new Objm(nc).create(natsMediaBucketName(opts.namespace), {
        description: 'Switchboard media (encrypted)',
        ttl: nanos(opts.ttlMs ?? DEFAULT_MEDIA_TTL_MS),
        replicas,
      });
      await keepBucketSettings(nc, natsMediaBucketName(opts.namespace), { ttlMs: opts.ttlMs, replicas });
      return new NatsMediaStore(bucket, nc, !opts.nc, opts.crypto);
    } catch (err) {
      if (!opts.nc) await nc.close();
      throw explainReplicasRefusal(err, opts.replicas ?? 1);
    }
  }

  async put(mediaId: string, bytes: Uint8Array): Promise<void> {
    if (!isSafeMediaId(mediaId)) throw new Error('media id may only contain letters, digits, "_", "-" and "."');
    const encrypted = Readable.from(inChunks(bytes)).pipe(this.cipher.encryptStream(mediaId));
    const web = Readable.toWeb(encrypted) as unknown as ReadableStream<Uint8Array>;
    await this.bucket.put({ name: mediaId }, web);
  }

  async get(mediaId: string): Promise<Uint8Array> {
    if (!isSafeMediaId(mediaId)) throw new MediaNotFoundError(mediaId);
    const result = await this.bucket.get(mediaId);
    if (!result) throw new MediaNotFoundError(mediaId);
    const decrypt = this.cipher.decryptStream(mediaId);
    const collected = collectStream(decrypt);
    try {
      await pipeline(Readable.fromWeb(result.data as unknown as NodeWebReadableStream<Uint8Array>), decrypt);
      const transferError = await result.error;
      if (transferError) throw transferError;
      return await collected;
    } catch (err) {
      collected.catch(() => undefined);
      // The library checks the object's SHA-256 digest while reading; a mismatch is tampering.
      if (err instanceof Error && /corrupt object|digests do not match/.test(err.message)) throw new MediaIntegrityError(mediaId);
      throw err;
    }
  }

  async delete(mediaId: string): Promise<void> {
    if (!isSafeMediaId(mediaId)) return;
    if (!(await this.bucket.info(mediaId))) return; // deleting twice is not an error
    await this.bucket.delete(mediaId);
  }

  async close(): Promise<void> {
    if (this.ownsConnection && !this.nc.isClosed()) await this.nc.drain();
  }

  /** Removes the bucket and everything in it (tests; an operator decommissioning a namespace). */
  async destroy(): Promise<void> {
    await this.bucket.destroy();
  }
}
