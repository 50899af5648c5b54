// The behaviour every MediaStore adapter must have. Each adapter's test file calls
// describeMediaStoreContract with a fixture that also gives raw access to what is stored, so the
// suite can check that blobs are encrypted and that tampering is detected.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { MediaIntegrityError, MediaNotFoundError, type MediaStore } from '../src/media/types.ts';

export interface MediaStoreFixture {
  store: MediaStore;
  /** The bytes exactly as stored (encrypted). */
  readRaw(mediaId: string): Promise<Buffer>;
  /** Replaces the stored bytes behind the store's back. */
  writeRaw(mediaId: string, bytes: Buffer): Promise<void>;
  cleanup(): Promise<void>;
}

let counter = 0;
function freshId(): string {
  return `med_contract${Date.now().toString(36)}${counter++}`;
}

export function describeMediaStoreContract(name: string, setup: () => Promise<MediaStoreFixture>): void {
  describe(`MediaStore contract: ${name}`, function () {
    this.timeout(30_000);
    let f: MediaStoreFixture;

    before(async () => {
      f = await setup();
    });
    after(async () => {
      await f?.cleanup();
    });

    for (const [label, size] of [
      ['0 bytes', 0],
      ['a small file', 1234],
      ['several MiB', 5 * 1024 * 1024 + 17],
    ] as const) {
      it(`round-trips ${label}`, async () => {
        const id = freshId();
        const bytes = randomBytes(size);
        await f.store.put(id, bytes);
        const back = await f.store.get(id);
        assert.equal(back.byteLength, size);
        assert.ok(Buffer.from(back).equals(bytes));
      });
    }

    it('stores the bytes encrypted', async () => {
      const id = freshId();
      const plaintext = Buffer.from('a recognisable plaintext that must not be stored as is '.repeat(20));
      await f.store.put(id, plaintext);
      const raw = await f.readRaw(id);
      assert.equal(raw.includes(plaintext.subarray(0, 40)), false);
      assert.ok(raw.length > plaintext.length, 'the stored form carries a header and a tag');
    });

    it('overwrites an existing id', async () => {
      const id = freshId();
      await f.store.put(id, Buffer.from('first version'));
      await f.store.put(id, Buffer.from('second'));
      assert.equal(Buffer.from(await f.store.get(id)).toString(), 'second');
    });

    it('deletes, and deleting again is not an error', async () => {
      const id = freshId();
      await f.store.put(id, Buffer.from('short-lived'));
      await f.store.delete(id);
      await assert.rejects(f.store.get(id), MediaNotFoundError);
      await f.store.delete(id);
    });

    it('rejects a get of a missing id with MediaNotFoundError', async () => {
      await assert.rejects(f.store.get(freshId()), MediaNotFoundError);
      await assert.rejects(f.store.get('../../etc/passwd'), MediaNotFoundError);
    });

    it('detects a tampered stored byte', async () => {
      const id = freshId();
      await f.store.put(id, randomBytes(200_000));
      const raw = await f.readRaw(id);
      raw[Math.floor(raw.length / 2)] ^= 0x01;
      await f.writeRaw(id, raw);
      await assert.rejects(f.store.get(id), MediaIntegrityError);
    });

    it('detects a truncated blob and a blob moved to another id', async () => {
      const a = freshId();
      const b = freshId();
      await f.store.put(a, Buffer.from('belongs to a'));
      await f.store.put(b, Buffer.from('belongs to b'));
      const rawA = await f.readRaw(a);
      await f.writeRaw(b, rawA); // a valid blob, but encrypted for another id
      await assert.rejects(f.store.get(b), MediaIntegrityError);
      await f.writeRaw(a, rawA.subarray(0, 20));
      await assert.rejects(f.store.get(a), MediaIntegrityError);
    });
  });
}
