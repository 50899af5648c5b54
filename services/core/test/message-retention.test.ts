// Message retention on the real PostgreSQL: what goes (settled sends, received messages, past the
// age), what stays (queued and sending items, recent messages, other instances' rows are theirs),
// and that what goes is counted in message_counts as the statistics count it.
import assert from 'node:assert/strict';
import { createLogger, deleteOldReceived, deleteOldSends, startMessageRetention, type Db } from '../src/index.ts';
import { openTestDatabase } from '../../../test/support/services.ts';

const DAY = 86_400_000;
const log = createLogger({ level: 'silent' });

describe('message retention (PostgreSQL)', function () {
  this.timeout(30_000);
  let db: Db;
  let drop: () => Promise<void>;

  before(async () => {
    ({ db, drop } = await openTestDatabase({ migrated: true }));
    await db('instances').insert(['inst-a', 'inst-b'].map((id) => ({ id, name: id, token_hash: id, token_sealed: 'x' })));
  });
  after(async () => drop?.());

  const ago = (days: number) => new Date(Date.now() - days * DAY);
  const send = (id: string, instance: string, status: string, type: string, createdDaysAgo: number) => ({
    id, instance_id: instance, messenger_id: id, phone: '5511999990000', type, payload: '{}', status,
    created_at: ago(createdDaysAgo), expires_at: ago(createdDaysAgo - 1),
  });
  const received = (id: string, instance: string, type: string, createdDaysAgo: number, fields: { from_me?: boolean; from_api?: boolean } = {}) => ({
    id, instance_id: instance, message_id: id, type, created_at: ago(createdDaysAgo), ...fields,
  });
  const counts = async () =>
    (await db('message_counts').orderBy(['instance_id', 'direction', 'type']).select('instance_id', 'direction', 'type', 'count')).map((r) => `${r.instance_id} ${r.direction} ${r.type} ${r.count}`);

  it('deletes settled sends and received messages past the age, counting them; keeps the queue and recent ones', async () => {
    await db('send_items').insert([
      send('s-read', 'inst-a', 'read', 'text', 100),
      send('s-failed', 'inst-a', 'failed', 'text', 100),
      send('s-image', 'inst-a', 'delivered', 'image', 100),
      send('s-b', 'inst-b', 'expired', 'text', 100),
      send('s-queued', 'inst-a', 'queued', 'text', 100), // never deleted, whatever its age
      send('s-sending', 'inst-a', 'sending', 'text', 100),
      send('s-recent', 'inst-a', 'read', 'text', 10),
    ]);
    await db('incoming').insert([
      received('r-in', 'inst-a', 'text', 100),
      received('r-phone', 'inst-a', 'text', 100, { from_me: true }), // typed on the phone: outbound
      received('r-echo', 'inst-a', 'text', 100, { from_me: true, from_api: true }), // an API send's echo: its send counts
      received('r-b', 'inst-b', 'audio', 100),
      received('r-recent', 'inst-a', 'text', 10),
    ]);
    const cutoff = ago(30);
    assert.equal(await deleteOldSends(db, cutoff, 2), 2, 'a batch at a time');
    assert.equal(await deleteOldSends(db, cutoff, 100), 2);
    assert.equal(await deleteOldSends(db, cutoff, 100), 0);
    assert.equal(await deleteOldReceived(db, cutoff, 100), 4);
    assert.deepEqual((await db('send_items').orderBy('id').pluck('id')), ['s-queued', 's-recent', 's-sending']);
    assert.deepEqual((await db('incoming').orderBy('id').pluck('id')), ['r-recent']);
    assert.deepEqual(await counts(), [
      'inst-a inbound text 1',
      'inst-a outbound image 1',
      'inst-a outbound text 3', // two sends and the message typed on the phone
      'inst-b inbound audio 1',
      'inst-b outbound text 1',
    ]);
    const dates = await db('message_counts').distinct(db.raw(`to_char(date, 'YYYY-MM-DD') as d`));
    assert.deepEqual(dates.map((r: { d: string }) => r.d), [ago(100).toISOString().slice(0, 10)], 'the UTC date of each message');
    // The queue still holds its two slots (the queued and the sending item).
    assert.equal((await db('instances').where({ id: 'inst-a' }).first('queued_count')).queued_count, 2);
  });

  it('adds to the counts of a day already counted; the periodic job keeps everything when the age is 0', async () => {
    await db('send_items').insert(send('s-later', 'inst-b', 'read', 'text', 100));
    const keep = startMessageRetention({ db, maxAgeMs: 0, log, firstRunAfterMs: 3_600_000 });
    assert.equal(await keep.runOnce(), 0);
    await keep.stop();
    assert.ok(await db('send_items').where({ id: 's-later' }).first(), 'kept for ever by default');
    const sweep = startMessageRetention({ db, maxAgeMs: 30 * DAY, log, firstRunAfterMs: 3_600_000 });
    assert.equal(await sweep.runOnce(), 1);
    await sweep.stop();
    assert.ok((await counts()).includes('inst-b outbound text 2'));
  });

  it("waits for an instance's delete instead of deadlocking with its cascade", async () => {
    await db('instances').insert({ id: 'inst-gone', name: 'gone', token_hash: 'inst-gone', token_sealed: 'x' });
    await db('send_items').insert(Array.from({ length: 5 }, (_, i) => send(`s-gone-${i}`, 'inst-gone', 'read', 'text', 100)));
    // The instance's delete, as PostgreSQL runs it: the row locked, then its items deleted by the cascade.
    const deleting = await db.transaction();
    try {
      await deleting('instances').where({ id: 'inst-gone' }).forUpdate().select('id');
      const sweeping = deleteOldSends(db, ago(30), 100);
      await new Promise((resolve) => setTimeout(resolve, 300)); // the sweep has picked its rows by now
      // The sweep waits on the instance, holding none of its items: the cascade goes through.
      await deleting.raw(`set local lock_timeout = '2s'`);
      assert.equal(await deleting('send_items').where({ instance_id: 'inst-gone' }).delete(), 5);
      await deleting('instances').where({ id: 'inst-gone' }).delete();
      await deleting.commit();
      assert.equal(await sweeping, 0, 'nothing left to count of the deleted instance');
    } finally {
      if (!deleting.isCompleted()) await deleting.rollback();
    }
    assert.equal((await db('message_counts').where({ instance_id: 'inst-gone' })).length, 0);
  });

  it('counts a row once when two sweeps take the same rows', async () => {
    await db('send_items').insert(Array.from({ length: 40 }, (_, i) => send(`s-race-${i}`, 'inst-b', 'delivered', 'video', 100)));
    const deleted = await Promise.all([deleteOldSends(db, ago(30), 100), deleteOldSends(db, ago(30), 100), deleteOldSends(db, ago(30), 100)]);
    assert.equal(deleted.reduce((a, b) => a + b, 0), 40);
    assert.ok((await counts()).includes('inst-b outbound video 40'));
  });
});
