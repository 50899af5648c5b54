// RemoteSessionRuntime: the gateway's SessionRuntime in cluster mode. The database's `paused`
// flag is the desired run state (the operator runs a session pod per instance from it); the
// running session is told over `rpc.<instanceId>.<op>`. An RpcError becomes the same Problem.
import {
  BusClosedError,
  DbAuthStore,
  InstanceLanes,
  lockUnheldInstance,
  Problem,
  problems,
  recordStateIfUnheld,
  resetUnheldSession,
  sessionBusy,
  RpcError,
  subjects,
  type Bus,
  type Crypto,
  type Db,
  type Logger,
  type SessionRuntime,
} from '@switchboard/core';

export interface RemoteRuntimeOptions {
  db: Db;
  bus: Bus;
  crypto: Crypto;
  log: Logger;
  relay: { kick(): void };
  /** Time limit of one request to a session. */
  requestTimeoutMs?: number;
  /** Time limit of a pairing-code request: longer than the session's own wait for a socket ready
   *  to pair (20 s, twice when it renews the socket), so the session answers `pairing_not_ready`
   *  and asks WhatsApp for no code after the gateway gave up. */
  pairingRequestTimeoutMs?: number;
}

export class RemoteSessionRuntime implements SessionRuntime {
  private readonly lanes = new InstanceLanes();

  constructor(private readonly opts: RemoteRuntimeOptions) {}

  /** The operator runs a session pod for every Instance that is not paused, and the new resource
   *  says so already (no bus round trip, so create works while NATS is down). The record says the
   *  session is starting, as embedded mode's does. */
  async created(instanceId: string): Promise<void> {
    await this.recordStartingIfStopped(instanceId);
  }

  // Each operation's database write and the session's answer come before the next operation of
  // the same instance from this gateway, so the session sees them in the order they were called.
  start(instanceId: string): Promise<void> {
    return this.lanes.run(instanceId, async () => {
      if (!(await this.setPaused(instanceId, false))) throw problems.notFound('The instance'); // deleted by an operation that ran first
      const failure = await this.ask(instanceId, 'start');
      if (failure === ANSWERED) return;
      // When no session runs yet, the one the operator starts reads paused=false itself.
      await this.recordStartingIfStopped(instanceId);
      if (failure === NOT_RUNNING) return;
      // A session that holds a logged-out instance pairs it again only when told (its record said
      // "run" already): a start it did not hear must be asked again, not answered 200.
      if (await this.heldLoggedOut(instanceId)) throw toProblem(failure);
      this.warnUnanswered(instanceId, 'start', failure);
    });
  }

  stop(instanceId: string): Promise<void> {
    return this.lanes.run(instanceId, async () => {
      await this.setPaused(instanceId, true);
      // Still paused: a start through another gateway replica may have come since.
      if (!(await this.tell(instanceId, 'stop'))) await this.recordUnheld(instanceId, (row) => (row.paused ? { state: 'stopped', reason: 'paused' } : null));
    });
  }

  reset(instanceId: string): Promise<void> {
    return this.lanes.run(instanceId, async () => {
      const deadline = Date.now() + this.timeoutMs();
      for (;;) {
        if (await this.tellReset(instanceId)) return;
        // No session answers: erase the pairing here so the next start pairs again. The record no
        // longer shows the connection a killed session left in it.
        if (await resetUnheldSession(this.opts.db, instanceId)) return this.opts.relay.kick();
        // A session still holds the instance without answering: it is stopping (it stops serving
        // requests before it lets go of the instance), or starting.
        if (Date.now() >= deadline) throw sessionBusy();
        await new Promise((r) => setTimeout(r, 100));
      }
    });
  }

  /** The running session unlinks the device from the phone and stops (a session process of a
   *  version before `unlink` is told to stop), then the records go. */
  remove(instanceId: string, deleteRecord: () => Promise<boolean>): Promise<boolean> {
    return this.lanes.run(instanceId, async () => {
      if (!(await this.tell(instanceId, 'unlink'))) await this.tell(instanceId, 'stop');
      await new DbAuthStore(this.opts.db, this.opts.crypto, instanceId).clear();
      return deleteRecord();
    });
  }

  async call(instanceId: string, op: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
    await this.lanes.idle(instanceId);
    try {
      const timeoutMs = op === 'pairing-code' ? (this.opts.pairingRequestTimeoutMs ?? 50_000) : this.timeoutMs();
      const reply = await this.opts.bus.request(subjects.rpc(instanceId, op), Buffer.from(JSON.stringify(body ?? {})), timeoutMs);
      return JSON.parse(Buffer.from(reply).toString('utf8')) as Record<string, unknown>;
    } catch (err) {
      throw toProblem(err);
    }
  }

