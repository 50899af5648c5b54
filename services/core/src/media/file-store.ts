// MediaStore adapter for the embedded mode: one encrypted file per media id under
// <dataDir>/media. Writes go to a temporary file that is flushed and then renamed over the
// final name, so a reader (or a crash) never sees half a file.
import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Crypto } from '../crypto.ts';
import { ensureDirectory } from '../directories.ts';
import { MediaCipher } from './encryption.ts';
import { collectStream, inChunks, isSafeMediaId } from './stream-util.ts';
import { MediaNotFoundError, type MediaStore } from './types.ts';

const TEMP_PREFIX = '.tmp-';

export class FileMediaStore implements MediaStore {
  private readonly cipher: MediaCipher;
  private readonly ready: Promise<unknown>;

  /** `dir` is the media directory itself (openMediaStore passes `<dataDir>/media`). */
  constructor(
    private readonly dir: string,
    crypto: Crypto,
  ) {
    this.cipher = new MediaCipher(crypto);
    this.ready = Promise.resolve().then(() => ensureDirectory(dir, 0o700));
  }

  async put(mediaId: string, bytes: Uint8Array): Promise<void> {
    if (!isSafeMediaId(mediaId)) throw new Error('media id may only contain letters, digits, "_", "-" and "."');
    await this.ready;
    const temp = join(this.dir, `${TEMP_PREFIX}${mediaId}-${randomBytes(6).toString('hex')}`);
    const file = await open(temp, 'wx', 0o600);
    try {
      for await (const chunk of Readable.from(inChunks(bytes)).pipe(this.cipher.encryptStream(mediaId))) {
        await file.write(chunk as Buffer);
      }
      await file.sync(); // the data must be on disk before the rename makes it visible
      await file.close();
      await rename(temp, this.path(mediaId));
    } catch (err) {
      await file.close().catch(() => undefined);
      await rm(temp, { force: true });
      throw err;
    }
  }

  async get(mediaId: string): Promise<Uint8Array> {
    if (!isSafeMediaId(mediaId)) throw new MediaNotFoundError(mediaId);
    await this.ready;
    const decrypt = this.cipher.decryptStream(mediaId);
    const collected = collectStream(decrypt);
    try {
      await pipeline(createReadStream(this.path(mediaId)), decrypt);
    } catch (err) {
      collected.catch(() => undefined);
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new MediaNotFoundError(mediaId);
      throw err;
    }
    return collected;
  }

  async delete(mediaId: string): Promise<void> {
    if (!isSafeMediaId(mediaId)) return;
    await this.ready;
    await rm(this.path(mediaId), { force: true });
  }

  /** Removes files written before `cutoff`, including blobs whose database row never got written
   *  (a crash between the two) and leftover temporary files. Returns how many were removed. */
  async purgeOlderThan(cutoff: Date): Promise<number> {
    await this.ready;
    let removed = 0;
    for (const name of await readdir(this.dir)) {
      const path = join(this.dir, name);
      const info = await stat(path).catch(() => undefined);
      if (info?.isFile() && info.mtimeMs < cutoff.getTime()) {
        await rm(path, { force: true });
        removed++;
      }
    }
    return removed;
  }

  async close(): Promise<void> {
    // Nothing is held open between calls.
  }

  /** Where a media id's file lives (tests use it to tamper with stored bytes). */
  path(mediaId: string): string {
    return join(this.dir, mediaId);
  }
}
