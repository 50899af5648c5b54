// The send queue: accept (202), list the last 50 (and page back), read one, cancel while queued.
import { ITEM_STATUSES, Problem, problems, recordSendFailure, type Db } from '@switchboard/core';
import { route } from '../http/route.ts';
import { Accepted, IdempotencyKey, SendBody, SendItemRecord, listOf } from '../schemas.ts';
import { sendItemRecord } from '../records.ts';
import { acceptSend } from '../sending/accept.ts';
import { isExpired, markExpired, type SendItemRow } from '@switchboard/session';
import { z } from 'zod';
import { loadInstance } from './common.ts';
import { PageQuery, readPage } from './list-page.ts';

/** Room for 32 MiB of media in base64 plus the other fields; larger bodies are refused unread.
 *  Base64 escaped as some JSON encoders write it (PHP's json_encode writes "/" as "\/", one
 *  character in 64 of random data) gets a sixteenth more: the exact 32 MiB check follows parsing. */
const BASE64_OF_32_MIB = Math.ceil((32 * 1024 * 1024) / 3) * 4;
export const SEND_BODY_LIMIT = BASE64_OF_32_MIB + Math.ceil(BASE64_OF_32_MIB / 16) + 256 * 1024;

const CANCELLED = { code: 'cancelled', message: 'Cancelled through the API before it was sent.' };

export const messageRoutes = [
  route({
    method: 'post',
    path: '/api/instances/{id}/messages',
    auth: 'any',
    tag: 'messages',
    summary: 'Queue a message; acceptance does not prove delivery (follow message.status events)',
    body: SendBody,
    bodyLimit: SEND_BODY_LIMIT,
    responses: { 202: Accepted, 400: 'invalid', 409: 'paused, offline or idempotency conflict', 413: 'media too large', 422: 'unsupported option or conversion failure', 429: 'queue full' },
    handler: async ({ deps, ctx, params, body, principal }) => {
      // A header sent empty is refused, not read as "no key": the client meant to protect the send.
      const rawKey = ctx.headers['idempotency-key'];
      // Node joins repeated headers with ", ": two keys would silently become a third one.
      if ((ctx.req.headersDistinct['idempotency-key']?.length ?? 0) > 1) {
        throw problems.validation([{ path: 'Idempotency-Key', message: 'must be sent once' }]);
      }
      let key: string | undefined;
      if (rawKey !== undefined) {
        const parsed = IdempotencyKey.safeParse(rawKey);
        if (!parsed.success) throw problems.validation([{ path: 'Idempotency-Key', message: 'must be 1 to 128 printable characters' }]);
        key = parsed.data;
      }
      const instance = await loadInstance(deps, params.id, principal);
      return { status: 202, body: await acceptSend(deps, params.id, body, key, instance) };
    },
  }),
  route({
    method: 'get',
    path: '/api/instances/{id}/messages',
    auth: 'any',
    tag: 'messages',
    summary: 'The last 50 sends, newest first (`before`, `limit`: page back; `status`: only sends in it)',
    query: PageQuery.extend({ status: z.enum(ITEM_STATUSES).optional().meta({ description: 'Only the sends in this status.' }) }),
    responses: { 200: listOf(SendItemRecord) },
    handler: async ({ deps, params, query }) => {
      await loadInstance(deps, params.id);
      const list = deps.db('send_items as s').where({ 's.instance_id': params.id }).select('s.*');
      if (query.status) list.where({ 's.status': query.status });
      const rows = await readPage(deps.db, list, { table: 'send_items', alias: 's' }, params.id, query);
      return { body: { data: rows.map(sendItemRecord) } };
    },
  }),
  route({
    method: 'get',
    path: '/api/instances/{id}/messages/{messageId}',
    auth: 'any',
    tag: 'messages',
    summary: 'One send with its status',
    responses: { 200: SendItemRecord, 404: 'absent' },
    handler: async ({ deps, params }) => {
      const row = await deps.db('send_items').where({ instance_id: params.id, id: params.messageId }).first();
      if (!row) throw await absentMessage(deps.db, params.id);
      return { body: sendItemRecord(row) };
    },
  }),
  route({
    method: 'delete',
    path: '/api/instances/{id}/messages/{messageId}',
    auth: 'any',
    tag: 'messages',
    summary: 'Cancel a send that is still queued',
    responses: { 200: SendItemRecord, 404: 'absent', 409: 'no longer queued' },
    handler: async ({ deps, params }) => {
      const outcome = await deps.db.transaction(async (trx) => {
        const item = (await trx('send_items').where({ instance_id: params.id, id: params.messageId }).forUpdate().first()) as SendItemRow | undefined;
        if (!item) throw await absentMessage(trx, params.id);
        if (item.status !== 'queued') return { refused: item.status };
        // Past its time but not yet swept: it is expired, not cancellable (the sweeper's work, done now).
        if (isExpired(item)) {
          await markExpired(trx, item);
          return { refused: 'expired' };
        }
        // The item says why it was not sent, as its message.failed event does (an expired one too).
        const [cancelled] = await trx('send_items')
          .where({ id: item.id })
          .update({ status: 'cancelled', error: JSON.stringify(CANCELLED), updated_at: trx.fn.now() })
          .returning('*');
        await recordSendFailure(trx, cancelled, CANCELLED);
        return { cancelled };
      });
      deps.relay.kick();
      if (!outcome.cancelled) throw problems.conflict('not_cancellable', `The message is ${outcome.refused}; only queued messages can be cancelled.`);
      return { body: sendItemRecord(outcome.cancelled) };
    },
  }),
];

/** The 404 of a message that is not there, naming the instance when that is what is missing
 *  (the administrative key reaches any instance id, so it may name none). */
async function absentMessage(db: Db, instanceId: string): Promise<Problem> {
  const instance = await db('instances').where({ id: instanceId }).first('id');
  return problems.notFound(instance ? 'The message' : 'The instance');
}
