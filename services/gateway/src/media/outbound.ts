// Checks of outbound media done at acceptance, after the request schema passed: the mimetype
// fits the message type, and the base64 content decodes strictly and fits the 32 MiB limit.
import { Problem, problems } from '@switchboard/core';
import { CONVERTIBLE_STICKER_MIMETYPES } from './sticker.ts';

/** The spec's limit: 32 MiB after decoding; exactly 32 MiB is accepted. */
export const MAX_MEDIA_BYTES = 32 * 1024 * 1024;

// RFC 6838 type/subtype names, optionally followed by parameters (e.g. "audio/ogg; codecs=opus").
const TOKEN = "[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}";
const MIME = new RegExp(`^(${TOKEN})/(${TOKEN})(\\s*;\\s*[A-Za-z0-9!#$&^_.+-]+=("[ !#-\\[\\]-~]*"|[A-Za-z0-9!#$&^_.+-]+))*$`);

/**
 * Returns a 400 Problem (errors [{path: 'mimetype'}]) when the mimetype does not suit the message
 * type, or undefined when it does. Types without media (text) are not checked.
 */
export function checkMimetype(type: string, mimetype: string): Problem | undefined {
  const parsed = typeof mimetype === 'string' && mimetype.length <= 255 ? MIME.exec(mimetype.trim()) : null;
  if (!parsed) return mimetypeProblem('must be a valid MIME type such as image/jpeg');
  const [top, sub] = [parsed[1].toLowerCase(), parsed[2].toLowerCase()];
  switch (type) {
    case 'image':
    case 'video':
    case 'audio':
      return top === type ? undefined : mimetypeProblem(`must be of the form ${type}/* for type "${type}"`);
    case 'sticker':
      return top === 'image' && (sub === 'webp' || CONVERTIBLE_STICKER_MIMETYPES.has(`image/${sub}`))
        ? undefined
        : mimetypeProblem('must be image/webp, or image/png, image/jpeg, image/gif, image/bmp or image/tiff (converted to WebP), for type "sticker"');
    default: // document (any valid type) and non-media types
      return undefined;
  }
}

/** checkMimetype that throws its Problem; returns the mimetype as stored and served: trimmed, its
 *  type and subtype lowercased (they are case-insensitive, RFC 2045), its parameters as given. */
export function assertMimetype(type: string, mimetype: string): string {
  const problem = checkMimetype(type, mimetype);
  if (problem) throw problem;
  return canonicalMimetype(mimetype);
}

/** The type/subtype of a mimetype as stored (canonicalMimetype), without its parameters. */
export function mimetypeEssence(canonical: string): string {
  return canonical.split(';', 1)[0];
}

/** The mimetype as stored: without blanks around it, its type/subtype in lower case. */
export function canonicalMimetype(mimetype: string): string {
  const trimmed = mimetype.trim();
  const end = trimmed.search(/[\s;]/);
  const essenceEnd = end === -1 ? trimmed.length : end;
  return trimmed.slice(0, essenceEnd).toLowerCase() + trimmed.slice(essenceEnd);
}

/**
 * Decodes standard base64 (RFC 4648 §4, with padding, no whitespace, no data: prefix) into bytes.
 * Throws Problem 400 `invalid_base64` or Problem 413 `media_too_large`; the size is worked out
 * from the string length before anything is decoded, so a huge value costs almost nothing.
 */
export function decodeBase64Strict(b64: string, maxBytes = MAX_MEDIA_BYTES): Buffer {
  if (typeof b64 !== 'string' || b64.length === 0) throw invalidBase64('must be non-empty base64 content');
  if (/^data:/i.test(b64)) throw invalidBase64('must be plain base64 without a "data:...;base64," prefix');
  if (decodedSize(b64) > maxBytes) {
    throw new Problem(413, 'media_too_large', `The media exceeds ${maxBytes} bytes after decoding.`, [
      { path: 'base64', message: `must decode to at most ${maxBytes} bytes` },
    ]);
  }
  if (b64.length % 4 !== 0 || !/^[A-Za-z0-9+/]*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(b64)) {
    throw invalidBase64('must be standard base64 (A-Z, a-z, 0-9, +, /) with correct "=" padding and no whitespace');
  }
  const bytes = Buffer.from(b64, 'base64');
  // Non-zero bits in the last character's unused part mean the text is not canonical base64.
  if (!endsCanonically(b64, bytes)) throw invalidBase64('is not canonical base64 (unused bits of the last character are set)');
  return bytes;
}

/** Decoded size implied by the length and padding (an upper bound for malformed input). */
function decodedSize(b64: string): number {
  return Math.floor((b64.length * 3) / 4) - paddingOf(b64);
}

function paddingOf(b64: string): number {
  return b64.endsWith('==') ? 2 : b64.endsWith('=') ? 1 : 0;
}

/** The last 4 characters must be exactly what re-encoding their 1 to 3 bytes gives back. */
function endsCanonically(b64: string, bytes: Buffer): boolean {
  if (b64.length === 0) return true;
  const lastGroup = bytes.subarray(bytes.length - (3 - paddingOf(b64)));
  return lastGroup.toString('base64') === b64.slice(-4);
}

function mimetypeProblem(message: string): Problem {
  return problems.validation([{ path: 'mimetype', message }], `The mimetype ${message}.`);
}

function invalidBase64(message: string): Problem {
  return new Problem(400, 'invalid_base64', `The base64 field ${message}.`, [{ path: 'base64', message }]);
}
