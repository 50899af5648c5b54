// Media: encrypted storage (files or NATS Object Store), records, signed links and retention.
export * from './types.ts';
export { MediaCipher, MEDIA_OVERHEAD_BYTES } from './encryption.ts';
export { FileMediaStore } from './file-store.ts';
export { NatsMediaStore, natsMediaBucketName, DEFAULT_MEDIA_TTL_MS, type NatsMediaStoreOptions } from './nats-store.ts';
export { openMediaStore, type OpenMediaStoreOptions } from './open.ts';
export { SANDBOX_BASE64, STAGED_MEDIA_FIELD, STAGED_MEDIA_ID, STAGE_MEDIA_ABOVE_CHARS, newStagedMediaId } from './staged-media.ts';
export {
  storeMedia,
  discardMedia,
  getMediaRecord,
  readMedia,
  mediaLink,
  verifyMediaLink,
  mediaStats,
  type MediaRecord,
  type MediaDirection,
  type NewMedia,
} from './records.ts';
export { drainMediaPurge, startMediaRetention, type MediaRetention, type MediaRetentionOptions } from './retention.ts';
