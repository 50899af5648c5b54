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
  for (let attempt = 0; ; attempt++) {
    const { rows } = await trx.raw('SELECT pg_try_advisory_xact_lock(?::bigint) AS free', [sessionLockKey(instanceId)]);
    if (rows[0]?.free) return true;
    if (attempt === CHECKER_RELEASE_WAITS_MS.length) return false;
    await new Promise((r) => setTimeout(r, CHECKER_RELEASE_WAITS_MS[attempt]));
  }
}

/**
 * Another check of the same instance (lockUnheldInstance, which locks the row first) may hold the
 * owner lock for a moment after it let go of the row: at commit PostgreSQL frees row locks before
 * advisory ones, so a transaction that waited for the row can try the owner lock in between and
 * take a brief check for a session. Such a check is retried after these waits before it counts
 * as a session's (which holds the lock for its whole life); a few percent of back-to-back checks
 * hit that gap.
 */
const CHECKER_RELEASE_WAITS_MS = [5, 10, 20];
