import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Crypto } from '../src/crypto.ts';
import { FileMediaStore } from '../src/media/file-store.ts';
import { openMediaStore } from '../src/media/open.ts';
import { describeMediaStoreContract } from './media-store-contract.ts';

describeMediaStoreContract('FileMediaStore', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sb-media-file-'));
  const store = new FileMediaStore(join(dir, 'media'), new Crypto(randomBytes(32)));
  return {
    store,
    readRaw: (id) => readFile(store.path(id)),
    writeRaw: (id, bytes) => writeFile(store.path(id), bytes),
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
});

describe('FileMediaStore specifics', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sb-media-file-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('openMediaStore without a NATS URL keeps files in <dataDir>/media and leaves no temp files', async () => {
    const store = await openMediaStore({ namespace: '', dataDir: dir, crypto: new Crypto(randomBytes(32)) });
    assert.ok(store instanceof FileMediaStore);
    await store.put('med_a', Buffer.from('hello'));
    await store.put('med_a', Buffer.from('hello again'));
    assert.deepEqual(await readdir(join(dir, 'media')), ['med_a']);
    await store.close();
  });

  it('cannot read a file written with another master key', async () => {
    const mediaDir = join(dir, 'media');
    await new FileMediaStore(mediaDir, new Crypto(randomBytes(32))).put('med_k', Buffer.from('secret'));
    const other = new FileMediaStore(mediaDir, new Crypto(randomBytes(32)));
    await assert.rejects(other.get('med_k'), { name: 'MediaIntegrityError' });
  });

  it('refuses ids that are not safe file names', async () => {
    const store = new FileMediaStore(join(dir, 'media'), new Crypto(randomBytes(32)));
    await assert.rejects(store.put('../escape', Buffer.from('x')), /media id/);
    await assert.rejects(store.put('.hidden', Buffer.from('x')), /media id/);
  });

  it('purgeOlderThan removes old blobs and leftover temp files, keeps recent ones', async () => {
    const store = new FileMediaStore(join(dir, 'media'), new Crypto(randomBytes(32)));
    await store.put('med_old', Buffer.from('old'));
    await store.put('med_new', Buffer.from('new'));
    const temp = join(dir, 'media', '.tmp-med_crashed-abc');
    await writeFile(temp, 'partial');
    const longAgo = new Date(Date.now() - 10 * 86_400_000);
    await utimes(store.path('med_old'), longAgo, longAgo);
    await utimes(temp, longAgo, longAgo);
    assert.equal(await store.purgeOlderThan(new Date(Date.now() - 86_400_000)), 2);
    assert.deepEqual(await readdir(join(dir, 'media')), ['med_new']);
  });
});
