// Instances: records, lifecycle (connect, disconnect, reset, pairing) and credentials.
import { z } from 'zod';
import { drainMediaPurge, InstanceLanes, newResourceId, PAIRING_CODE_TTL_MS, Problem, problems, randomToken, recordSpecStamp } from '@switchboard/core';
import type { GatewayDeps } from '../deps.ts';
import type { InstanceChanges } from '../kubernetes/instance-resources.ts';
import { route } from '../http/route.ts';
import { INSTANCE_TOKEN_PREFIX } from '../http/auth.ts';
import { Deleted, InstanceCreateBody, InstancePatchBody, InstanceRecord, PairingBody, listOf } from '../schemas.ts';
import { instanceRecord } from '../records.ts';
import { assertProjectExists, callSession, deleted, loadInstance, SECRET_HEADERS, withReferences } from './common.ts';

/** A new instance token and the columns that store it (hashed for lookup, sealed for recovery). */
export function issueInstanceToken(deps: Pick<GatewayDeps, 'crypto'>) {
  const token = randomToken(INSTANCE_TOKEN_PREFIX);
  return { token, columns: { token_hash: deps.crypto.hashToken(token), token_sealed: deps.crypto.seal(token) } };
}

async function reload(deps: GatewayDeps, id: string) {
  return instanceRecord(await loadInstance(deps, id));
}

/** An instance record may carry a QR code, and whoever scans it links their phone to the
 *  instance: like every other secret, it is marked for no cache to keep. */
function recordReply(body: unknown) {
  return { body, headers: SECRET_HEADERS };
}

/** Cluster mode mirrors a new instance into its Instance resource, whole; later operations
 *  write only the fields they change (`deps.resources.update`). */
async function mirrorCreated(deps: GatewayDeps, row: any): Promise<void> {
  await deps.resources?.apply({ id: row.id, name: row.name, projectId: row.project_id ?? null, paused: Boolean(row.paused) });
}

/** Cluster mode: changes the Instance resource, then stamps the record with the resource's new
 *  version before the caller writes the record, so an operator reconcile that read the resource
 *  before this change cannot write the older spec over it (core/instance-spec-stamp.ts). */
async function updateResource(deps: GatewayDeps, id: string, changes: InstanceChanges): Promise<void> {
  const stamp = await deps.resources?.update(id, changes);
  if (stamp) await recordSpecStamp(deps.db, id, stamp);
}

/** Per app: a connect's or disconnect's resource update and run-state change, one instance's one
 *  after another. Interleaved, the resource (which the operator follows) and the record could end
 *  in opposite run states. */
const runStateLanes = new WeakMap<GatewayDeps, InstanceLanes>();

/** Sets the instance's run state: its Instance resource (cluster mode), then its session. */
function setRunState(deps: GatewayDeps, id: string, paused: boolean): Promise<void> {
  let lanes = runStateLanes.get(deps);
  if (!lanes) runStateLanes.set(deps, (lanes = new InstanceLanes()));
  return lanes.run(id, async () => {
    await updateResource(deps, id, { paused });
    await (paused ? deps.runtime.stop(id) : deps.runtime.start(id));
  });
}

