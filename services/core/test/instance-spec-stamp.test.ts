// The stamp that says which version of its Instance resource an instance's record follows
// (instance-spec-stamp.ts): it only moves forward within one resource, and starts over with a
// re-created one.
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { followsNoNewerSpec, recordSpecStamp } from '../src/index.ts';
import { openTestDatabase } from '../../../test/support/services.ts';

describe('instance spec stamp', () => {
  let db: Knex;
  let drop: () => Promise<void>;
  before(async () => {
    ({ db, drop } = await openTestDatabase());
    await db('instances').insert({ id: 'inst-s', name: 'Stamped', token_hash: 'h', token_sealed: 's' });
  });
  after(async () => drop());

  const stamp = async () => {
    const row = await db('instances').where({ id: 'inst-s' }).first('spec_uid', 'spec_generation');
    return [row.spec_uid, row.spec_generation === null ? null : Number(row.spec_generation)];
  };
  const writable = async (uid: string, generation: number) => (await db('instances').where({ id: 'inst-s' }).where(followsNoNewerSpec({ uid, generation })).count('* as n'))[0].n === '1';

  it('moves forward and never back within one resource', async () => {
    assert.equal(await writable('uid-1', 1), true, 'a record without a stamp takes any');
    await recordSpecStamp(db, 'inst-s', { uid: 'uid-1', generation: 3 });
    assert.deepEqual(await stamp(), ['uid-1', 3]);
    await recordSpecStamp(db, 'inst-s', { uid: 'uid-1', generation: 2 }); // a racing request's older answer
    assert.deepEqual(await stamp(), ['uid-1', 3]);
    assert.equal(await writable('uid-1', 2), false);
    assert.equal(await writable('uid-1', 3), true, 'the same version may be written again');
  });

  it('starts over with a re-created resource (another uid)', async () => {
    assert.equal(await writable('uid-2', 1), true);
    await recordSpecStamp(db, 'inst-s', { uid: 'uid-2', generation: 1 });
    assert.deepEqual(await stamp(), ['uid-2', 1]);
  });
});
