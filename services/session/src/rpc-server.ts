// Cluster mode: the session process answers `rpc.<instanceId>.<op>` for its one instance over the
// bus (DESIGN §1). Replies are JSON; a Problem becomes an RpcError with the same status and code,
// which the gateway's RemoteSessionRuntime turns back into the Problem.
import { isDatabaseUnavailable, isForeignKeyViolation, Problem, problems, RpcError, subjects, type Bus, type SessionRuntime, type Subscription } from '@switchboard/core';
import { SANDBOX_OPS } from './session-ops.ts';

export const SESSION_RPC_OPS = ['start', 'stop', 'reset', 'unlink', 'pairing-code', ...SANDBOX_OPS.map((op) => `sandbox.${op}`)];

/** A runtime that hosts sessions (LocalSessionRuntime); `unlink` is its part of a delete. */
export type SessionHost = SessionRuntime & { unlink(instanceId: string): Promise<void> };

/** Serves every session operation of `instanceId`, delegating to a runtime that hosts it. */
export async function serveSessionRpc(bus: Bus, instanceId: string, runtime: SessionHost): Promise<Subscription> {
  const subs: Subscription[] = [];
  for (const op of SESSION_RPC_OPS) {
    subs.push(await bus.serve(subjects.rpc(instanceId, op), (data) => handle(runtime, instanceId, op, data)));
  }
  return {
    async stop() {
      await Promise.all(subs.map((s) => s.stop()));
    },
  };
}

async function handle(runtime: SessionHost, instanceId: string, op: string, data: Uint8Array): Promise<Uint8Array> {
  try {
    const body = parseBody(data);
    let reply: Record<string, unknown> = {};
    if (op === 'start') await runtime.start(instanceId);
    else if (op === 'stop') await runtime.stop(instanceId);
    else if (op === 'reset') await runtime.reset(instanceId);
    else if (op === 'unlink') await runtime.unlink(instanceId);
    else reply = await runtime.call(instanceId, op, body);
    return Buffer.from(JSON.stringify(reply), 'utf8');
  } catch (err) {
    // The database away (a restart) is the session's condition, not a fault: 503, retry. A write
    // the foreign keys refused met an instance deleted meanwhile.
    const problem = err instanceof Problem ? err : isDatabaseUnavailable(err) ? problems.databaseUnavailable() : isForeignKeyViolation(err) ? problems.notFound('The instance') : undefined;
    if (problem) throw new RpcError(problem.status, problem.code, problem.detail);
    throw err;
  }
}

function parseBody(data: Uint8Array): Record<string, unknown> {
  if (data.length === 0) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(data).toString('utf8'));
  } catch {
    throw new RpcError(400, 'invalid_body', 'The request body is not JSON.');
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new RpcError(400, 'invalid_body', 'The body must be a JSON object.');
  return parsed as Record<string, unknown>;
}