export const instanceRoutes = [
  route({
    method: 'get',
    path: '/api/instances',
    auth: 'admin',
    tag: 'instances',
    summary: 'List instances',
    responses: { 200: listOf(InstanceRecord) },
    handler: async ({ deps }) => {
      const rows = await deps.db('instances').orderBy('created_at', 'desc').orderBy('id', 'desc');
      return recordReply({ data: await Promise.all(rows.map(instanceRecord)) });
    },
  }),
  route({
    method: 'post',
    path: '/api/instances',
    auth: 'admin',
    tag: 'instances',
    summary: 'Create an instance and start its session; the response carries its apiToken',
    body: InstanceCreateBody,
    responses: { 201: InstanceRecord.extend({ apiToken: z.string() }), 404: 'project absent' },
    handler: async ({ deps, body }) => {
      await assertProjectExists(deps, body.projectId);
      const { token, columns } = issueInstanceToken(deps);
      const [row] = await withReferences(
        deps.db('instances').insert({ id: newResourceId('inst'), name: body.name, project_id: body.projectId ?? null, state: 'stopped', paused: false, ...columns }).returning('*'),
        'The project',
      );
      try {
        await mirrorCreated(deps, row);
      } catch (err) {
        // No resource, no instance: the client's retry must not find a half-made one (the 503 says retry).
        await deps.db('instances').where({ id: row.id }).delete();
        throw err;
      }
      // The session starts at once (in cluster mode the operator starts a pod for every Instance
      // that is not paused): the QR code appears by getting the instance, no connect needed.
      await deps.runtime.created(row.id).catch((err) => deps.log.warn({ instanceId: row.id, err: String(err) }, 'the new instance did not start; connect starts it'));
      return { status: 201, body: { ...(await reload(deps, row.id)), apiToken: token }, headers: SECRET_HEADERS };
    },
  }),
  route({
    method: 'get',
    path: '/api/instances/{id}',
    auth: 'any',
    tag: 'instances',
    summary: 'Get an instance with its state and QR code',
    responses: { 200: InstanceRecord, 404: 'absent' },
    handler: async ({ deps, params }) => recordReply(await reload(deps, params.id)),
  }),
  route({
    method: 'patch',
    path: '/api/instances/{id}',
    auth: 'admin',
    tag: 'instances',
    summary: 'Rename an instance or move it to another project',
    body: InstancePatchBody,
    responses: { 200: InstanceRecord, 404: 'absent' },
    handler: async ({ deps, params, body }) => {
      await loadInstance(deps, params.id);
      await assertProjectExists(deps, body.projectId);
      const changes: Record<string, unknown> = { updated_at: deps.db.fn.now() };
      if (body.name !== undefined) changes.name = body.name;
      if (body.projectId !== undefined) changes.project_id = body.projectId;
      // The resource first: if Kubernetes is unavailable (503) the record stays unchanged too.
      await updateResource(deps, params.id, { name: body.name, projectId: body.projectId });
      const [row] = await withReferences(deps.db('instances').where({ id: params.id }).update(changes).returning('*'), 'The project');
      if (!row) throw problems.notFound('The instance'); // deleted meanwhile
      return recordReply(await instanceRecord(row));
    },
  }),
  route({
    method: 'delete',
    path: '/api/instances/{id}',
    auth: 'admin',
    tag: 'instances',
    summary: 'Delete an instance, its session and its records',
    responses: { 200: Deleted, 404: 'absent' },
    handler: async ({ deps, params }) => {
      await loadInstance(deps, params.id);
      // The resource first: if Kubernetes is unavailable (503) nothing has changed yet.
      await deps.resources?.delete(params.id);
      const removed = await deps.runtime.remove(params.id, async () => Number(await deps.db('instances').where({ id: params.id }).delete()) > 0);
      // Of concurrent deletes, the one whose statement removed the row answers 200; the others 404.
      // In cluster mode the operator's finalizer may delete the row first, so there the resource
      // delete having succeeded is the answer.
      if (!removed && !deps.resources) throw problems.notFound('The instance');
      // Its media files go now rather than with the next retention sweep (which also drains them).
      drainMediaPurge(deps.db, deps.media, deps.log).catch((err: unknown) => deps.log.warn({ err: String(err) }, 'media of a deleted instance: removal left for the retention sweep'));
      return { body: deleted(params.id) };
    },
  }),
  route({
    method: 'post',
    path: '/api/instances/{id}/connect',
    auth: 'admin',
    tag: 'lifecycle',
    summary: 'Start the session; read the QR code and state by getting the instance',
    responses: { 200: InstanceRecord },
    handler: async ({ deps, params }) => {
      await loadInstance(deps, params.id);
      await setRunState(deps, params.id, false);
      return recordReply(await reload(deps, params.id));
    },
  }),
  route({
    method: 'post',
    path: '/api/instances/{id}/disconnect',
    auth: 'admin',
    tag: 'lifecycle',
    summary: 'Pause the instance, keeping its credentials',
    responses: { 200: InstanceRecord },
    handler: async ({ deps, params }) => {
      await loadInstance(deps, params.id);
      await setRunState(deps, params.id, true);
      return recordReply(await reload(deps, params.id));
    },
  }),
  route({
    method: 'post',
    path: '/api/instances/{id}/reset',
    auth: 'admin',
    tag: 'lifecycle',
    summary: 'Unlink the instance and clear the session; a new pairing is required',
    responses: { 200: InstanceRecord },
    handler: async ({ deps, params }) => {
      await loadInstance(deps, params.id);
      await unlinkKeptPhone(deps, params.id);
      return recordReply(await reload(deps, params.id));
    },
  }),
  route({
    method: 'post',
    path: '/api/instances/{id}/pairing-code',
    auth: 'admin',
    tag: 'lifecycle',
    summary: 'Request a phone pairing code (one per interval; never logged); a disconnected instance gives up its kept link first',
    body: PairingBody,
    headers: SECRET_HEADERS, // every answer this route gives, its refusals too (spec: pairing codes)
    responses: { 200: z.object({ code: z.string(), expiresAt: z.string() }), 409: 'already connected', 429: 'too soon' },
    handler: async ({ deps, params, body }) => {
      const row = await loadInstance(deps, params.id);
      if (row.state === 'connected') throw problems.conflict('already_connected', 'The instance is already connected; disconnect or reset it first.');
      await claimPairingSlot(deps, params.id);
      let reply: Record<string, unknown>;
      try {
        // A disconnected instance may pair (the specification refuses only a connected one), and
        // a code links a new device only: the link it kept is given up first, as a reset does.
        if (row.paused && row.phone) await unlinkKeptPhone(deps, params.id);
        if (row.paused || row.state === 'stopped' || row.state === 'logged_out') await setRunState(deps, params.id, false);
        reply = await callSession(deps, params.id, 'pairing-code', { phone: body.phone });
      } catch (err) {
        // No code was issued: the client may ask again at once. A disconnected instance that its
        // session says needs no pairing (it connected with its kept credentials) is paused again:
        // a refused request leaves the run state as it found it. Any other failure (the session
        // is not up yet, as in cluster mode before the operator's pod) leaves it starting.
        await deps.db('instances').where({ id: params.id }).update({ last_pairing_at: row.last_pairing_at });
        if (row.paused && needsNoPairing(err)) await pauseAgain(deps, params.id);
        throw err;
      }
      // The session says until when its code works; a session of an older version does not.
      const expiresAt = typeof reply.expiresAt === 'string' ? reply.expiresAt : new Date(Date.now() + PAIRING_CODE_TTL_MS).toISOString();
      return { body: { code: String(reply.code), expiresAt } };
    },
  }),
];

