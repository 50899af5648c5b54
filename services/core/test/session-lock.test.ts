// noSessionHolds against real PostgreSQL: a session's owner lock counts, a brief check's does not.
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { lockUnheldInstance, sessionLockKey } from '../src/index.ts';
import { openTestDatabase } from '../../../test/support/services.ts';

describe('session owner lock checks', () => {
  let db: Knex;
  let drop: () => Promise<void>;
  before(async () => {
    ({ db, drop } = await openTestDatabase());
    await db('instances').insert({ id: 'inst-lock', name: 'Locked', token_hash: 'h', token_sealed: 's' });
  });
  after(async () => drop());

  it('a check that waited for another check of the same instance finds it unheld, every time', async () => {
    // PostgreSQL frees the row lock before the advisory lock at commit: without a retry, a few
    // percent of these rounds took the first check's owner lock for a session's.
    for (let round = 0; round < 150; round++) {
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      let firstLocked!: () => void;
      const locked = new Promise<void>((r) => (firstLocked = r));
      const first = db.transaction(async (trx) => {
        assert.equal((await lockUnheldInstance(trx, 'inst-lock')).unheld, true);
        firstLocked();
        await released;
      });
      await locked;
      const second = db.transaction(async (trx) => (await lockUnheldInstance(trx, 'inst-lock')).unheld);
      await new Promise((r) => setTimeout(r, 1)); // the second now waits for the row
      release();
      await first;
      assert.equal(await second, true, `round ${round}`);
    }
  });

  it('a session holding the owner lock counts as holding the instance', async () => {
    const session = await db.client.acquireConnection();
    try {
      await db.raw('SELECT pg_advisory_lock(?::bigint)', [sessionLockKey('inst-lock')]).connection(session);
      assert.equal(await db.transaction(async (trx) => (await lockUnheldInstance(trx, 'inst-lock')).unheld), false);
    } finally {
      await db.raw('SELECT pg_advisory_unlock_all()').connection(session);
      await db.client.releaseConnection(session);
    }
  });
});
