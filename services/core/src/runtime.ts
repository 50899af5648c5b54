// The SessionRuntime port: how the gateway starts, stops and talks to instance sessions.
// Embedded: sessions are in-process workers. Cluster: sessions are pods (the operator runs
// them from Instance resources) reached over NATS request/reply (`rpc.<instanceId>.<op>`).

export interface SessionRuntime {
  /** A new instance was created (not paused): its session should start. */
  created(instanceId: string): Promise<void>;
  /** The instance should run (connect). Idempotent. */
  start(instanceId: string): Promise<void>;
  /** The instance should pause (disconnect), keeping credentials. Idempotent. */
  stop(instanceId: string): Promise<void>;
  /** Log out and clear the session; a new pairing is required. The instance keeps running. */
  reset(instanceId: string): Promise<void>;
  /**
   * Deletes the instance: stops its session, forgets its credentials, then runs `deleteRecord`
   * (deletes the database row), all before the instance's next start, stop or reset runs, so a
   * connect racing the delete finds no instance instead of starting a session nobody can stop.
   * Returns what `deleteRecord` returned (false: it was already gone).
   */
  remove(instanceId: string, deleteRecord: () => Promise<boolean>): Promise<boolean>;
  /**
   * Calls an operation on the running session: `pairing-code` {phone} → {code},
   * `sandbox.<op>` (DESIGN §6). Rejects with a Problem (409 when not running, 504 on time-out).
   */
  call(instanceId: string, op: string, body: Record<string, unknown>): Promise<Record<string, unknown>>;
  close(): Promise<void>;
}
