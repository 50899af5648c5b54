// Small helpers shared by the media store adapters.
import type { Readable } from 'node:stream';

const CHUNK_BYTES = 1024 * 1024;

/** Views of `bytes` in 1 MiB slices (no copies), so encryption streams instead of working on
 *  one huge buffer. Yields nothing for an empty array. */
export function* inChunks(bytes: Uint8Array, size = CHUNK_BYTES): Generator<Uint8Array> {
  if (bytes.byteLength === 0) return;
  for (let offset = 0; offset < bytes.byteLength; offset += size) {
    yield bytes.subarray(offset, Math.min(offset + size, bytes.byteLength));
  }
}

/** Resolves with everything a stream produced, or rejects with its error. */
export function collectStream(stream: Readable): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    stream.on('data', (chunk: Buffer) => parts.push(chunk));
    stream.once('error', reject);
    stream.once('end', () => resolve(Buffer.concat(parts)));
  });
}

/** Media ids become file names and object names: keep them to a safe alphabet. */
export function isSafeMediaId(mediaId: string): boolean {
  return /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$/.test(mediaId);
}
