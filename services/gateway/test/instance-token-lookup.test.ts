// InstanceTokenLookup against PostgreSQL: concurrent look-ups share a query, each gets its own
// instance (or nothing), and every look-up reads the database anew (renewal takes effect at once).
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { InstanceTokenLookup } from '../src/http/instance-token-lookup.ts';
import { openTestDatabase } from '../../../test/support/services.ts';

describe('InstanceTokenLookup (PostgreSQL)', () => {
  let db: Knex;
  let drop: () => Promise<void>;
  before(async () => {
    ({ db, drop } = await openTestDatabase());
    for (const id of ['inst-a', 'inst-b']) await db('instances').insert({ id, name: id, token_hash: `hash-${id}`, token_sealed: 's' });
  });
  after(async () => drop());

  it('answers every concurrent look-up with its own instance, and reads anew each time', async () => {
    const lookup = new InstanceTokenLookup(db);
    const hashes = ['hash-inst-a', 'hash-inst-b', 'hash-unknown', 'hash-inst-a', 'hash-inst-b'];
    const rows = await Promise.all(hashes.map((h) => lookup.find(h)));
    assert.deepEqual(rows.map((r) => r?.id), ['inst-a', 'inst-b', undefined, 'inst-a', 'inst-b']);

    await db('instances').where({ id: 'inst-a' }).update({ token_hash: 'hash-renewed' });
    assert.equal(await lookup.find('hash-inst-a'), undefined);
    assert.equal((await lookup.find('hash-renewed'))?.id, 'inst-a');
  });
});
