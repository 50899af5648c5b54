// SendItemWriter against PostgreSQL: concurrent sends share one statement, and a batch refused for
// one item's sake (a full queue, a deleted instance) still gives every item its own answer, in
// arrival order, without costing the other instances' items anything.
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { SEND_QUEUE_LIMIT, newId, newMessengerId } from '@switchboard/core';
import { SendItemWriter, type NewSendItem } from '../src/sending/send-item-writer.ts';
import { openTestDatabase } from '../../../test/support/services.ts';

describe('SendItemWriter (PostgreSQL)', () => {
  let db: Knex;
  let drop: () => Promise<void>;
  before(async () => {
    ({ db, drop } = await openTestDatabase());
    for (const id of ['inst-a', 'inst-b']) await db('instances').insert({ id, name: id, token_hash: `h-${id}`, token_sealed: 's' });
  });
  after(async () => drop());

  const item = (instanceId: string, key: string | null = null): NewSendItem => ({
    id: newId('msg'),
    instance_id: instanceId,
    messenger_id: newMessengerId(),
    phone: '5511988887777',
    type: 'text',
    payload: '{}',
    status: 'queued',
    idempotency_key: key,
    content_hash: 'h',
    expires_at: new Date(Date.now() + 60_000),
    trace_context: null,
  });
  const queued = async (id: string) => (await db('instances').where({ id }).first('queued_count')).queued_count;

  it('writes concurrent items with their outbox rows, in arrival order per instance', async () => {
    const writer = new SendItemWriter(db);
    const items = Array.from({ length: 20 }, (_, i) => item(i % 2 ? 'inst-a' : 'inst-b'));
    assert.deepEqual(await Promise.all(items.map((i) => writer.write(i))), items.map(() => 'queued'));
    const outbox = await db('outbox').whereIn('msg_id', items.map((i) => i.id)).orderBy('seq').pluck('msg_id');
    assert.deepEqual(outbox, items.map((i) => i.id));
    assert.equal(await queued('inst-a'), 10);
  });

  it('answers each item of a refused batch on its own: full queue, deleted instance, used key', async () => {
    const writer = new SendItemWriter(db);
    await db('instances').where({ id: 'inst-a' }).update({ queued_count: SEND_QUEUE_LIMIT - 1 });
    const keyed = item('inst-b', 'order-1');
    assert.equal(await writer.write(keyed), 'queued');
    const batch = [item('inst-a'), item('inst-a'), item('inst-b'), item('inst-gone'), { ...item('inst-b', 'order-1') }, item('inst-b'), item('inst-a')];
    const results = await Promise.all(batch.map((i) => writer.write(i)));
    assert.deepEqual(results, ['queued', 'queue_full', 'queued', 'instance_gone', 'key_in_use', 'queued', 'queue_full']);
    assert.equal(await queued('inst-a'), SEND_QUEUE_LIMIT);
    const written = await db('send_items').whereIn('id', batch.map((i) => i.id)).pluck('id');
    assert.deepEqual(new Set(written), new Set([batch[0].id, batch[2].id, batch[5].id]));
  });

  it('fails only the item the database refuses for any other reason: the rest of its batch is written', async () => {
    const writer = new SendItemWriter(db);
    const batch = [item('inst-b'), { ...item('inst-b'), phone: `${'1'.repeat(80)}@lid` }, item('inst-b')];
    const results = await Promise.allSettled(batch.map((i) => writer.write(i)));
    assert.deepEqual(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled']);
    const written = await db('send_items').whereIn('id', batch.map((i) => i.id)).pluck('id');
    assert.deepEqual(new Set(written), new Set([batch[0].id, batch[2].id]));
  });
});
