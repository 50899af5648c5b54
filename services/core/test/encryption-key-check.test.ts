// The database remembers which ENCRYPTION_KEY wrote it: a process with another key is refused at
// start, rather than failing every sealed token and secret later.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import knexFactory, { type Knex } from 'knex';
import { checkEncryptionKey, Crypto, EncryptionKeyMismatch, migrate } from '../src/index.ts';
import { createTestDatabase } from '../../../test/support/services.ts';

describe('encryption key check', () => {
  let created: { url: string; drop(): Promise<void> };
  let db: Knex;
  const keyA = new Crypto(randomBytes(32));
  const keyB = new Crypto(randomBytes(32));
  const refused = (err: unknown) => err instanceof EncryptionKeyMismatch && !/[A-Za-z0-9+/]{43}=/.test(err.message);

  beforeEach(async () => {
    created = await createTestDatabase();
    db = knexFactory({ client: 'pg', connection: created.url, pool: { min: 0, max: 2 } });
  });
  afterEach(async () => {
    await db.destroy();
    await created.drop();
  });

  it('passes on a database not migrated yet (a session process never migrates)', async () => {
    await checkEncryptionKey(db, keyA);
  });

  it('records the first key and refuses any other afterwards', async () => {
    await migrate(db);
    await checkEncryptionKey(db, keyA);
    await checkEncryptionKey(db, keyA);
    await assert.rejects(checkEncryptionKey(db, keyB), refused);
    const rows = await db('encryption_key_check').select('fingerprint');
    assert.deepEqual(rows, [{ fingerprint: keyA.keyFingerprint() }], 'the fingerprint, never the key');
  });

  it('checks a database written before fingerprints were kept against a sealed token', async () => {
    await migrate(db);
    await db('instances').insert({ id: 'inst-a', name: 'Written with A', token_hash: keyA.hashToken('t'), token_sealed: keyA.seal('t') });
    await assert.rejects(checkEncryptionKey(db, keyB), refused);
    assert.equal((await db('encryption_key_check')).length, 0, 'a refused key records nothing');
    await checkEncryptionKey(db, keyA);
    await assert.rejects(checkEncryptionKey(db, keyB), refused);
  });
});
