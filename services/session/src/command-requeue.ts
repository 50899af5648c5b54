// Publishes again, through the outbox, the command of every queued send item — oldest first — for
// a bus that may have lost them (the in-process bus after a restart; a stream that dropped old
// messages). The bus drops repeats within its duplicate window, and the send loop skips items no
// longer queued, so a command published twice is harmless.
import { enqueueOutbox, subjects, type Db } from '@switchboard/core';

export interface RequeueScope {
  /** One instance's items; every instance's when absent. */
  instanceId?: string;
  /** Only items at least this old (ms, by the database's clock). */
  olderThanMs?: number;
  /** The bus lost every command (the in-process bus after a restart): the outbox's command rows
   *  left unpublished are replaced too, so that the newest sends, whose rows survived, do not go
   *  out ahead of the older ones. Only before the relay starts. */
  replaceOutboxCommands?: boolean;
}

/** How many commands it queued again; the caller kicks its relay when any were. */
export async function requeueQueuedCommands(db: Db, scope: RequeueScope = {}): Promise<number> {
  const query = db('send_items').where({ status: 'queued' }).orderBy('created_at').orderBy('id').select('id', 'instance_id');
  if (scope.instanceId) query.where({ instance_id: scope.instanceId });
  if (scope.olderThanMs) query.where('created_at', '<=', db.raw(`now() - ? * interval '1 millisecond'`, [scope.olderThanMs]));
  const items = (await query) as { id: string; instance_id: string }[];
  if (!items.length && !scope.replaceOutboxCommands) return 0;
  await db.transaction(async (trx) => {
    if (scope.replaceOutboxCommands) await trx('outbox').where('subject', 'like', `${subjects.command('')}%`).delete();
    for (const item of items) await enqueueOutbox(trx, { subject: subjects.command(item.instance_id), msgId: item.id, payload: JSON.stringify({ id: item.id }) });
  });
  return items.length;
}
