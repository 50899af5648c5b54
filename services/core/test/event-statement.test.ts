// Recording an event is one statement (events row + outbox row), optionally after a guard insert
// (issue 10, inbound path): the rows exist together or not at all, a guard that inserts nothing
// (a duplicate) writes nothing, and a failing statement leaves no partial rows behind.
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { migrate, openDatabase, recordEvent, recordEventAfter } from '../src/index.ts';
import { createTestDatabase } from '../../../test/support/services.ts';

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

describe('single-statement event recording', () => {
  let db: Knex;
  let drop: () => Promise<void>;
  before(async () => {
    const created = await createTestDatabase();
    db = openDatabase({ databaseUrl: created.url, dataDir: '/nonexistent' });
    await migrate(db);
    await db('instances').insert({ id: 'inst-a', name: 'a', token_hash: 'h', token_sealed: 's' });
    drop = async () => {
      await db.destroy();
      await created.drop();
    };
  });
  after(async () => drop());

  const incoming = (messageId: string, text: string) =>
    db('incoming').insert({ id: `in-${messageId}-${text}`, instance_id: 'inst-a', message_id: messageId, type: 'text', text }).onConflict(['instance_id', 'message_id']).ignore().returning('id');
  const count = async (table: string, where: Record<string, unknown> = {}) => Number((await db(table).where(where).count({ n: '*' }).first())!.n);

  it('recordEvent writes the events row and its outbox row with the same body and trace context', async () => {
    const event = await recordEvent(db, { instanceId: 'inst-a', type: 'chat.presence', data: { q: 'a ? b' }, traceContext: TRACEPARENT });
    const row = await db('events').where({ id: event.id }).first();
    const outbox = await db('outbox').where({ msg_id: event.id }).first();
    assert.equal(row.body, JSON.stringify(event));
    assert.equal(new Date(row.created_at).toISOString(), event.createdAt);
    // The record-event span's traceparent (with a recording SDK a new span id in the same trace).
    assert.equal(row.trace_context.split('-')[1], TRACEPARENT.split('-')[1]);
    assert.equal(outbox.subject, 'evt.inst-a.chat.presence');
    assert.equal(outbox.payload, row.body);
    assert.deepEqual(outbox.headers, { traceparent: row.trace_context });
  });

  it('recordEventAfter records the event only when the guard inserted its row', async () => {
    const first = await recordEventAfter(db, incoming('m1', 'first'), { instanceId: 'inst-a', type: 'message.received', data: { messageId: 'm1' } });
    assert.ok(first);
    const again = await recordEventAfter(db, incoming('m1', 'again'), { instanceId: 'inst-a', type: 'message.received', data: { messageId: 'm1' } });
    assert.equal(again, null);
    assert.equal(await count('incoming', { message_id: 'm1' }), 1);
    assert.equal((await db('incoming').where({ message_id: 'm1' }).first()).text, 'first');
    assert.equal(await count('events', { type: 'message.received' }), 1);
    assert.equal(await count('outbox', { subject: 'evt.inst-a.message.received' }), 1);
    assert.deepEqual((await db('outbox').where({ msg_id: first.id }).first()).headers, {});
  });

  it('a failing statement leaves none of its rows (the guard rolls back with it)', async () => {
    const events = await count('events');
    // The event row violates the instances foreign key: the guard's incoming row must not stay.
    const guard = db('incoming').insert({ id: 'in-orphan', instance_id: 'inst-a', message_id: 'm-orphan', type: 'text' }).returning('id');
    await assert.rejects(recordEventAfter(db, guard, { instanceId: 'no-such-instance', type: 'message.received', data: {} }));
    assert.equal(await count('incoming', { message_id: 'm-orphan' }), 0);
    assert.equal(await count('events'), events);
  });
});
