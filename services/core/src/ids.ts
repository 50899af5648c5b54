// Identifiers. Instance and project ids are valid Kubernetes names (DESIGN §5); all ids are opaque.
import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz';

function randomChars(n: number): string {
  const bytes = randomBytes(n);
  let out = '';
  for (let i = 0; i < n; i++) out += ALPHABET[bytes[i] % 36];
  return out;
}

/** Time-ordered id: 9 chars of milliseconds in base 36, then randomness. Sorts by creation. */
export function newId(prefix: string): string {
  return `${prefix}_${Date.now().toString(36).padStart(9, '0')}${randomChars(12)}`;
}

/** An id that is also a valid Kubernetes object name (≤ 40 chars, [a-z0-9-]). */
export function newResourceId(prefix: 'inst' | 'proj'): string {
  return `${prefix}-${randomChars(14)}`;
}

export const RESOURCE_ID = /^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$/;

/** A network message id in WhatsApp's own shape (3EB0 + upper-case hex), reserved before sending. */
export function newMessengerId(): string {
  return `3EB0${randomBytes(10).toString('hex').toUpperCase()}`;
}
