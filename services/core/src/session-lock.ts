// The PostgreSQL advisory-lock key that makes one session the only owner of an instance's
// WhatsApp account. A session holds it (services/session/src/owner-lock.ts); the operator takes it
// for a moment before erasing or deleting an instance's records, so no session that is still
// running somewhere (a pod the operator force-deleted on a lost node) can write them again.
import { createHash } from 'node:crypto';
import type { Knex } from 'knex';

/** 64 bits of a hash of the instance id, as a signed bigint string. */
export function sessionLockKey(instanceId: string): string {
  return createHash('sha256').update(`switchboard/session/${instanceId}`).digest().readBigInt64BE(0).toString();
}

/**
 * Whether no session holds the instance's owner lock, and none can take it before `trx` ends.
 * Its pod being gone is not enough: a pod force-deleted on a node cut off from the API server
 * may still run there, connected to the database and to WhatsApp.
 */
export async function noSessionHolds(trx: Knex.Transaction, instanceId: string): Promise<boolean> {
  const { rows } = await trx.raw('SELECT pg_try_advisory_xact_lock(?::bigint) AS free', [sessionLockKey(instanceId)]);
  return Boolean(rows[0]?.free);
}