  async close(): Promise<void> {}

  private timeoutMs(): number {
    return this.opts.requestTimeoutMs ?? 10_000;
  }

  /** True when a session did the reset; false when none answered, or the one that answered is
   *  not the instance's owner yet while another process still holds it (`session_busy`). */
  private async tellReset(instanceId: string): Promise<boolean> {
    try {
      return await this.tell(instanceId, 'reset', true);
    } catch (err) {
      if (err instanceof Problem && err.code === 'session_busy') return false;
      throw err;
    }
  }

  /** No session runs for an instance that is not paused (yet): `starting`, not `stopped`, until
   *  the one the operator starts records its own states. */
  private recordStartingIfStopped(instanceId: string): Promise<void> {
    return this.recordUnheld(instanceId, (row) => (row.state === 'stopped' && !row.paused ? { state: 'starting', reason: 'session_started' } : null));
  }

  /** Only for an instance no session holds: one that holds it but did not answer (cut off from
   *  the bus) records its own state, as it follows the record's `paused` flag. */
  private async recordUnheld(instanceId: string, decide: Parameters<typeof recordStateIfUnheld>[2]): Promise<void> {
    if (await recordStateIfUnheld(this.opts.db, instanceId, decide)) this.opts.relay.kick();
  }

  /** False when the instance no longer exists. */
  private async setPaused(instanceId: string, paused: boolean): Promise<boolean> {
    return (await this.opts.db('instances').where({ id: instanceId }).update({ paused, updated_at: this.opts.db.fn.now() })) > 0;
  }

  /** Whether a session holds the instance while its record says it was logged out. */
  private heldLoggedOut(instanceId: string): Promise<boolean> {
    return this.opts.db.transaction(async (trx) => {
      const { row, unheld } = await lockUnheldInstance(trx, instanceId);
      return row?.state === 'logged_out' && !unheld;
    });
  }

  /** Sends a lifecycle op; false when no session answered. Errors of a running session are thrown when `strict`. */
  private async tell(instanceId: string, op: LifecycleOp, strict = false): Promise<boolean> {
    const failure = await this.ask(instanceId, op);
    if (failure !== ANSWERED && failure !== NOT_RUNNING) {
      if (strict) throw toProblem(failure);
      this.warnUnanswered(instanceId, op, failure);
    }
    return failure === ANSWERED;
  }

  private warnUnanswered(instanceId: string, op: LifecycleOp, failure: unknown): void {
    this.opts.log.warn({ instanceId, op, err: failure instanceof Error ? failure.message : String(failure) }, 'session rpc failed; the session follows the database on its next start');
  }

  /** Sends a lifecycle op: ANSWERED, NOT_RUNNING (a session process without the instance running),
   *  or the error of a request nobody answered in time or that could not be sent. */
  private async ask(instanceId: string, op: LifecycleOp): Promise<unknown> {
    try {
      await this.opts.bus.request(subjects.rpc(instanceId, op), Buffer.from('{}'), this.timeoutMs());
      return ANSWERED;
    } catch (err) {
      return err instanceof RpcError && err.status === 409 && err.code === 'session_not_running' ? NOT_RUNNING : err;
    }
  }
}

type LifecycleOp = 'start' | 'stop' | 'reset' | 'unlink';
const ANSWERED = Symbol('answered');
const NOT_RUNNING = Symbol('session not running');

/** The API's answer for a request the session could not serve: the codes embedded mode gives for
 *  the same situation, and details that name no bus subject or server internals. Any other error
 *  is a fault of ours, left as it is for the API's 500 (logged with its stack). */
function toProblem(err: unknown): unknown {
  if (err instanceof Problem) return err;
  if (err instanceof BusClosedError) return busUnavailable();
  if (!(err instanceof RpcError)) return err;
  switch (err.code) {
    case 'session_not_running':
      return new Problem(409, 'instance_not_running', 'The instance session is not running; connect it first.');
    case 'session_timeout':
      return new Problem(504, 'session_timeout', 'The instance session did not answer in time; retry shortly.');
    case 'bus_unavailable':
      return busUnavailable();
    case 'session_busy':
      return sessionBusy(); // with its Retry-After, which the bus does not carry
    case 'database_unavailable':
      return problems.databaseUnavailable(); // likewise
    case 'internal':
      return new Problem(500, 'internal_error', 'The instance session failed to serve the request; it has been logged. Retry later.');
    default:
      return new Problem(err.status, err.code, err.message); // the session's own answer (a Problem there)
  }
}

function busUnavailable(): Problem {
  return new Problem(503, 'bus_unavailable', 'The message bus (NATS) cannot be reached right now; retry shortly.', undefined, { 'Retry-After': '1' });
}
