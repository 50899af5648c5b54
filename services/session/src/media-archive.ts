// What the session needs from media storage: archive inbound files, sign links to them, and read
// the files of outbound sends. Backed by core's media records and the deployment's MediaStore.
import { mediaLink, readMedia, storeMedia, type Crypto, type Db, type MediaStore, type NewMedia } from '@switchboard/core';

export interface MediaArchive {
  store(media: NewMedia): Promise<{ id: string }>;
  /** A signed download link (DESIGN §5 "Media"). */
  link(instanceId: string, mediaId: string): string;
  read(mediaId: string): Promise<Uint8Array>;
}

export interface MediaArchiveOptions {
  db: Db;
  store: MediaStore;
  crypto: Crypto;
  publicBaseUrl: string;
  linkTtlSeconds: number;
  readTimeoutMs?: number;
}

export function mediaArchive(opts: MediaArchiveOptions): MediaArchive {
  return {
    store: (media) => storeMedia(opts.db, opts.store, media),
    link: (instanceId, mediaId) => mediaLink(opts.crypto, opts.publicBaseUrl, instanceId, mediaId, opts.linkTtlSeconds),
    read: (mediaId) => readMedia(opts.store, mediaId, opts.readTimeoutMs ?? 30_000),
  };
}
