// The operator's access to the system of record: the `instances` and `projects` tables
// (services/core/src/db/migrations/001_foundation.ts). Every write is idempotent, so a reconcile
// that is interrupted and repeated leaves the same rows.
import type { Knex } from 'knex';
import { followsNoNewerSpec, lockUnheldInstance, randomToken, recordConnectionState, recordStateIfUnheld, resetUnheldSession, sessionLockKey, TOKEN_PREFIXES, type Crypto, type SpecStamp } from '@switchboard/core';
import type { SessionState } from './resources.ts';

export interface InstanceRow {
  id: string;
  name: string;
  projectId: string | null;
  state: SessionState;
  paused: boolean;
  phone: string | null;
  /** The version of the resource's spec the record follows (core/instance-spec-stamp.ts). */
  specStamp?: SpecStamp;
  /** A finalizer began deleting the instance (markUnlinkRequested for a delete): its session has
   *  unlinked the phone, and the records are to go. */
  deleting: boolean;
}

export interface DesiredInstance {
  id: string;
  name: string;
  projectId: string | null;
  paused: boolean;
  /** The version of the resource this was read from (core/instance-spec-stamp.ts). */
  stamp?: SpecStamp;
}

/** States only a running session records: a record left in one by a dead session is stale. */
const LIVE_STATES = new Set(['connected', 'awaiting_scan']);
/** A record that says a session is up (or, paused, that it has not stopped yet): one no session
 *  holds was left so by a dead one — killed while it ran, or while it stopped for a pause. */
const claimsLiveSession = (r: { state: string; paused: boolean }) => (r.paused ? r.state !== 'stopped' : LIVE_STATES.has(r.state));

export class InstanceStore {
  constructor(
    private readonly db: Knex,
    private readonly crypto: Crypto,
    /** Makes a new instance token (the gateway's format). */
    private readonly newToken: () => string = () => randomToken(TOKEN_PREFIXES.instance),
  ) {}

  async find(id: string): Promise<InstanceRow | undefined> {
    const row = await this.db('instances').where({ id }).first('id', 'name', 'project_id', 'state', 'paused', 'phone', 'spec_uid', 'spec_generation', 'deletion_requested_at');
    return row ? toRow(row) : undefined;
  }

  async listStates(): Promise<(Pick<InstanceRow, 'id' | 'state' | 'phone' | 'paused' | 'deleting'> & { tokenHash: string })[]> {
    const rows = await this.db('instances').select('id', 'state', 'phone', 'paused', 'token_hash', 'deletion_requested_at');
    return rows.map((r) => ({ id: r.id, state: r.state, phone: r.phone, paused: Boolean(r.paused), tokenHash: r.token_hash, deleting: Boolean(r.deletion_requested_at) }));
  }

  /** Inserts the row of an Instance created with kubectl; a row that already exists is kept as it is. */
  async adopt(desired: DesiredInstance): Promise<{ created: boolean }> {
    const token = this.newToken();
    const projectId = await this.existingProject(desired.projectId);
    const inserted = await this.db('instances')
      .insert({
        id: desired.id,
        name: desired.name,
        project_id: projectId,
        paused: desired.paused,
        state: desired.paused ? 'stopped' : 'starting',
        ...stampColumns(desired.stamp),
        token_hash: this.crypto.hashToken(token),
        token_sealed: this.crypto.seal(token),
      })
      .onConflict('id')
      .ignore()
      .returning('id');
    return { created: inserted.length > 0 };
  }

  /** The instance token, recovered from its sealed copy (for the token Secret), and its hash as
   *  listStates gives it. */
  async token(id: string): Promise<{ token: string; hash: string } | undefined> {
    const row = await this.db('instances').where({ id }).first('token_sealed', 'token_hash');
    return row ? { token: this.crypto.open(row.token_sealed), hash: row.token_hash } : undefined;
  }

  /** Brings name, project and paused in line with the resource (the desired run state). False,
   *  changing nothing, when the record follows a newer version of the resource than the one read:
   *  an API call changed both after this reconcile read the resource. */
  async applyDesired(desired: DesiredInstance, current: InstanceRow): Promise<boolean> {
    const projectId = await this.existingProject(desired.projectId);
    const patch: Record<string, unknown> = {};
    if (current.name !== desired.name) patch.name = desired.name;
    if (current.projectId !== projectId) patch.project_id = projectId;
    if (current.paused !== desired.paused) patch.paused = desired.paused;
    if (!Object.keys(patch).length) return true;
    return this.db.transaction(async (trx) => {
      const write = trx('instances').where({ id: desired.id });
      if (desired.stamp) write.where(followsNoNewerSpec(desired.stamp));
      if (!(await write.update({ ...patch, ...stampColumns(desired.stamp), updated_at: trx.fn.now() }))) return false;
      // Paused or started on the resource (kubectl), not through the API: the record and its
      // event say so now; the session that stops or starts next finds them already said.
      if ('paused' in patch) {
        await recordConnectionState(trx, desired.id, desired.paused ? 'stopped' : 'starting', { reason: desired.paused ? 'paused' : null });
      }
      return true;
    });
  }

