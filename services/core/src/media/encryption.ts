// Media encryption at rest (DESIGN §5 "Media"): AES-256-GCM with a fresh data key per file.
//
// Stored layout:  version (1 byte) | salt (32 bytes) | ciphertext | GCM tag (16 bytes)
// The data key and nonce come from HKDF(media sub-key, salt): a random salt per file means no
// key/nonce pair is ever reused, however many files are written. The media id is bound as
// additional authenticated data, so a blob copied under another id also fails its check.
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes, type CipherGCM, type DecipherGCM } from 'node:crypto';
import { Transform, type TransformCallback } from 'node:stream';
import type { Crypto } from '../crypto.ts';
import { MediaIntegrityError } from './types.ts';

const VERSION = 1;
const SALT_BYTES = 32;
const TAG_BYTES = 16;
const HEADER_BYTES = 1 + SALT_BYTES;
/** Bytes an encrypted file has beyond its plaintext. */
export const MEDIA_OVERHEAD_BYTES = HEADER_BYTES + TAG_BYTES;

export class MediaCipher {
  private readonly mediaKey: Buffer;

  constructor(crypto: Crypto) {
    this.mediaKey = crypto.subKey('media');
  }

  /** Encrypts a whole file at once. */
  encrypt(mediaId: string, plaintext: Uint8Array): Buffer {
    const { header, cipher } = this.startCipher(mediaId);
    return Buffer.concat([header, cipher.update(plaintext), cipher.final(), cipher.getAuthTag()]);
  }

  /** Decrypts a whole file; throws MediaIntegrityError when anything in it was altered. */
  decrypt(mediaId: string, sealed: Uint8Array): Buffer {
    const data = Buffer.from(sealed.buffer, sealed.byteOffset, sealed.byteLength);
    if (data.length < MEDIA_OVERHEAD_BYTES) throw new MediaIntegrityError(mediaId);
    const decipher = this.startDecipher(mediaId, data.subarray(0, HEADER_BYTES));
    decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
    try {
      return Buffer.concat([decipher.update(data.subarray(HEADER_BYTES, data.length - TAG_BYTES)), decipher.final()]);
    } catch {
      throw new MediaIntegrityError(mediaId);
    }
  }

  /** A stream that turns plaintext into the stored layout (header first, tag last). */
  encryptStream(mediaId: string): Transform {
    const { header, cipher } = this.startCipher(mediaId);
    let headerSent = false;
    return new Transform({
      transform(chunk: Buffer, _enc, done: TransformCallback) {
        if (!headerSent) {
          this.push(header);
          headerSent = true;
        }
        done(null, cipher.update(chunk));
      },
      flush(done: TransformCallback) {
        if (!headerSent) this.push(header);
        this.push(cipher.final());
        done(null, cipher.getAuthTag());
      },
    });
  }

  /**
   * A stream that turns the stored layout back into plaintext. The tag sits at the end, so the
   * last 16 bytes are always held back; the stream fails with MediaIntegrityError at its end if
   * the tag does not match. Output is trustworthy only once the stream ended without error.
   */
  decryptStream(mediaId: string): Transform {
    let pending: Buffer = Buffer.alloc(0); // bytes not yet passed to the decipher (header or tail)
    let decipher: DecipherGCM | undefined;
    const startDecipher = (header: Buffer) => this.startDecipher(mediaId, header);
    return new Transform({
      transform(chunk: Buffer, _enc, done: TransformCallback) {
        pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
        if (!decipher) {
          if (pending.length < HEADER_BYTES) return done();
          try {
            decipher = startDecipher(pending.subarray(0, HEADER_BYTES));
          } catch (err) {
            return done(err as Error);
          }
          pending = pending.subarray(HEADER_BYTES);
        }
        if (pending.length <= TAG_BYTES) return done();
        const ready = pending.subarray(0, pending.length - TAG_BYTES);
        pending = Buffer.from(pending.subarray(pending.length - TAG_BYTES));
        done(null, decipher.update(ready));
      },
      flush(done: TransformCallback) {
        if (!decipher || pending.length !== TAG_BYTES) return done(new MediaIntegrityError(mediaId));
        try {
          decipher.setAuthTag(pending);
          done(null, decipher.final());
        } catch {
          done(new MediaIntegrityError(mediaId));
        }
      },
    });
  }

  private startCipher(mediaId: string): { header: Buffer; cipher: CipherGCM } {
    const salt = randomBytes(SALT_BYTES);
    const { key, iv } = this.fileKey(salt);
    const cipher = createCipheriv('aes-256-gcm', key, iv);
    cipher.setAAD(aad(mediaId));
    return { header: Buffer.concat([Buffer.from([VERSION]), salt]), cipher };
  }

  private startDecipher(mediaId: string, header: Buffer): DecipherGCM {
    if (header[0] !== VERSION) throw new MediaIntegrityError(mediaId);
    const { key, iv } = this.fileKey(header.subarray(1, HEADER_BYTES));
    const decipher = createDecipheriv('aes-256-gcm', key, iv);
    decipher.setAAD(aad(mediaId));
    return decipher;
  }

  private fileKey(salt: Buffer): { key: Buffer; iv: Buffer } {
    const okm = Buffer.from(hkdfSync('sha256', this.mediaKey, salt, 'switchboard/media-file', 44));
    return { key: okm.subarray(0, 32), iv: okm.subarray(32, 44) };
  }
}

function aad(mediaId: string): Buffer {
  return Buffer.from(`switchboard-media:${mediaId}`, 'utf8');
}
