// JSON request bodies, read with a size limit. A declared Content-Length over the limit is
// refused before reading a byte; a chunked body is cut off as soon as it passes the limit.
import type { Context } from 'koa';
import { Problem, problems } from '@switchboard/core';
import { MAX_DEPTH, MAX_VALUES, tooDeep, tooManyValues } from '../storable-input.ts';

export const DEFAULT_BODY_LIMIT = 1024 * 1024;

export async function readJsonBody(ctx: Context, limit: number): Promise<unknown> {
  const declared = Number(ctx.get('content-length') || NaN);
  if (declared > limit) throw tooLarge(limit);
  const raw = await readLimited(ctx, limit);
  if (raw.length === 0) return undefined;
  if (!declaresJson(ctx.get('content-type'))) {
    throw problems.badRequest('unsupported_content_type', 'JSON request bodies must be sent with Content-Type: application/json.');
  }
  if (declaresCompression(ctx)) {
    throw problems.badRequest('unsupported_content_encoding', 'Request bodies must not be compressed: send them without Content-Encoding.');
  }
  // JSON is UTF-8 (RFC 8259 §8.1; a charset parameter has no effect, §11): bytes that are not
  // are refused rather than stored with their letters replaced.
  let text: string;
  try {
    text = strictUtf8.decode(raw);
  } catch {
    throw problems.badRequest('invalid_json', 'The request body is not valid UTF-8 (JSON is always UTF-8, whatever charset is declared).');
  }
  assertParsableShape(text);
  try {
    return JSON.parse(text);
  } catch {
    throw problems.badRequest('invalid_json', 'The request body is not valid JSON.');
  }
}

const [QUOTE, BACKSLASH, COMMA] = [0x22, 0x5c, 0x2c];
const [OPEN_BRACKET, CLOSE_BRACKET, OPEN_BRACE, CLOSE_BRACE] = [0x5b, 0x5d, 0x7b, 0x7d];

/**
 * Refuses, before parsing, a body nested deeper or with more values than any request has: parsing
 * 40 MB of nested brackets or empty keys holds the event loop for seconds, for every tenant of the
 * process. Counts commas and opening brackets outside strings; strings are skipped whole, so a
 * media body's long base64 costs a few searches, not a loop over its characters.
 */
function assertParsableShape(text: string): void {
  let depth = 0;
  let values = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      i = closingQuote(text, i);
    } else if (c === CLOSE_BRACKET || c === CLOSE_BRACE) {
      depth--;
    } else if (c === OPEN_BRACKET || c === OPEN_BRACE || c === COMMA) {
      // A container is a value too.
      if (c !== COMMA && ++depth > MAX_DEPTH) throw tooDeep('body');
      if (++values > MAX_VALUES) throw tooManyValues('body');
    }
  }
}

/** Where the string opened at `open` ends (the text's end if it never does: JSON.parse says why). */
function closingQuote(text: string, open: number): number {
  let at = text.indexOf('"', open + 1);
  while (at !== -1 && escaped(text, at)) at = text.indexOf('"', at + 1);
  return at === -1 ? text.length : at;
}

/** An odd run of backslashes before a quote escapes it. */
function escaped(text: string, at: number): boolean {
  let run = 0;
  while (text.charCodeAt(at - 1 - run) === BACKSLASH) run++;
  return run % 2 === 1;
}

/** Read as it came, a compressed body would only fail as JSON. Node decodes only the chunked
 *  transfer coding, and hands over a gzip one as it came too. */
function declaresCompression(ctx: Context): boolean {
  const transferCodings = ctx.get('transfer-encoding').toLowerCase().split(',').map((c) => c.trim()).filter(Boolean);
  return !['', 'identity'].includes(ctx.get('content-encoding').trim().toLowerCase()) || transferCodings.some((c) => c !== 'chunked');
}

// A leading byte order mark is dropped (RFC 8259 §8.1 lets parsers ignore it; some clients add one).
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** The spec's bodies are JSON: application/json or a +json type; a body without a declared type
 *  is read as JSON. A declared type that is not a media type at all (`;;;`) is not. */
function declaresJson(contentType: string): boolean {
  if (contentType.trim() === '') return true;
  const mediaType = contentType.split(';')[0].trim().toLowerCase();
  return mediaType === 'application/json' || /^[a-z0-9][\w!#$&^.+-]*\/[\w!#$&^.+-]+\+json$/.test(mediaType);
}

function tooLarge(limit: number): Problem {
  return new Problem(413, 'body_too_large', `The request body exceeds ${limit} bytes.`);
}

function readLimited(ctx: Context, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const req = ctx.req;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        req.resume(); // discard the rest; the connection is closed after the response
        ctx.set('Connection', 'close');
        reject(tooLarge(limit));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(Buffer.concat(chunks, size));
    };
    const onError = (err: Error) => {
      cleanup();
      reject(new Problem(400, 'body_unreadable', `The request body could not be read: ${err.message}`));
    };
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
  });
}
