// The instance row's connection (state, phone, QR) and its `connection.update` {state,
// previousState, phone, reason} event, written together. Sessions record what their driver
// reports; the gateway and the operator record what they decide while no session runs (a stop, a
// reset, a pause set on the resource), so clients see every change as an event.
import type { Knex } from 'knex';
import { recordEvent } from './events.ts';
import type { ConnectionState } from './network.ts';
import { noSessionHolds } from './session-lock.ts';
import { Problem } from './problem.ts';

export interface StateInfo {
  qr?: string | null;
  phone?: string | null;
  reason?: string | null;
}

/** Returns true when the state or the phone changed (and an event was recorded): a reset of a
 *  paused instance stays `stopped` but unlinks its phone, and clients must hear of it. */
export async function recordConnectionState(db: Knex, instanceId: string, state: ConnectionState, info: StateInfo = {}): Promise<boolean> {
  return db.transaction(async (trx) => {
    // No key changes: a no-key lock, which leaves the dispatcher's intake (a key-share lock) alone.
    const row = await trx('instances').where({ id: instanceId }).select('state', 'phone', 'qr_code').forNoKeyUpdate().first();
    if (!row) return false; // the instance was deleted meanwhile
    const phone = info.phone !== undefined ? info.phone : state === 'logged_out' ? null : row.phone;
    // The QR is only meaningful while waiting for a scan.
    const qr = state === 'awaiting_scan' ? (info.qr ?? row.qr_code) : null;
    await trx('instances').where({ id: instanceId }).update({ state, phone, qr_code: qr, updated_at: trx.fn.now() });
    if (row.state === state && row.phone === phone) return false;
    // The event names the account it concerns: the phone now, or the one a logout or reset unlinked,
    // so a `disconnected` consumer learns which number left.
    await recordEvent(trx, {
      instanceId,
      type: 'connection.update',
      data: { state, previousState: row.state, phone: phone ?? row.phone, reason: info.reason ?? null },
    });
    return true;
  });
}

/**
 * Locks the instance's row, then tries its owner lock (held to the end of `trx`). The row first:
 * two such checks (gateways, the operator) then queue on the row instead of each taking the
 * other's moment on the owner lock for a session's. `unheld` is false while a session holds it.
 */
export async function lockUnheldInstance(trx: Knex.Transaction, instanceId: string): Promise<{ row?: { state: string; paused: boolean }; unheld: boolean }> {
  const found = await trx('instances').where({ id: instanceId }).forNoKeyUpdate().first('state', 'paused');
  const row = found ? { state: found.state as string, paused: Boolean(found.paused) } : undefined;
  return { row, unheld: await noSessionHolds(trx, instanceId) };
}

/** Records the state `decide` picks from the instance's row, for an instance no session holds
 *  (lockUnheldInstance). True when a change was recorded. */
export async function recordStateIfUnheld(
  db: Knex,
  instanceId: string,
  decide: (row: { state: string; paused: boolean }) => { state: ConnectionState; reason: string | null } | null,
): Promise<boolean> {
  return db.transaction(async (trx) => {
    const { row, unheld } = await lockUnheldInstance(trx, instanceId);
    const next = row && unheld ? decide(row) : null;
    return next ? recordConnectionState(trx, instanceId, next.state, { reason: next.reason }) : false;
  });
}

/** Erases the pairing of an instance no session holds: its credentials, its phone. The record then
 *  shows the state the next session starts from — `starting`, or `stopped` when paused — reason
 *  `reset`. False, changing nothing, while a session holds the instance (see noSessionHolds). */
export async function resetUnheldSession(db: Knex, instanceId: string): Promise<boolean> {
  return db.transaction(async (trx) => {
    const { row, unheld } = await lockUnheldInstance(trx, instanceId);
    if (!unheld) return false;
    await trx('auth_state').where({ instance_id: instanceId }).delete();
    // The unlink the operator asked of the stopping session is done (or was not possible): the
    // next session that stops must not unlink the fresh pairing.
    await trx('instances').where({ id: instanceId }).whereNotNull('unlink_requested_at').update({ unlink_requested_at: null });
    if (row) await recordConnectionState(trx, instanceId, row.paused ? 'stopped' : 'starting', { phone: null, reason: 'reset' });
    return true;
  });
}

/** The answer to a reset while a session that does not answer still holds the instance. */
export function sessionBusy(): Problem {
  return new Problem(503, 'session_busy', 'The instance session is stopping or starting; retry the reset shortly.', undefined, { 'Retry-After': '1' });
}
