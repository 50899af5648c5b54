// The events of a send's outcome (DESIGN §5 "Events"), shared by the session, which sends, and
// the gateway, which cancels. Each is recorded in the caller's transaction with the item's change.
import type { Knex } from 'knex';
import type { DeliveryStatus } from './network.ts';
import { recordEvent } from './events.ts';

/** The statuses of a send-queue item (DESIGN §5). */
export const ITEM_STATUSES = ['queued', 'sending', 'sent', 'delivered', 'read', 'played', 'failed', 'uncertain', 'cancelled', 'expired'] as const;
export type ItemStatus = (typeof ITEM_STATUSES)[number];
/** An item in one of these holds a queue slot and is not done with; the others are outcomes. */
export const PENDING_ITEM_STATUSES: readonly ItemStatus[] = ['queued', 'sending'];

/** The columns of a send-queue item the events carry. */
export interface SendItemRef {
  id: string;
  instance_id: string;
  messenger_id: string;
  phone: string;
  type: string;
  trace_context?: string | null;
}

export interface SendFailure {
  code: string;
  message: string;
}

type Db = Knex | Knex.Transaction;

export function sendEventData(item: SendItemRef): Record<string, unknown> {
  return { messageId: item.id, messengerId: item.messenger_id, phone: item.phone, type: item.type };
}

export function recordSendStatus(db: Db, item: SendItemRef, status: DeliveryStatus) {
  return recordEvent(db, { instanceId: item.instance_id, type: 'message.status', data: { messageId: item.id, messengerId: item.messenger_id, status }, traceContext: item.trace_context });
}

// A send that will never reach its recipient ends its status stream with `failed`, as one that
// left has `sent` and later receipts, so a consumer that follows only `message.status` learns every
// outcome but the uncertain one (whether it left is unknown).
export async function recordSendFailure(db: Db, item: SendItemRef, error: SendFailure): Promise<void> {
  await recordEvent(db, { instanceId: item.instance_id, type: 'message.failed', data: { ...sendEventData(item), error }, traceContext: item.trace_context });
  await recordSendStatus(db, item, 'failed');
}
