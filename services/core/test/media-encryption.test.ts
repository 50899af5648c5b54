import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import fc from 'fast-check';
import { Crypto } from '../src/crypto.ts';
import { MEDIA_OVERHEAD_BYTES, MediaCipher } from '../src/media/encryption.ts';
import { collectStream } from '../src/media/stream-util.ts';
import { MediaIntegrityError } from '../src/media/types.ts';

/** Runs bytes through a transform, fed in the given chunk sizes. */
async function throughStream(stream: NodeJS.ReadWriteStream & Readable, bytes: Buffer, chunkSizes: number[]): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let offset = 0;
  for (let i = 0; offset < bytes.length; i++) {
    const size = Math.max(1, chunkSizes[i % chunkSizes.length]);
    chunks.push(bytes.subarray(offset, offset + size));
    offset += size;
  }
  const collected = collectStream(stream);
  collected.catch(() => undefined);
  await pipeline(Readable.from(chunks), stream);
  return collected;
}

describe('media encryption', () => {
  const cipher = new MediaCipher(new Crypto(randomBytes(32)));

  it('round-trips whole buffers and adds a fixed overhead', () => {
    const plain = randomBytes(1000);
    const sealed = cipher.encrypt('med_1', plain);
    assert.equal(sealed.length, plain.length + MEDIA_OVERHEAD_BYTES);
    assert.ok(cipher.decrypt('med_1', sealed).equals(plain));
  });

  it('uses a fresh key per file: the same bytes encrypt differently each time', () => {
    const plain = Buffer.from('same content');
    assert.notDeepEqual(cipher.encrypt('med_1', plain), cipher.encrypt('med_1', plain));
  });

  it('stream and whole-buffer forms are interchangeable, whatever the chunking', async () => {
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ maxLength: 3000 }), fc.array(fc.integer({ min: 1, max: 700 }), { minLength: 1, maxLength: 5 }), async (plainArr, sizes) => {
        const plain = Buffer.from(plainArr);
        const streamed = await throughStream(cipher.encryptStream('med_s'), plain, sizes);
        assert.ok(cipher.decrypt('med_s', streamed).equals(plain));
        const back = await throughStream(cipher.decryptStream('med_s'), cipher.encrypt('med_s', plain), sizes);
        assert.ok(back.equals(plain));
      }),
      { numRuns: 60 },
    );
  });

  it('rejects any single altered byte, in either form', async () => {
    const sealed = cipher.encrypt('med_t', randomBytes(300));
    for (const position of [0, 1, 20, 40, 100, sealed.length - 1]) {
      const altered = Buffer.from(sealed);
      altered[position] ^= 0x80;
      assert.throws(() => cipher.decrypt('med_t', altered), MediaIntegrityError);
      await assert.rejects(throughStream(cipher.decryptStream('med_t'), altered, [64]), MediaIntegrityError);
    }
  });

  it('rejects a blob decrypted under another media id, a truncated blob and another master key', async () => {
    const sealed = cipher.encrypt('med_a', Buffer.from('payload'));
    assert.throws(() => cipher.decrypt('med_b', sealed), MediaIntegrityError);
    assert.throws(() => cipher.decrypt('med_a', sealed.subarray(0, 30)), MediaIntegrityError);
    await assert.rejects(throughStream(cipher.decryptStream('med_a'), sealed.subarray(0, 30), [7]), MediaIntegrityError);
    const other = new MediaCipher(new Crypto(randomBytes(32)));
    assert.throws(() => other.decrypt('med_a', sealed), MediaIntegrityError);
  });
});