  /** Drops the record's stamp: the next spec read is followed whatever its generation. */
  async forgetSpecStamp(id: string): Promise<void> {
    await this.db('instances').where({ id }).update({ spec_uid: null, spec_generation: null });
  }

  /** Erases the session's pairing (auth state) so it starts fresh. False, changing nothing, while
   *  a session still holds the instance. */
  async resetSession(id: string): Promise<boolean> {
    return resetUnheldSession(this.db, id);
  }

  /** Of these records, those whose state says a session is up (connected, waiting for a scan)
   *  while no session holds the instance's owner lock: their session process died (kill -9, a
   *  crash, a lost node) without recording it. One look at pg_locks for them all. */
  async withoutLiveSession(rows: Pick<InstanceRow, 'id' | 'state' | 'paused'>[]): Promise<string[]> {
    const live = rows.filter(claimsLiveSession);
    if (!live.length) return [];
    const { rows: held } = await this.db.raw(
      `SELECT ((classid::bigint << 32) | objid::bigint)::text AS key FROM pg_locks
       WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    );
    const heldKeys = new Set((held as { key: string }[]).map((r) => r.key));
    return live.filter((r) => !heldKeys.has(sessionLockKey(r.id))).map((r) => r.id);
  }

  /** Records that the session of an instance is gone (`reconnecting` when it was connected,
   *  `starting` when it waited for a scan: its QR died with it), reason `session_lost`; a paused
   *  one `stopped`, reason `paused`, as its session would have — if no session holds the instance
   *  (checked under its owner lock, so none takes it meanwhile) and the record still says one is
   *  up. True when recorded. */
  async recordSessionLost(id: string): Promise<boolean> {
    return recordStateIfUnheld(this.db, id, (row) => {
      if (!claimsLiveSession(row)) return null;
      if (row.paused) return { state: 'stopped', reason: 'paused' };
      return { state: row.state === 'connected' ? 'reconnecting' : 'starting', reason: 'session_lost' };
    });
  }

  /** Tells the session that stops next to unlink the device from the phone: its instance is being
   *  deleted or reset (a reset clears the mark). A delete also sets migration 015's mark, which is
   *  what a session process of the previous version reads during a rolling upgrade. */
  async markUnlinkRequested(id: string, reason: 'delete' | 'reset'): Promise<void> {
    const marks = reason === 'delete' ? ['unlink_requested_at', 'deletion_requested_at'] : ['unlink_requested_at'];
    // Written once: every reconcile while the pod terminates asks again.
    await this.db('instances')
      .where({ id })
      .andWhere((q) => marks.forEach((mark) => q.orWhereNull(mark)))
      .update(Object.fromEntries(marks.map((mark) => [mark, this.db.fn.now()])));
  }

  /** Deletes the instance; its messages, events, keys and media rows go with it (ON DELETE
   *  CASCADE). False, changing nothing, while a session still holds the instance. `onlyIfDeleting`:
   *  only a record a finalizer began deleting (`deletion_requested_at`), judged under the lock, so
   *  a record adopted meanwhile by a resource applied again is never the one deleted. */
  async delete(id: string, onlyIfDeleting = false): Promise<boolean> {
    return this.db.transaction(async (trx) => {
      if (!(await lockUnheldInstance(trx, id)).unheld) return false;
      const record = trx('instances').where({ id });
      const deleted = await (onlyIfDeleting ? record.whereNotNull('deletion_requested_at') : record).delete();
      if (deleted) await trx('auth_state').where({ instance_id: id }).delete(); // not a foreign key: deleted explicitly
      return true;
    });
  }

  /** True when the record did not exist (PostgreSQL: a row inserted, not updated, has xmax 0). An
   *  existing record is written only when its name changed: every reconcile (resyncs included)
   *  calls this, and `updatedAt` must not move without a change. */
  async ensureProject(id: string, name: string): Promise<boolean> {
    const [row] = await this.db('projects')
      .insert({ id, name })
      .onConflict('id')
      .merge({ name, updated_at: this.db.fn.now() })
      .where('projects.name', '<>', name)
      .returning(this.db.raw('(xmax = 0) AS inserted'));
    return Boolean(row?.inserted);
  }

  async deleteProject(id: string): Promise<void> {
    await this.db('projects').where({ id }).delete();
  }

  private async existingProject(projectId: string | null): Promise<string | null> {
    if (!projectId) return null;
    const row = await this.db('projects').where({ id: projectId }).first('id');
    return row ? projectId : null;
  }
}

function stampColumns(stamp: SpecStamp | undefined): Record<string, unknown> {
  return stamp ? { spec_uid: stamp.uid, spec_generation: stamp.generation } : {};
}

function toRow(r: Record<string, any>): InstanceRow {
  const specStamp = r.spec_uid && r.spec_generation !== null && r.spec_generation !== undefined ? { uid: r.spec_uid, generation: Number(r.spec_generation) } : undefined;
  return { id: r.id, name: r.name, projectId: r.project_id ?? null, state: r.state, paused: Boolean(r.paused), phone: r.phone ?? null, deleting: Boolean(r.deletion_requested_at), ...(specStamp ? { specStamp } : {}) };
}
