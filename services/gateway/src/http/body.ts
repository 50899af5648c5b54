// JSON request bodies, read with a size limit. A declared Content-Length over the limit is
// refused before reading a byte; a chunked body is cut off as soon as it passes the limit.
import type { Context } from 'koa';
import { Problem, problems } from '@switchboard/core';

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
  try {
    return JSON.parse(text);
  } catch {
    throw problems.badRequest('invalid_json', 'The request body is not valid JSON.');
  }
}

/** Read as it came, a compressed body would only fail as JSON. Node decodes only the chunked
 *  transfer coding, and hands over a gzip one as it came too. */
function declaresCompression(ctx: Context): boolean {
  const transferCodings = ctx.get('transfer-encoding').toLowerCase().split(',').map((c) => c.trim()).filter(Boolean);
  return !['', 'identity'].includes(ctx.get('content-encoding').trim().toLowerCase()) || transferCodings.some((c) => c !== 'chunked');
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

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
