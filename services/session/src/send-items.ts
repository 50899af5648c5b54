// Status transitions of send-queue items, each with its event in the same transaction
// (DESIGN §5 "Sending" and "Events"). Every transition is conditional on the status it leaves,
// so a cancel, the expiry sweeper and the session never overwrite each other.
import type { Knex } from 'knex';
import { inSpan, recordEvent, recordSendFailure, recordSendStatus, sendEventData, type DeliveryStatus, type ItemStatus, type SendFailure } from '@switchboard/core';

export interface SendItemRow {
  id: string;
  instance_id: string;
  messenger_id: string;
  phone: string;
  type: string;
  payload: SendPayload | string;
  status: ItemStatus;
  expires_at: Date | string;
  trace_context: string | null;
}

export interface SendPayload {
  text?: string;
  caption?: string;
  fileName?: string;
  mimetype?: string;
  ptt?: boolean;
  seconds?: number;
  /** A voice note's waveform, base64 (see the gateway's voice-note.ts). */
  waveform?: string;
  mediaId?: string;
}


type Trx = Knex | Knex.Transaction;

export function payloadOf(item: SendItemRow): SendPayload {
  return typeof item.payload === 'string' ? (JSON.parse(item.payload) as SendPayload) : item.payload;
}

async function setStatus(trx: Trx, item: SendItemRow, from: ItemStatus[], to: ItemStatus, error: SendFailure | null = null): Promise<boolean> {
  const changed = await trx('send_items')
    .where({ id: item.id })
    .whereIn('status', from)
    .update({ status: to, error: error ? JSON.stringify(error) : null, updated_at: trx.fn.now() });
  return changed > 0;
}

/** queued → sending. False when someone else moved it first (cancel, sweeper). */
export async function markSending(trx: Trx, item: SendItemRow): Promise<boolean> {
  return setStatus(trx, item, ['queued'], 'sending');
}

/** The network took the message: sending → sent + `message.sent` and `message.status` `sent`.
 *  From `uncertain` too: a process that took over the session (this one lost its owner lock) gave
 *  up on the send meanwhile, and now it is known to have left. A receipt may already have moved
 *  the item further: then only `message.sent` is still due. A failed item stays as it is. */
export async function markSent(trx: Knex.Transaction, item: SendItemRow): Promise<void> {
  const row = await trx('send_items').where({ id: item.id }).forUpdate().first('status');
  const status = row?.status as ItemStatus | undefined;
  if (status === undefined || !(status in RECEIPT_RANK)) return;
  await recordEvent(trx, { instanceId: item.instance_id, type: 'message.sent', data: sendEventData(item), traceContext: item.trace_context });
  if (RECEIPT_RANK[status] !== 0) return;
  await setStatus(trx, item, [status], 'sent');
  // The status stream starts at `sent` (the network's server ack); later `sent` receipts add nothing.
  await recordSendStatus(trx, item, 'sent');
}

/** sending|queued → failed + `message.failed` and `message.status` `failed`. */
export async function markFailed(trx: Trx, item: SendItemRow, error: SendFailure): Promise<boolean> {
  if (!(await setStatus(trx, item, ['sending', 'queued'], 'failed', error))) return false;
  await recordSendFailure(trx, item, error);
  return true;
}

/** sending → uncertain + `message.uncertain`, whose `reason` is the item's error code. The item is
 *  never resent automatically. */
export async function markUncertain(trx: Trx, item: SendItemRow, error: SendFailure): Promise<boolean> {
  if (!(await setStatus(trx, item, ['sending'], 'uncertain', error))) return false;
  await recordEvent(trx, { instanceId: item.instance_id, type: 'message.uncertain', data: { ...sendEventData(item), reason: error.code }, traceContext: item.trace_context });
  return true;
}

/** queued → expired + `message.failed` with code `expired` and `message.status` `failed`. */
export async function markExpired(trx: Trx, item: SendItemRow): Promise<boolean> {
  const error = { code: 'expired', message: 'The item expired in the queue before it could be sent.' };
  if (!(await setStatus(trx, item, ['queued'], 'expired', error))) return false;
  await recordSendFailure(trx, item, error);
  return true;
}

export function isExpired(item: SendItemRow, now = new Date()): boolean {
  return new Date(item.expires_at).getTime() <= now.getTime();
}

// Receipts move an item forward only: sent < delivered < read < played. `sending` and
// `uncertain` may advance too, since a receipt proves the message left. A `failed` receipt counts
// until a recipient's receipt came (`sending`, `uncertain`, `sent`): the drivers report it only
// before the server acknowledged the message, and `sent` is recorded when the message left the
// socket, before the server answered (it may refuse it). After `delivered` it would move the item
// back. failed is terminal.
const RECEIPT_RANK: Partial<Record<ItemStatus, number>> = { sending: 0, uncertain: 0, sent: 1, delivered: 2, read: 3, played: 4 };

/** Applies a network receipt; records `message.status` only when the item moved forward. */
export async function applyReceipt(trx: Knex.Transaction, instanceId: string, messengerId: string, status: DeliveryStatus): Promise<boolean> {
  const item = (await trx('send_items').where({ instance_id: instanceId, messenger_id: messengerId }).forUpdate().first()) as SendItemRow | undefined;
  if (!item) return false;
  const current = RECEIPT_RANK[item.status];
  if (current === undefined) return false; // queued, failed, cancelled, expired: receipts change nothing
  // The receipt joins the trace of the send it reports on.
  return inSpan('session receipt', { parent: item.trace_context, attributes: { 'switchboard.receipt.status': status } }, () => moveForward(trx, item, current, status));
}

async function moveForward(trx: Knex.Transaction, item: SendItemRow, current: number, status: DeliveryStatus): Promise<boolean> {
  if (status === 'failed') {
    if (current > RECEIPT_RANK.sent!) return false;
    const error = { code: 'network_failed', message: 'The network reported the message as failed.' };
    await setStatus(trx, item, [item.status], 'failed', error);
    await recordSendFailure(trx, item, error);
    return true;
  }
  const next = RECEIPT_RANK[status as ItemStatus];
  if (next === undefined || next <= current) return false;
  await setStatus(trx, item, [item.status], status as ItemStatus);
  // A receipt that skips a step (a read that came before its delivery receipt, which is then
  // ignored) implies the steps before it: each is recorded, so the status stream is always
  // sent → delivered → read (→ played), as clients that follow it expect.
  for (const step of STATUS_STEPS.slice(current, next)) await recordSendStatus(trx, item, step);
  return true;
}

/** The statuses of RECEIPT_RANK 1 to 4, in order. */
const STATUS_STEPS: DeliveryStatus[] = ['sent', 'delivered', 'read', 'played'];
