// Recording an event is one statement (events row + outbox row); recording many after a guard
// insert (issue 10, inbound path) is one statement too: the rows exist together or not at all, an
// event whose guard row was not inserted (a duplicate) writes nothing, and a failing statement
// leaves no partial rows behind.
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { migrate, openDatabase, recordEvent, recordKeyedEvents } from '../src/index.ts';
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

  /** The guard of the inbound path: incoming rows, each new one returning its message id as key. */
  const incoming = (messages: [messageId: string, text: string][]) =>
    db('incoming')
      .insert(messages.map(([messageId, text]) => ({ id: `in-${messageId}-${text}`, instance_id: 'inst-a', message_id: messageId, type: 'text', text })))
      .onConflict(['instance_id', 'message_id'])
      .ignore()
      .returning(db.raw('message_id as key'))
      .toSQL();
  const received = (messageId: string) => ({ key: messageId, instanceId: 'inst-a', type: 'message.received' as const, data: { messageId } });
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

  it('recordKeyedEvents records the events whose guard rows were inserted, in the order given', async () => {
    const [first] = await recordKeyedEvents(db, incoming([['m1', 'first']]), [received('m1')]);
    assert.ok(first);
    const [again, m2, m3] = await recordKeyedEvents(db, incoming([['m1', 'again'], ['m2', 'x'], ['m3', 'y']]), [received('m1'), received('m2'), received('m3')]);
    assert.equal(again, null);
    assert.ok(m2 && m3);
    assert.equal(await count('incoming', { message_id: 'm1' }), 1);
    assert.equal((await db('incoming').where({ message_id: 'm1' }).first()).text, 'first');
    assert.equal(await count('events', { type: 'message.received' }), 3);
    assert.deepEqual((await db('outbox').where({ msg_id: first.id }).first()).headers, {});
    const announced = await db('outbox').where({ subject: 'evt.inst-a.message.received' }).orderBy('seq').pluck('msg_id');
    assert.deepEqual(announced, [first.id, m2.id, m3.id]);
    assert.equal((await db('outbox').where({ msg_id: m3.id }).first()).payload, JSON.stringify(m3));
  });

  it('a failing statement leaves none of its rows (the guard rolls back with it)', async () => {
    const events = await count('events');
    // The event row violates the instances foreign key: the guard's incoming row must not stay.
    await assert.rejects(recordKeyedEvents(db, incoming([['m-orphan', 'x']]), [{ ...received('m-orphan'), instanceId: 'no-such-instance' }]));
    assert.equal(await count('incoming', { message_id: 'm-orphan' }), 0);
    assert.equal(await count('events'), events);
  });
});
