// Applies what the driver reports about the connection to the instance row (state, phone, QR)
// and records `connection.update` {state, previousState, phone, reason} when the state changed.
import type { Knex } from 'knex';
import { recordEvent, type ConnectionState } from '@switchboard/core';

export interface StateInfo {
  qr?: string | null;
  phone?: string | null;
  reason?: string | null;
}

/** Returns true when the state changed (and an event was recorded). */
export async function recordConnectionState(db: Knex, instanceId: string, state: ConnectionState, info: StateInfo = {}): Promise<boolean> {
  return db.transaction(async (trx) => {
    const row = await trx('instances').where({ id: instanceId }).select('state', 'phone', 'qr_code').forUpdate().first();
    if (!row) return false; // the instance was deleted meanwhile
    const phone = info.phone !== undefined ? info.phone : state === 'logged_out' ? null : row.phone;
    // The QR is only meaningful while waiting for a scan.
    const qr = state === 'awaiting_scan' ? (info.qr ?? row.qr_code) : null;
    await trx('instances').where({ id: instanceId }).update({ state, phone, qr_code: qr, updated_at: trx.fn.now() });
    if (row.state === state) return false;
    await recordEvent(trx, {
      instanceId,
      type: 'connection.update',
      data: { state, previousState: row.state, phone, reason: info.reason ?? null },
    });
    return true;
  });
}
