// Delivery receipts of our own messages: Baileys' `messages.update` (status numbers of
// proto.WebMessageInfo.Status) and `message-receipt.update` (per-participant receipts in groups)
// mapped to our statuses. A status only moves forward.
import { proto, type MessageUserReceiptUpdate, type WAMessageUpdate } from '@whiskeysockets/baileys';
import type { DeliveryStatus, Receipt } from '@switchboard/core';
import { normalised } from './jids.ts';

const Status = proto.WebMessageInfo.Status;

const BY_PROTO_STATUS: Record<number, DeliveryStatus> = {
  [Status.ERROR]: 'failed',
  [Status.PENDING]: 'pending',
  [Status.SERVER_ACK]: 'sent',
  [Status.DELIVERY_ACK]: 'delivered',
  [Status.READ]: 'read',
  [Status.PLAYED]: 'played',
};

const RANK: Record<DeliveryStatus, number> = { failed: 0, pending: 1, sent: 2, delivered: 3, read: 4, played: 5 };

export function statusFromProto(status: number | null | undefined): DeliveryStatus | null {
  if (typeof status !== 'number') return null;
  return BY_PROTO_STATUS[status] ?? null;
}

/** Receipts of our messages in one `messages.update` batch (other updates are ignored). */
export function receiptsFromUpdates(updates: WAMessageUpdate[]): Receipt[] {
  const out: Receipt[] = [];
  for (const { key, update } of updates) {
    const status = statusFromProto(update.status);
    if (key.fromMe && key.id && status) out.push({ messengerId: key.id, status });
  }
  return out;
}

/**
 * Receipts of our messages from group participants: played > read > delivered. Receipts of our
 * own devices are left out: Baileys reports our phone's "sender" receipt (it got its copy) in a
 * group as a `readTimestamp` of our own user, which would read as the message being read.
 * `me`: our own user's JIDs (phone number and LID), normalised.
 */
export function receiptsFromUserReceipts(updates: MessageUserReceiptUpdate[], me: ReadonlySet<string>): Receipt[] {
  const out: Receipt[] = [];
  for (const { key, receipt } of updates) {
    if (!key.fromMe || !key.id) continue;
    if (me.has(normalised(receipt.userJid) ?? '')) continue;
    const status: DeliveryStatus | null = receipt.playedTimestamp
      ? 'played'
      : receipt.readTimestamp
        ? 'read'
        : receipt.receiptTimestamp
          ? 'delivered'
          : null;
    if (status) out.push({ messengerId: key.id, status });
  }
  return out;
}

/**
 * Remembers the last status reported per message (bounded, oldest forgotten first) and lets
 * through only receipts that move it forward. `failed` is accepted only before the message
 * was acknowledged by the server.
 */
export class ForwardOnlyReceipts {
  private readonly last = new Map<string, DeliveryStatus>();

  constructor(private readonly capacity = 10_000) {}

  accept(receipt: Receipt): boolean {
    const previous = this.last.get(receipt.messengerId);
    if (previous) {
      const moved =
        receipt.status === 'failed' ? RANK[previous] <= RANK.pending && previous !== 'failed' : RANK[receipt.status] > RANK[previous];
      if (!moved) return false;
    }
    this.last.delete(receipt.messengerId);
    this.last.set(receipt.messengerId, receipt.status);
    if (this.last.size > this.capacity) this.last.delete(this.last.keys().next().value as string);
    return true;
  }
}
