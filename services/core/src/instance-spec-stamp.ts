// In cluster mode two processes write an instance's desired state (name, project, paused) to its
// record: the gateway, which changes the Instance resource and then the record, and the operator,
// which brings the record in line with the resource it read. A reconcile that read the resource
// just before an API call changed it would write the older spec over the newer one (a disconnect
// briefly undone: `starting` recorded, a session pod started and stopped again). So the gateway
// stamps the record with the version its change made before it writes the values, and the
// operator neither writes nor acts on a read older than the record's stamp: it reads again.
// (Two API calls on one instance that race each other are ordered by the resource; the
// reconcile after them brings the record in line with its last version.)
import type { Knex } from 'knex';

/** A version of an Instance resource's spec: its uid (a re-created resource starts its
 *  generation at 1 again) and its generation (bumped by every spec change). */
export interface SpecStamp {
  uid: string;
  generation: number;
}

/** Where-clause for a record whose stamp is not newer than `stamp`: none yet, another resource's
 *  (the one it had was deleted and made again), or the same resource's at most this generation. */
export function followsNoNewerSpec(stamp: SpecStamp): (q: Knex.QueryBuilder) => void {
  return (q) => {
    q.whereNull('spec_generation').orWhereRaw('spec_uid is distinct from ?', [stamp.uid]).orWhere('spec_generation', '<=', stamp.generation);
  };
}

/** Whether `recorded` is a later version of the same resource than `read` (what
 *  followsNoNewerSpec refuses to write over). */
export function isNewerSpec(recorded: SpecStamp | undefined, read: SpecStamp | undefined): boolean {
  return recorded !== undefined && read !== undefined && recorded.uid === read.uid && recorded.generation > read.generation;
}

/** The record now follows this version of its resource; an older stamp never replaces a newer one. */
export async function recordSpecStamp(db: Knex, instanceId: string, stamp: SpecStamp): Promise<void> {
  await db('instances').where({ id: instanceId }).where(followsNoNewerSpec(stamp)).update({ spec_uid: stamp.uid, spec_generation: stamp.generation });
}

/** The stamp of a resource as the Kubernetes API returned it, if it carries one. */
export function specStampOf(resource: unknown): SpecStamp | undefined {
  const metadata = (resource as { metadata?: { uid?: unknown; generation?: unknown } } | null)?.metadata;
  return typeof metadata?.uid === 'string' && typeof metadata.generation === 'number' ? { uid: metadata.uid, generation: metadata.generation } : undefined;
}
