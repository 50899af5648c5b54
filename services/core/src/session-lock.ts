// The PostgreSQL advisory-lock key that makes one session the only owner of an instance's
// WhatsApp account. A session holds it (services/session/src/owner-lock.ts); the operator takes it
// for a moment before erasing or deleting an instance's records, so no session that is still
// running somewhere (a pod the operator force-deleted on a lost node) can write them again.
import { createHash } from 'node:crypto';

/** 64 bits of a hash of the instance id, as a signed bigint string. */
export function sessionLockKey(instanceId: string): string {
  return createHash('sha256').update(`switchboard/session/${instanceId}`).digest().readBigInt64BE(0).toString();
}
