// The per-instance count of queued sends kept by the database (migrations 002_queue_count and
// 020_queue_slot_while_sending): every write into or out of `queued` or `sending` adjusts it, the
// limit is refused with SQLSTATE SBQ01, and the migrations count the items there before they ran.
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { QUEUE_FULL_SQLSTATE, SEND_QUEUE_LIMIT, migrate } from '../src/index.ts';
import { migrationSource } from '../src/db/migrations/index.ts';
import { openTestDatabase } from '../../../test/support/services.ts';

describe('queued-send count (PostgreSQL trigger)', () => {
  let db: Knex;
  let drop: () => Promise<void>;
  let n = 0;
  before(async () => {
    ({ db, drop } = await openTestDatabase({ migrated: false }));
  });
  after(async () => drop());

  const instance = async (id: string) => db('instances').insert({ id, name: id, token_hash: `h-${id}`, token_sealed: 's' });
  const item = (instanceId: string, status = 'queued') => {
    n++;
    return { id: `msg-${n}`, instance_id: instanceId, messenger_id: `m-${n}`, phone: '5511988887777', type: 'text', payload: '{}', status, expires_at: new Date(Date.now() + 60_000) };
  };
  const queuedCount = async (id: string) => (await db('instances').where({ id }).first('queued_count')).queued_count;

  it('counts items queued before the migration ran', async () => {
    await db.migrate.up({ migrationSource }); // the first migration only
    await instance('inst-old');
    await db('send_items').insert([item('inst-old'), item('inst-old'), item('inst-old', 'sending'), item('inst-old', 'sent')]);
    await migrate(db);
    assert.equal(await queuedCount('inst-old'), 3);
  });

  it('follows every move into and out of the queue, including deletes', async () => {
    await instance('inst-a');
    const [a, b] = [item('inst-a'), item('inst-a')];
    await db('send_items').insert([a, b, item('inst-a', 'failed')]);
    assert.equal(await queuedCount('inst-a'), 2);
    await db('send_items').where({ id: a.id }).update({ status: 'sending' }); // keeps its slot
    assert.equal(await queuedCount('inst-a'), 2);
    await db('send_items').where({ id: a.id }).update({ status: 'queued' }); // not connected: back in the queue
    assert.equal(await queuedCount('inst-a'), 2);
    await db('send_items').where({ id: a.id }).update({ status: 'queued', updated_at: db.fn.now() }); // no move
    assert.equal(await queuedCount('inst-a'), 2);
    await db('send_items').where({ id: a.id }).update({ status: 'sent' });
    await db('send_items').where({ id: b.id }).delete();
    assert.equal(await queuedCount('inst-a'), 0);
  });

  it(`refuses a queued item beyond ${SEND_QUEUE_LIMIT} with ${QUEUE_FULL_SQLSTATE}, and never an item that is not queued`, async () => {
    await instance('inst-full');
    await db('instances').where({ id: 'inst-full' }).update({ queued_count: SEND_QUEUE_LIMIT - 1 });
    await db('send_items').insert(item('inst-full'));
    await assert.rejects(db('send_items').insert(item('inst-full')), (err: any) => err.code === QUEUE_FULL_SQLSTATE);
    assert.equal(await queuedCount('inst-full'), SEND_QUEUE_LIMIT);
    await db('send_items').insert(item('inst-full', 'sent'));
    // An item being sent holds its slot, so the one that goes back to the queue (the connection
    // closed before it left) finds it still there: the queue never holds more than the limit.
    const sending = (await db('send_items').where({ instance_id: 'inst-full', status: 'queued' }).first('id')).id;
    await db('send_items').where({ id: sending }).update({ status: 'sending' });
    await assert.rejects(db('send_items').insert(item('inst-full')), (err: any) => err.code === QUEUE_FULL_SQLSTATE);
    await db('send_items').where({ id: sending }).update({ status: 'queued' });
    assert.equal(await queuedCount('inst-full'), SEND_QUEUE_LIMIT);
    // A missing instance is the foreign key's error, not a full queue.
    await assert.rejects(db('send_items').insert(item('inst-missing')), (err: any) => err.code === '23503');
  });

  it('deleting an instance removes its items without touching other instances', async () => {
    await instance('inst-gone');
    await instance('inst-stays');
    await db('send_items').insert([item('inst-gone'), item('inst-stays')]);
    await db('instances').where({ id: 'inst-gone' }).delete();
    assert.equal(await db('send_items').where({ instance_id: 'inst-gone' }).count({ c: '*' }).first().then((r: any) => Number(r.c)), 0);
    assert.equal(await queuedCount('inst-stays'), 1);
  });
});