/** Reset: the session (running or not) forgets its credentials and pairs again when it runs. */
async function unlinkKeptPhone(deps: GatewayDeps, id: string): Promise<void> {
  await deps.resources?.requestReset(id);
  await deps.runtime.reset(id);
}

function needsNoPairing(err: unknown): boolean {
  return err instanceof Problem && (err.code === 'not_pairing' || err.code === 'already_connected');
}

async function pauseAgain(deps: GatewayDeps, id: string): Promise<void> {
  try {
    await setRunState(deps, id, true);
  } catch (err) {
    deps.log.warn({ instanceId: id, err: String(err) }, 'could not pause the instance again after a refused pairing-code request');
  }
}

/** "minute" for the default PAIRING_CODE_INTERVAL_MS, otherwise the configured interval. */
function describeInterval(ms: number): string {
  if (ms === 60_000) return 'minute';
  return ms % 60_000 === 0 ? `${ms / 60_000} minutes` : `${Math.ceil(ms / 1000)} s`;
}

/** One pairing-code request per instance per interval, enforced atomically in the database. */
async function claimPairingSlot(deps: GatewayDeps, id: string): Promise<void> {
  const interval = deps.config.pairingCodeIntervalMs;
  const cutoff = new Date(Date.now() - interval);
  const claimed = await deps.db('instances')
    .where({ id })
    .andWhere((q) => q.whereNull('last_pairing_at').orWhere('last_pairing_at', '<=', cutoff))
    .update({ last_pairing_at: new Date() });
  if (!claimed) {
    const row = await deps.db('instances').where({ id }).first('last_pairing_at');
    if (!row) throw problems.notFound('The instance'); // deleted meanwhile
    const waitMs = Math.max(1000, new Date(row.last_pairing_at).getTime() + interval - Date.now());
    const waitSeconds = String(Math.ceil(waitMs / 1000));
    // The RateLimit-* headers describe the limit that refused, not the per-address one beside it.
    throw new Problem(429, 'pairing_rate_limited', `Only one pairing code per ${describeInterval(interval)} may be requested for an instance.`, undefined, {
      'Retry-After': waitSeconds,
      'RateLimit-Limit': '1',
      'RateLimit-Remaining': '0',
      'RateLimit-Reset': waitSeconds,
    });
  }
}
