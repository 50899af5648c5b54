// Baileys credentials and every Signal key type of Baileys 7 in the sealed auth_state table of a
// real PostgreSQL: round trips with Buffers intact, deletes, encryption at rest, atomic batches
// that do not deadlock when they run concurrently, and clear().
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { initAuthCreds, makeCacheableSignalKeyStore, proto, type SignalDataSet } from '@whiskeysockets/baileys';
import { Crypto, DbAuthStore, migrate, openDatabase, type Db } from '@switchboard/core';
import { createTestDatabase } from '../../../test/support/services.ts';
import { bufferJsonCodec, loadCreds, makeSignalKeyStore, saveCreds } from '../src/drivers/baileys/auth-state.ts';

let db: Db;
let drop: () => Promise<void>;
const crypto = new Crypto(randomBytes(32));

before(async () => {
  const created = await createTestDatabase();
  drop = created.drop;
  db = openDatabase({ databaseUrl: created.url, dataDir: '/nonexistent', poolMax: 12 });
  await migrate(db);
  // Auth state belongs to an instance (a foreign key, migration 021).
  const ids = ['inst-auth-json', 'inst-auth-bj', 'inst-auth-concurrent', 'inst-auth-a', 'inst-auth-b'];
  await db('instances').insert(ids.map((id) => ({ id, name: id, token_hash: `h-${id}`, token_sealed: 's' })));
});
after(async () => {
  await db?.destroy();
  await drop?.();
});

/** One value of every key type Baileys 7 stores. */
function everyKeyType(): SignalDataSet {
  return {
    'pre-key': { '1': { public: randomBytes(33), private: randomBytes(32) } },
    session: { '5511999990001.0': randomBytes(120) },
    'sender-key': { '120363001@g.us::5511999990001::0': randomBytes(80) },
    'sender-key-memory': { '120363001@g.us': { '5511999990001:0@s.whatsapp.net': true } },
    'app-state-sync-key': {
      AAAAAAAB: proto.Message.AppStateSyncKeyData.fromObject({ keyData: randomBytes(32), timestamp: 1_700_000_000 }),
    },
    'app-state-sync-version': { regular: { version: 7, hash: randomBytes(128), indexValueMap: { abc: { valueMac: randomBytes(32) } } } },
    'lid-mapping': { '5511999990001': '123456789012345', '123456789012345_reverse': '5511999990001' },
    'device-list': { '5511999990001': ['0', '12'] },
    tctoken: { '5511999990001@s.whatsapp.net': { token: randomBytes(20), timestamp: '1700000000' } },
    'identity-key': { '5511999990001.0': randomBytes(33) },
  };
}

for (const [label, codec] of [
  ['the default JSON codec (as the worker builds it)', undefined],
  ['the BufferJSON codec', bufferJsonCodec],
] as const) {
  describe(`Baileys auth state over DbAuthStore with ${label}`, () => {
    const instanceId = `inst-auth-${codec ? 'bj' : 'json'}`;
    const store = () => new DbAuthStore(db, crypto, instanceId, codec);

    it('round-trips fresh credentials with their key Buffers', async () => {
      assert.equal((await loadCreds(store())).me, undefined, 'no creds yet → fresh ones');
      const creds = initAuthCreds();
      creds.me = { id: '5511999990001:12@s.whatsapp.net', lid: '123456789012345:12@lid', name: 'Ana' };
      await saveCreds(store(), creds);
      const loaded = await loadCreds(store());
      assert.ok(Buffer.isBuffer(loaded.noiseKey.private));
      assert.deepEqual(Buffer.from(loaded.noiseKey.private), Buffer.from(creds.noiseKey.private));
      assert.deepEqual(Buffer.from(loaded.signedPreKey.signature), Buffer.from(creds.signedPreKey.signature));
      assert.equal(loaded.registrationId, creds.registrationId);
      assert.equal(loaded.advSecretKey, creds.advSecretKey);
      assert.deepEqual(loaded.me, creds.me);
    });

    it('round-trips every Signal key type of Baileys 7 and deletes on null', async () => {
      const keys = makeSignalKeyStore(store());
      const data = everyKeyType();
      await keys.set(data);
      for (const [type, entries] of Object.entries(data)) {
        const got = await keys.get(type as keyof SignalDataSet, Object.keys(entries!));
        for (const [id, value] of Object.entries(entries!)) {
          assert.deepEqual(normalise(got[id]), normalise(value), `${type}/${id}`);
        }
      }
      const syncKey = (await keys.get('app-state-sync-key', ['AAAAAAAB'])).AAAAAAAB;
      assert.ok(syncKey instanceof proto.Message.AppStateSyncKeyData, 'app-state-sync-key comes back as the protobuf class');
      assert.ok(Buffer.isBuffer((await keys.get('session', ['5511999990001.0']))['5511999990001.0']));

      await keys.set({ session: { '5511999990001.0': null }, 'lid-mapping': { '5511999990001': null } });
      assert.deepEqual(await keys.get('session', ['5511999990001.0']), {});
      assert.deepEqual(Object.keys(await keys.get('lid-mapping', ['5511999990001', '123456789012345_reverse'])), ['123456789012345_reverse']);
    });

    it('keeps values sealed at rest', async () => {
      await makeSignalKeyStore(store()).set({ 'lid-mapping': { '5511977776666': '998877665544332' } });
      const row = await db('auth_state').where({ instance_id: instanceId, category: 'lid-mapping', key_id: '5511977776666' }).first();
      assert.ok(row);
      assert.ok(!row.value_sealed.includes('998877665544332'));
      assert.ok(!Buffer.from(row.value_sealed, 'base64').toString('latin1').includes('998877665544332'));
    });

    it('works under makeCacheableSignalKeyStore', async () => {
      const cached = makeCacheableSignalKeyStore(makeSignalKeyStore(store()));
      const value = randomBytes(64);
      await cached.set({ 'sender-key': { 'g@g.us::a::0': value } });
      const fresh = makeSignalKeyStore(store()); // bypasses the cache: it really is in the database
      assert.deepEqual(Buffer.from((await fresh.get('sender-key', ['g@g.us::a::0']))['g@g.us::a::0']), value);
    });
  });
}

