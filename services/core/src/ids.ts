// Identifiers. Instance and project ids are valid Kubernetes names (DESIGN §5); all ids are opaque.
import { randomFillSync } from 'node:crypto';

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz';
/** The largest multiple of 36 that fits a byte: bytes at or above it are skipped, so every
 *  character is equally likely. */
const UNBIASED_LIMIT = 252;

/**
 * Random bytes taken from a pool refilled 4 KiB at a time: one call into OpenSSL per hundreds of
 * ids instead of one per id (a send takes two). Each byte is handed out once.
 */
class RandomPool {
  private readonly bytes = Buffer.alloc(4096);
  private at = this.bytes.length;

  next(): number {
    if (this.at === this.bytes.length) {
      randomFillSync(this.bytes);
      this.at = 0;
    }
    return this.bytes[this.at++];
  }
}

const pool = new RandomPool();

function randomChars(n: number): string {
  let out = '';
  while (out.length < n) {
    const byte = pool.next();
    if (byte < UNBIASED_LIMIT) out += ALPHABET[byte % 36];
  }
  return out;
}

function randomHex(bytes: number): string {
  let out = '';
  for (let i = 0; i < bytes; i++) out += pool.next().toString(16).padStart(2, '0');
  return out;
}

/**
 * The time and random parts of newId. An id made in the same millisecond as the previous one (or
 * after the clock stepped back) keeps that millisecond and adds a random step of 1–256 to the
 * previous random part, so ids of one process sort in the order they were made: rows written in
 * one millisecond, such as the events of one send, list in the order they happened.
 */
class IdSequence {
  private millis = -1;
  private digits: number[] = [];

  next(): string {
    const now = Date.now();
    if (now > this.millis || !this.advance(1 + pool.next())) {
      this.millis = Math.max(now, this.millis + 1);
      this.digits = Array.from(randomChars(12), (c) => ALPHABET.indexOf(c));
    }
    return this.millis.toString(36).padStart(9, '0') + this.digits.map((d) => ALPHABET[d]).join('');
  }

  /** Adds `step` to the base-36 digits; false when they would overflow. */
  private advance(step: number): boolean {
    let carry = step;
    for (let i = this.digits.length - 1; i >= 0 && carry > 0; i--) {
      const sum = this.digits[i] + carry;
      this.digits[i] = sum % 36;
      carry = Math.floor(sum / 36);
    }
    return carry === 0;
  }
}

const sequence = new IdSequence();

/** Time-ordered id: 9 chars of milliseconds in base 36, then 12 of randomness. Sorts by creation. */
export function newId(prefix: string): string {
  return `${prefix}_${sequence.next()}`;
}

/** An id that is also a valid Kubernetes object name (≤ 40 chars, [a-z0-9-]). */
export function newResourceId(prefix: 'inst' | 'proj'): string {
  return `${prefix}-${randomChars(14)}`;
}

export const RESOURCE_ID = /^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$/;

/** A network message id in the shape WhatsApp Web's own have (3EB0 + 18 upper-case hex digits,
 *  as Baileys makes them), reserved before sending. Recipients' apps tell the sending client by
 *  the id's shape; another length would mark our messages as from an unknown client. */
export function newMessengerId(): string {
  return `3EB0${randomHex(9).toUpperCase()}`;
}
