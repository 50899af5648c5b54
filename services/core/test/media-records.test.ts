import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestDatabase } from '../../../test/support/services.ts';
import { Crypto } from '../src/crypto.ts';
import { openDatabase, migrate, type Db } from '../src/db/connect.ts';
import { Problem } from '../src/problem.ts';
import { FileMediaStore } from '../src/media/file-store.ts';
import { getMediaRecord, mediaLink, mediaStats, readMedia, storeMedia, verifyMediaLink } from '../src/media/records.ts';
import { drainMediaPurge, startMediaRetention } from '../src/media/retention.ts';
import { MediaNotFoundError, type MediaStore } from '../src/media/types.ts';

const silentLog = { info() {}, warn() {}, error() {} };

async function addInstance(db: Db, id: string): Promise<void> {
  await db('instances').insert({ id, name: id, token_hash: randomBytes(16).toString('hex'), token_sealed: 'x' });
}

describe('media records, links and retention', function () {
  this.timeout(30_000);
  let database: { url: string; drop(): Promise<void> };
  let db: Db;
  let dir: string;
  let store: FileMediaStore;
  const crypto = new Crypto(randomBytes(32));

  before(async () => {
    database = await createTestDatabase();
    db = openDatabase({ databaseUrl: database.url, dataDir: '/nonexistent' });
    await migrate(db);
    await addInstance(db, 'inst-a');
    await addInstance(db, 'inst-b');
    dir = await mkdtemp(join(tmpdir(), 'sb-media-records-'));
    store = new FileMediaStore(join(dir, 'media'), crypto);
  });
  after(async () => {
    await db?.destroy();
    await database?.drop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  beforeEach(async () => {
    await db('media').delete();
  });

  describe('storeMedia / getMediaRecord / readMedia', () => {
    it('stores the row and the blob and reads them back', async () => {
      const bytes = randomBytes(5000);
      const rec = await storeMedia(db, store, {
        instanceId: 'inst-a',
        direction: 'inbound',
        mimetype: 'audio/ogg; codecs=opus',
        fileName: 'voice.ogg',
        seconds: 3.4,
        voiceNote: true,
        bytes,
      });
      assert.match(rec.id, /^med_/);
      assert.deepEqual(
        { ...rec, createdAt: undefined },
        {
          id: rec.id,
          instanceId: 'inst-a',
          direction: 'inbound',
          mimetype: 'audio/ogg; codecs=opus',
          fileName: 'voice.ogg',
          size: 5000,
          sha256: createHash('sha256').update(bytes).digest('hex'),
          seconds: 3,
          voiceNote: true,
          createdAt: undefined,
        },
      );
      assert.ok(!Number.isNaN(Date.parse(rec.createdAt)));
      assert.deepEqual(await getMediaRecord(db, 'inst-a', rec.id), rec);
      assert.ok(Buffer.from(await readMedia(store, rec.id, 5000)).equals(bytes));
    });

    it('defaults optional fields and hides one instance\'s media from another', async () => {
      const rec = await storeMedia(db, store, { instanceId: 'inst-a', direction: 'outbound', mimetype: 'image/png', bytes: Buffer.from('png') });
      assert.equal(rec.fileName, null);
      assert.equal(rec.seconds, null);
      assert.equal(rec.voiceNote, false);
      assert.equal(await getMediaRecord(db, 'inst-b', rec.id), undefined);
      assert.equal(await getMediaRecord(db, 'inst-a', 'med_missing'), undefined);
    });

    it('leaves no blob behind when the row cannot be written', async () => {
      const before = await readdir(join(dir, 'media'));
      await assert.rejects(storeMedia(db, store, { instanceId: 'inst-unknown', direction: 'inbound', mimetype: 'image/png', bytes: Buffer.from('x') }));
      assert.deepEqual(await readdir(join(dir, 'media')), before);
    });

    it('readMedia: 504 media_timeout when the store does not answer, 404 when the blob is gone', async () => {
      const silentStore: MediaStore = {
        put: async () => undefined,
        get: () => new Promise<Uint8Array>(() => undefined), // never answers, like a stalled bucket
        delete: async () => undefined,
        close: async () => undefined,
      };
      await assert.rejects(readMedia(silentStore, 'med_x', 50), (err: unknown) => {
        assert.ok(err instanceof Problem);
        assert.equal(err.status, 504);
        assert.equal(err.code, 'media_timeout');
        return true;
      });
      await assert.rejects(readMedia(store, 'med_gone', 5000), (err: unknown) => err instanceof Problem && err.status === 404);
    });

    it('mediaStats counts files and bytes', async () => {
      assert.deepEqual(await mediaStats(db), { count: 0, bytes: 0 });
      await storeMedia(db, store, { instanceId: 'inst-a', direction: 'inbound', mimetype: 'image/png', bytes: randomBytes(100) });
      await storeMedia(db, store, { instanceId: 'inst-b', direction: 'outbound', mimetype: 'image/png', bytes: randomBytes(23) });
      assert.deepEqual(await mediaStats(db), { count: 2, bytes: 123 });
    });
  });

  describe('signed links', () => {
    const now = Date.UTC(2025, 0, 1);

    function parse(link: string): { path: string; expires: string; signature: string } {
      const url = new URL(link);
      return { path: url.pathname, expires: url.searchParams.get('expires')!, signature: url.searchParams.get('signature')! };
    }

    it('has the documented shape', () => {
      const link = mediaLink(crypto, 'https://sb.example.com/', 'inst-a', 'med_1', 3600, now);
      assert.match(link, /^https:\/\/sb\.example\.com\/api\/instances\/inst-a\/media\/med_1\?expires=\d+&signature=[0-9a-f]{64}$/);
      assert.equal(parse(link).expires, String(now / 1000 + 3600));
    });

    it('verifies until expiry, then fails', () => {
      const { expires, signature } = parse(mediaLink(crypto, 'http://localhost:8080', 'inst-a', 'med_1', 60, now));
      assert.equal(verifyMediaLink(crypto, 'inst-a', 'med_1', expires, signature, now), true);
      assert.equal(verifyMediaLink(crypto, 'inst-a', 'med_1', expires, signature, now + 59_999), true);
      assert.equal(verifyMediaLink(crypto, 'inst-a', 'med_1', expires, signature, now + 60_000), false);
    });

    it('rejects forged, re-targeted, extended and malformed links', () => {
      const { expires, signature } = parse(mediaLink(crypto, 'http://localhost:8080', 'inst-a', 'med_1', 60, now));
      const flipped = (signature[0] === 'a' ? 'b' : 'a') + signature.slice(1);
      assert.equal(verifyMediaLink(crypto, 'inst-a', 'med_1', expires, flipped, now), false);
      assert.equal(verifyMediaLink(crypto, 'inst-b', 'med_1', expires, signature, now), false);
      assert.equal(verifyMediaLink(crypto, 'inst-a', 'med_2', expires, signature, now), false);
      assert.equal(verifyMediaLink(crypto, 'inst-a', 'med_1', String(Number(expires) + 1000), signature, now), false);
      assert.equal(verifyMediaLink(crypto, 'inst-a', 'med_1', expires, signature.toUpperCase(), now), false);
      assert.equal(verifyMediaLink(crypto, 'inst-a', 'med_1', '', signature, now), false);
      assert.equal(verifyMediaLink(crypto, 'inst-a', 'med_1', '1e12', signature, now), false);
      assert.equal(verifyMediaLink(crypto, 'inst-a', 'med_1', expires, '', now), false);
      const otherKey = new Crypto(randomBytes(32));
      assert.equal(verifyMediaLink(otherKey, 'inst-a', 'med_1', expires, signature, now), false);
    });
  });

  describe('retention', () => {
    it('removes rows and blobs older than maxAge, keeps newer ones, and purges orphan blobs', async () => {
      const old = await storeMedia(db, store, { instanceId: 'inst-a', direction: 'inbound', mimetype: 'image/png', bytes: Buffer.from('old') });
      const fresh = await storeMedia(db, store, { instanceId: 'inst-a', direction: 'inbound', mimetype: 'image/png', bytes: Buffer.from('fresh') });
      await db('media').where({ id: old.id }).update({ created_at: new Date(Date.now() - 2 * 3_600_000) });
      // A blob without a row (crash between blob and row), old enough to go.
      await writeFile(store.path('med_orphan'), 'orphan');
      const longAgo = new Date(Date.now() - 3 * 3_600_000);
      await utimes(store.path('med_orphan'), longAgo, longAgo);

      const retention = startMediaRetention({ db, store, maxAgeMs: 3_600_000, intervalMs: 60_000, log: silentLog, batchSize: 1 });
      try {
        assert.equal(await retention.runOnce(), 1);
      } finally {
        retention.stop();
      }
      assert.equal(await getMediaRecord(db, 'inst-a', old.id), undefined);
      await assert.rejects(store.get(old.id), MediaNotFoundError);
      await assert.rejects(store.get('med_orphan'), MediaNotFoundError);
      assert.ok(await getMediaRecord(db, 'inst-a', fresh.id));
      assert.equal(Buffer.from(await store.get(fresh.id)).toString(), 'fresh');
    });

    it("removes a deleted instance's blobs: the database queues every deleted row's blob", async () => {
      await addInstance(db, 'inst-gone');
      const kept = await storeMedia(db, store, { instanceId: 'inst-a', direction: 'inbound', mimetype: 'image/png', bytes: Buffer.from('kept') });
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        ids.push((await storeMedia(db, store, { instanceId: 'inst-gone', direction: 'inbound', mimetype: 'image/png', bytes: Buffer.from(`gone${i}`) })).id);
      }
      await db('instances').where({ id: 'inst-gone' }).delete(); // the rows go by cascade
      assert.deepEqual((await db('media_purge').whereIn('media_id', ids).pluck('media_id')).sort(), [...ids].sort());
      assert.ok((await drainMediaPurge(db, store, silentLog, 2)) >= 3);
      for (const id of ids) await assert.rejects(store.get(id), MediaNotFoundError);
      assert.equal(Number((await db('media_purge').count({ n: '*' }).first())!.n), 0);
      assert.equal(Buffer.from(await store.get(kept.id)).toString(), 'kept');
    });

    it('keeps the entry of a file the store fails to delete, and drains concurrently without double work', async () => {
      await drainMediaPurge(db, store, silentLog); // what earlier tests queued
      await addInstance(db, 'inst-gone2');
      const ids: string[] = [];
      for (let i = 0; i < 6; i++) {
        ids.push((await storeMedia(db, store, { instanceId: 'inst-gone2', direction: 'inbound', mimetype: 'image/png', bytes: Buffer.from(`g${i}`) })).id);
      }
      await db('instances').where({ id: 'inst-gone2' }).delete();
      const stuck = [...ids].sort()[0]; // the first in the queue's order: it must not hold back the rest
      const deletes: string[] = [];
      const flaky: MediaStore = {
        put: (id, bytes) => store.put(id, bytes),
        get: (id) => store.get(id),
        close: async () => undefined,
        delete: async (id) => {
          if (id === stuck) throw new Error('store unavailable');
          deletes.push(id);
          await store.delete(id);
        },
      };
      const warnings: unknown[] = [];
      const log = { warn: (o: unknown) => void warnings.push(o) };
      const drained = await Promise.all([drainMediaPurge(db, flaky, log, 2), drainMediaPurge(db, flaky, log, 2)]);
      assert.equal(drained[0] + drained[1], 5, 'every file but the stuck one, each once');
      assert.equal(new Set(deletes).size, deletes.length, 'no file deleted twice');
      assert.ok(warnings.length >= 1);
      assert.deepEqual(await db('media_purge').whereIn('media_id', ids).pluck('media_id'), [stuck]);
      assert.equal(await drainMediaPurge(db, store, log), 1, 'the next drain takes it');
      await assert.rejects(store.get(stuck), MediaNotFoundError);
    });

    it('sweeps soon after it starts, not only once its interval has passed', async () => {
      const old = await storeMedia(db, store, { instanceId: 'inst-b', direction: 'outbound', mimetype: 'image/png', bytes: Buffer.from('old') });
      await db('media').update({ created_at: new Date(Date.now() - 10_000) });
      const retention = startMediaRetention({ db, store, maxAgeMs: 5_000, intervalMs: 3_600_000, firstRunAfterMs: 20, log: silentLog });
      try {
        const deadline = Date.now() + 5_000;
        while ((await getMediaRecord(db, 'inst-b', old.id)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      } finally {
        retention.stop();
      }
      assert.equal(await getMediaRecord(db, 'inst-b', old.id), undefined);
    });

    it('sweeps on its interval and handles more rows than one batch', async () => {
      for (let i = 0; i < 5; i++) {
        await storeMedia(db, store, { instanceId: 'inst-b', direction: 'outbound', mimetype: 'image/png', bytes: Buffer.from(`n${i}`) });
      }
      await db('media').update({ created_at: new Date(Date.now() - 10_000) });
      const retention = startMediaRetention({ db, store, maxAgeMs: 5_000, intervalMs: 20, log: silentLog, batchSize: 2 });
      try {
        const deadline = Date.now() + 5_000;
        while ((await mediaStats(db)).count > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      } finally {
        retention.stop();
      }
      assert.deepEqual(await mediaStats(db), { count: 0, bytes: 0 });
    });
  });
});