describe('Baileys auth state: batches', () => {
  it('writes concurrent overlapping batches atomically and without deadlocks', async () => {
    const instanceId = 'inst-auth-concurrent';
    const ids = Array.from({ length: 40 }, (_, i) => `5511900000${String(i).padStart(3, '0')}.0`);
    const batches = Array.from({ length: 16 }, (_, b) => {
      // Each batch lists the keys in its own order; all of them carry the batch number.
      const order = b % 2 ? [...ids].reverse() : [...ids.slice(b), ...ids.slice(0, b)];
      const entries: Record<string, Uint8Array> = {};
      for (const id of order) entries[id] = Buffer.from([b, ...randomBytes(8)]);
      return { session: entries, 'identity-key': { [`batch.${b % 3}`]: Buffer.from([b]) } } as SignalDataSet;
    });
    await Promise.all(batches.map((batch) => makeSignalKeyStore(new DbAuthStore(db, crypto, instanceId)).set(batch)));
    const got = await makeSignalKeyStore(new DbAuthStore(db, crypto, instanceId)).get('session', ids);
    assert.equal(Object.keys(got).length, ids.length);
    const writers = new Set(Object.values(got).map((v) => v[0]));
    assert.equal(writers.size, 1, 'every key comes from the same (last committed) batch');
  });

  it('clear() removes this instance\'s state only', async () => {
    const a = new DbAuthStore(db, crypto, 'inst-auth-a');
    const b = new DbAuthStore(db, crypto, 'inst-auth-b');
    await saveCreds(a, initAuthCreds());
    await saveCreds(b, initAuthCreds());
    await makeSignalKeyStore(a).set(everyKeyType());
    await makeSignalKeyStore(a).clear!();
    assert.equal((await db('auth_state').where({ instance_id: 'inst-auth-a' }).count<{ count: string }[]>('* as count'))[0].count, '0');
    assert.notEqual((await db('auth_state').where({ instance_id: 'inst-auth-b' }).count<{ count: string }[]>('* as count'))[0].count, '0');
  });

  it('goes with its instance, and a session that writes after the delete is refused (nothing sealed stays behind)', async () => {
    await db('instances').insert({ id: 'inst-auth-gone', name: 'gone', token_hash: 'h-gone', token_sealed: 's' });
    const gone = new DbAuthStore(db, crypto, 'inst-auth-gone');
    await saveCreds(gone, initAuthCreds());
    await db('instances').where({ id: 'inst-auth-gone' }).delete();
    assert.equal((await db('auth_state').where({ instance_id: 'inst-auth-gone' })).length, 0);
    // Another gateway replica had started the session again: its late write meets the foreign key.
    await assert.rejects(saveCreds(gone, initAuthCreds()), (err: any) => err.code === '23503');
    assert.equal((await db('auth_state').where({ instance_id: 'inst-auth-gone' })).length, 0);
  });
});

/** Compares Baileys values regardless of Buffer vs Uint8Array and protobuf class vs plain object. */
function normalise(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value, (_k, v) => (v?.type === 'Buffer' && Array.isArray(v.data) ? Buffer.from(v.data).toString('base64') : v instanceof Uint8Array ? Buffer.from(v).toString('base64') : v)));
}
