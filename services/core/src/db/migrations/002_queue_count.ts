// The per-instance count of queued sends, kept by the database itself (DESIGN §5 "Sending": 429
// `queue_full` at 1000). Accepting a send is then ONE statement: the insert's trigger takes a slot
// (`UPDATE … WHERE queued_count < limit`, re-checked on the newest row version after any lock wait,
// so concurrent accepts can never pass the limit) or refuses with SQLSTATE SBQ01. Every write that
// moves an item into or out of `queued` — whichever service makes it — adjusts the count. The
// triggers run AFTER the row is written, so an insert skipped by ON CONFLICT DO NOTHING (a reused
// Idempotency-Key) takes no slot. Migration 020 counts `sending` items too.
import type { Knex } from 'knex';

/** The specification's send-queue limit per instance. */
export const SEND_QUEUE_LIMIT = 1000;
/** SQLSTATE raised when an instance's queue is full. */
export const QUEUE_FULL_SQLSTATE = 'SBQ01';

/** The trigger function, holding a queue slot for each item whose status is one of `held`
 *  (`queued` here; migration 020 adds `sending`). */
export function queueCountFunction(held: string[]): string {
  const holds = (row: 'new' | 'old') => `${row}.status in (${held.map((s) => `'${s}'`).join(', ')})`;
  return `
    create or replace function send_items_queue_count() returns trigger language plpgsql as $$
    begin
      if tg_op = 'INSERT' then
        if ${holds('new')} then
          update instances set queued_count = queued_count + 1 where id = new.instance_id and queued_count < ${SEND_QUEUE_LIMIT};
          -- No row: the queue is full, or the instance is gone (then the foreign key reports it).
          if not found and exists (select 1 from instances where id = new.instance_id) then
            raise exception 'the send queue of instance % is full', new.instance_id using errcode = '${QUEUE_FULL_SQLSTATE}';
          end if;
        end if;
        return null;
      elsif tg_op = 'UPDATE' then
        if (${holds('old')}) <> (${holds('new')}) then
          update instances set queued_count = queued_count + case when ${holds('new')} then 1 else -1 end where id = new.instance_id;
        end if;
        return null;
      end if;
      if ${holds('old')} then
        update instances set queued_count = queued_count - 1 where id = old.instance_id;
      end if;
      return null;
    end $$`;
}

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('instances', (t) => {
    t.integer('queued_count').notNullable().defaultTo(0);
  });
  await knex.raw(`update instances i set queued_count = (select count(*) from send_items s where s.instance_id = i.id and s.status = 'queued')`);
  await knex.raw(queueCountFunction(['queued']));
  await knex.raw('create trigger send_items_queue_slot after insert on send_items for each row execute function send_items_queue_count()');
  await knex.raw('create trigger send_items_queue_release after update of status or delete on send_items for each row execute function send_items_queue_count()');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop trigger if exists send_items_queue_release on send_items');
  await knex.raw('drop trigger if exists send_items_queue_slot on send_items');
  await knex.raw('drop function if exists send_items_queue_count()');
  await knex.schema.alterTable('instances', (t) => {
    t.dropColumn('queued_count');
  });
}
