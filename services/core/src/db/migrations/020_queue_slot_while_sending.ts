// An item keeps its queue slot while it is being sent (migration 002 counted `queued` only). A
// send that met a closed connection goes back to `queued`, and under 002 it took its slot back
// whatever the count: an accept that came in while it was `sending` had taken that slot, and the
// queue held 1001 (found by a two-replica stress test). Counting `queued` and `sending` together,
// a requeue moves nothing, and the limit is the items not yet handed to the network.
import type { Knex } from 'knex';
import { queueCountFunction } from './002_queue_count.ts';

async function countAgain(knex: Knex, held: string[]): Promise<void> {
  // Writers wait for the function and the count to change together (a rolling upgrade's gateways
  // keep accepting meanwhile). `instances` is locked first, in the mode migration 021's foreign key
  // takes next: a state write arriving between the recount's row locks and that key would
  // otherwise deadlock with the migration.
  await knex.raw(`set local lock_timeout = '5s'`);
  await knex.raw('lock table instances in share row exclusive mode');
  await knex.raw('lock table send_items in share mode');
  await knex.raw(queueCountFunction(held));
  await knex.raw(`update instances i set queued_count = (select count(*) from send_items s where s.instance_id = i.id and s.status = any(?))`, [held]);
}

export async function up(knex: Knex): Promise<void> {
  await countAgain(knex, ['queued', 'sending']);
}

export async function down(knex: Knex): Promise<void> {
  await countAgain(knex, ['queued']);
}
