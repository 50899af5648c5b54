// The MediaStore port: encrypted blobs keyed by media id. Adapters: files in DATA_DIR/media
// (embedded) and a NATS Object Store bucket (cluster). Both encrypt with AES-256-GCM.

export interface MediaStore {
  put(mediaId: string, bytes: Uint8Array): Promise<void>;
  /** Returns the decrypted bytes; rejects with MediaIntegrityError if the stored data was altered,
   *  MediaNotFoundError when absent. */
  get(mediaId: string): Promise<Uint8Array>;
  /** Removes the blob; deleting a missing id is not an error. */
  delete(mediaId: string): Promise<void>;
  /** Optional: removes every blob written before `cutoff`, including ones no database row refers
   *  to (a crash between writing the blob and its row). Stores with their own expiry omit it. */
  purgeOlderThan?(cutoff: Date): Promise<number>;
  close(): Promise<void>;
}

export class MediaNotFoundError extends Error {
  constructor(mediaId: string) {
    super(`media ${mediaId} not found`);
    this.name = 'MediaNotFoundError';
  }
}

export class MediaIntegrityError extends Error {
  constructor(mediaId: string) {
    super(`media ${mediaId} failed its integrity check`);
    this.name = 'MediaIntegrityError';
  }
}
