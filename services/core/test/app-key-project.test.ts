// Migration 006_app_key_project: an integration key's project is a reference the database keeps.
// Keys written before it that name a project which no longer exists lose that label; afterwards
// deleting a project clears its keys' label, and a key cannot name a missing project.
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { migrate } from '../src/index.ts';
import { migrationSource } from '../src/db/migrations/index.ts';
import { openTestDatabase } from '../../../test/support/services.ts';

describe('integration key project reference (migration 006, PostgreSQL)', () => {
  let db: Knex;
  let drop: () => Promise<void>;
  let n = 0;
  before(async () => {
    ({ db, drop } = await openTestDatabase({ migrated: false }));
    for (let i = 0; i < 5; i++) await db.migrate.up({ migrationSource }); // up to 005
    await db('instances').insert({ id: 'inst-k', name: 'inst-k', token_hash: 'h-inst-k', token_sealed: 's' });
  });
  after(async () => drop());

  const key = (projectId: string | null) => {
    n++;
    return { id: `app-${n}`, instance_id: 'inst-k', name: `key ${n}`, project_id: projectId, key_prefix: 'sbk_x', key_hash: `hash-${n}` };
  };
  const projectOf = async (id: string) => (await db('app_keys').where({ id }).first('project_id')).project_id;

  it('clears the labels of projects that no longer exist and keeps the others', async () => {
    await db('projects').insert({ id: 'proj-kept', name: 'kept' });
    const [kept, orphan, none] = [key('proj-kept'), key('proj-gone'), key(null)];
    await db('app_keys').insert([kept, orphan, none]);
    await migrate(db);
    assert.deepEqual([await projectOf(kept.id), await projectOf(orphan.id), await projectOf(none.id)], ['proj-kept', null, null]);
  });

  it('deleting the project clears its keys, and a key cannot name a missing project', async () => {
    await db('projects').insert({ id: 'proj-doomed', name: 'doomed' });
    const labelled = key('proj-doomed');
    await db('app_keys').insert(labelled);
    await db('projects').where({ id: 'proj-doomed' }).delete();
    assert.equal(await projectOf(labelled.id), null);
    assert.equal((await db('app_keys').where({ id: labelled.id }).first())?.name, labelled.name, 'the key itself is kept');
    await assert.rejects(db('app_keys').insert(key('proj-missing')), (err: { code?: string }) => err.code === '23503');
  });
});
