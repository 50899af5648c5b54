// migrate() on a database that a newer version has already migrated: the previous version's
// processes restart during a rolling upgrade or after a rollback, and must start.
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { migrate } from '../src/index.ts';
import { openTestDatabase } from '../../../test/support/services.ts';

describe('migrate (PostgreSQL)', () => {
  let db: Knex;
  let drop: () => Promise<void>;
  before(async () => {
    ({ db, drop } = await openTestDatabase());
  });
  after(async () => drop());

  it('starts on a database that has migrations this code does not know', async () => {
    const applied = await db('knex_migrations').count<{ count: string }[]>({ count: '*' });
    await db('knex_migrations').insert({ name: '999_from_a_newer_version', batch: 99, migration_time: new Date() });
    await migrate(db);
    const after = await db('knex_migrations').count<{ count: string }[]>({ count: '*' });
    assert.equal(Number(after[0].count), Number(applied[0].count) + 1, 'nothing run again, nothing removed');
  });
});
