// Small lookups shared by several route modules.
import { isForeignKeyViolation, Problem, problems } from '@switchboard/core';
import type { GatewayDeps } from '../deps.ts';
import type { Principal } from '../http/auth.ts';

export async function loadInstance(deps: GatewayDeps, id: string, principal?: Principal): Promise<any> {
  // An instance token's lookup already read this row in this request.
  if (principal?.kind === 'instance' && principal.instanceId === id && principal.row) return principal.row;
  const row = await deps.db('instances').where({ id }).first();
  if (!row) throw problems.notFound('The instance');
  return row;
}

export async function assertProjectExists(deps: GatewayDeps, projectId: string | null | undefined): Promise<void> {
  if (!projectId) return;
  const row = await deps.db('projects').where({ id: projectId }).first('id');
  if (!row) throw problems.notFound('The project');
}

export const deleted = (id: string) => ({ id, deleted: true });

/** Headers of a response that carries a secret (a token, a key, a signing secret, a pairing code):
 *  no cache, shared or private, may keep a copy. */
export const SECRET_HEADERS = { 'Cache-Control': 'no-store' } as const;

/** A write that names other rows (an instance, a project). If a concurrent delete removed one after
 *  it was checked, the database refuses the reference: that is the 404 of the check, not a 500. */
export async function withReferences<T>(write: Promise<T>, absent: string): Promise<T> {
  try {
    return await write;
  } catch (err) {
    if (isForeignKeyViolation(err)) throw problems.notFound(absent);
    throw err;
  }
}

/** Calls the instance's session. "Not running" means "connect it first" only for a disconnected
 *  instance: for a deleted one it is a 404, and for one that should run (a session restarting
 *  after a crash or an outage, a pod being scheduled) a 503 to retry, as nothing is for the
 *  client to do. */
export async function callSession(deps: GatewayDeps, id: string, op: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  try {
    return await deps.runtime.call(id, op, body);
  } catch (err) {
    if (!(err instanceof Problem && err.code === 'instance_not_running')) throw err;
    const row = await loadInstance(deps, id); // 404 when gone
    if (row.paused) throw err;
    throw new Problem(503, 'instance_starting', 'The instance session is starting; retry shortly.', undefined, { 'Retry-After': '2' });
  }
}
