// Secrets at rest: tokens are stored as keyed hashes; values the administrator must be able to
// recover (instance tokens, webhook secrets, auth state) are sealed with AES-256-GCM.
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';

export class Crypto {
  private readonly sealKey: Buffer;
  private readonly hashKey: Buffer;
  private readonly linkKey: Buffer;

  constructor(masterKey: Buffer) {
    if (masterKey.length !== 32) throw new Error('encryption key must be 32 bytes');
    this.sealKey = derive(masterKey, 'switchboard/seal');
    this.hashKey = derive(masterKey, 'switchboard/token-hash');
    this.linkKey = derive(masterKey, 'switchboard/media-link');
    this.master = masterKey;
  }

  private readonly master: Buffer;

  /** A sub-key for a purpose of its own (media file keys, for example). */
  subKey(purpose: string): Buffer {
    return derive(this.master, `switchboard/${purpose}`);
  }

  /** Keyed hash of a token, for lookups; the token itself cannot be recovered from it. */
  hashToken(token: string): string {
    return createHmac('sha256', this.hashKey).update(token, 'utf8').digest('hex');
  }

  seal(plaintext: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.sealKey, iv);
    const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64');
  }

  open(sealed: string): string {
    const raw = Buffer.from(sealed, 'base64');
    const decipher = createDecipheriv('aes-256-gcm', this.sealKey, raw.subarray(0, 12));
    decipher.setAuthTag(raw.subarray(12, 28));
    return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
  }

  /** Names the key without revealing it: what the database records to tell a process started
   *  with another key (encryption-key-check.ts). */
  keyFingerprint(): string {
    return createHmac('sha256', this.subKey('key-check')).update('switchboard encryption key').digest('hex');
  }

  /** HMAC for signed media links. */
  signLink(message: string): string {
    return createHmac('sha256', this.linkKey).update(message, 'utf8').digest('hex');
  }
}

function derive(master: Buffer, info: string): Buffer {
  return Buffer.from(hkdfSync('sha256', master, Buffer.alloc(0), info, 32));
}

export function randomToken(prefix: string, bytes = 24): string {
  return `${prefix}_${randomBytes(bytes).toString('base64url')}`;
}

/** Constant-time comparison of two strings of any length. */
export function safeEqual(a: string, b: string): boolean {
  const ha = createHmac('sha256', 'compare').update(a).digest();
  const hb = createHmac('sha256', 'compare').update(b).digest();
  return timingSafeEqual(ha, hb) && a.length === b.length;
}

/** Prefixes that tell credential kinds apart at a glance (and let auth skip needless lookups). */
export const TOKEN_PREFIXES = { instance: 'sbi', integration: 'sbk', admin: 'sba', webhookSecret: 'whsec' } as const;
