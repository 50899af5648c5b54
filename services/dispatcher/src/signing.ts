// Webhook signatures (DESIGN §5 "Webhook delivery"). The receiver recomputes
// HMAC-SHA256(secret, timestamp + "." + rawBody) over the exact bytes it received, so the body is
// signed as bytes, never re-serialised. The key is the secret string's UTF-8 bytes, exactly as the
// API returns it.
import { createHmac, timingSafeEqual } from 'node:crypto';

export const SIGNATURE_PREFIX = 'sha256=';

/** Hex HMAC-SHA256 of `<timestamp>.<rawBody>` keyed with the secret's UTF-8 bytes. */
export function computeSignature(secret: string, timestamp: string | number, rawBody: string | Uint8Array): string {
  return createHmac('sha256', Buffer.from(secret, 'utf8'))
    .update(`${timestamp}.`, 'utf8')
    .update(typeof rawBody === 'string' ? Buffer.from(rawBody, 'utf8') : rawBody)
    .digest('hex');
}

export interface SignedAttempt {
  eventId: string;
  secret: string;
  rawBody: string | Uint8Array;
  /** Unix seconds; defaults to now. A fresh value is used for every attempt. */
  timestamp?: number;
}

/** The request headers of one delivery attempt. */
export function signatureHeaders(attempt: SignedAttempt): Record<string, string> {
  const timestamp = attempt.timestamp ?? Math.floor(Date.now() / 1000);
  return {
    'content-type': 'application/json',
    'x-service-event-id': attempt.eventId,
    'x-service-timestamp': String(timestamp),
    'x-service-signature': SIGNATURE_PREFIX + computeSignature(attempt.secret, timestamp, attempt.rawBody),
  };
}

/**
 * What a receiver does before parsing the body: checks the timestamp is recent (both ways, to
 * tolerate small clock skew) and compares the signature in constant time.
 */
export function verifySignature(
  secret: string,
  timestamp: string,
  rawBody: string | Uint8Array,
  header: string,
  maxAgeSeconds: number,
  nowMs: number = Date.now(),
): boolean {
  if (!/^\d{1,12}$/.test(timestamp) || !header.startsWith(SIGNATURE_PREFIX)) return false;
  if (Math.abs(nowMs / 1000 - Number(timestamp)) > maxAgeSeconds) return false;
  const expected = Buffer.from(computeSignature(secret, timestamp, rawBody), 'hex');
  const given = Buffer.from(header.slice(SIGNATURE_PREFIX.length), 'hex');
  return given.length === expected.length && timingSafeEqual(given, expected);
}
