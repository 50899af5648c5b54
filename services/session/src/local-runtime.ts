// LocalSessionRuntime: the SessionRuntime of embedded mode. Sessions are in-process workers, one
// per running instance; the database's `paused` flag is the desired run state, so `resumeAll()`
// at server start brings back every instance that is not paused (connected ones without a scan),
// after `recordRestart()` has recorded what the restart means for each before the API serves.
import { DbAuthStore, InstanceLanes, outsideTrace, problems, recordConnectionState, recordStateIfUnheld, resetUnheldSession, sessionBusy, type SessionRuntime } from '@switchboard/core';
import { callSessionOp } from './session-ops.ts';
import { SessionWorker, type SessionWorkerOptions } from './worker.ts';

export type LocalRuntimeOptions = Omit<SessionWorkerOptions, 'instanceId'>;

export class LocalSessionRuntime implements SessionRuntime {
  private readonly workers = new Map<string, SessionWorker>();
  private readonly lanes = new InstanceLanes();
  private closed = false;

  constructor(private readonly opts: LocalRuntimeOptions) {}

  /**
   * At server start, before the API serves: the records still say what the last process left
   * (`connected`, say), which no session of this process is yet. Paused instances are recorded
   * stopped (a process killed while it stopped one left it in its old state) and the others
   * `starting`, as their sessions will record them, unless a session of another server sharing
   * the database holds them. A client reading an instance then never takes a state from before
   * the restart for the current one.
   */
  async recordRestart(): Promise<void> {
    const unstopped = (await this.opts.db('instances').where({ paused: true }).whereNot({ state: 'stopped' }).pluck('id')) as string[];
    for (const id of unstopped) await this.recordStopped(id);
    const resumable = (await this.opts.db('instances').where({ paused: false }).whereNot({ state: 'starting' }).pluck('id')) as string[];
    let recorded = false;
    for (const id of resumable) {
      if (await recordStateIfUnheld(this.opts.db, id, (row) => (row.paused ? null : { state: 'starting', reason: 'session_started' }))) recorded = true;
    }
    if (recorded) this.opts.relay.kick();
  }

  /** Starts a worker for every instance that is not paused (server start, after recordRestart),
   *  as cluster mode runs a session for each: connected ones reconnect without a scan, the others
   *  wait for one. */
  async resumeAll(): Promise<void> {
    const ids = (await this.opts.db('instances').where({ paused: false }).pluck('id')) as string[];
    for (const id of ids) await this.resume(id);
  }

  /** Starts the worker of one instance if it is not paused (a cluster session process). In the
   *  instance's lane, reading the row there: requests served meanwhile may have paused or deleted it. */
  resume(instanceId: string): Promise<boolean> {
    return this.lanes.run(instanceId, async () => {
      const row = await this.opts.db('instances').where({ id: instanceId }).first('paused');
      if (!row || row.paused) return false;
      await this.startWorker(instanceId);
      return true;
    });
  }

  /** Like a resume: a delete (or a disconnect) of the new instance that ran first wins, and no
   *  session starts for an instance that no longer exists. */
  async created(instanceId: string): Promise<void> {
    await this.resume(instanceId);
  }

  start(instanceId: string): Promise<void> {
    return this.lanes.run(instanceId, async () => {
      const found = await this.opts.db('instances').where({ id: instanceId }).update({ paused: false, updated_at: this.opts.db.fn.now() });
      // Deleted by an operation that ran first: no session for an instance that no longer exists.
      if (!found) throw problems.notFound('The instance');
      const running = this.workers.get(instanceId);
      if (running) return outsideTrace(() => running.reconnectIfLoggedOut());
      await this.startWorker(instanceId);
    });
  }

  stop(instanceId: string): Promise<void> {
    this.workers.get(instanceId)?.stopComing(); // an operation before it in the lane gives up its waits
    return this.lanes.run(instanceId, async () => {
      await this.opts.db('instances').where({ id: instanceId }).update({ paused: true, updated_at: this.opts.db.fn.now() });
      const worker = this.workers.get(instanceId);
      this.workers.delete(instanceId);
      if (worker) await worker.stop({ state: 'stopped', reason: 'paused' });
      else await this.recordStopped(instanceId);
    });
  }

  /** Stops the worker of an instance the database says is paused: a stop request that never
   *  reached this process (cluster mode, NATS down). Read in the lane, so a start queued after
   *  that stop wins. */
  stopIfPaused(instanceId: string): Promise<void> {
    return this.lanes.run(instanceId, async () => {
      const row = await this.opts.db('instances').where({ id: instanceId }).first('paused');
      const worker = this.workers.get(instanceId);
      if (!row?.paused || !worker) return;
      this.opts.log.warn({ instanceId }, 'session: the instance was paused without this session hearing of it; stopping');
      this.workers.delete(instanceId);
      await worker.stop({ state: 'stopped', reason: 'paused' });
    });
  }

  /** Brings this process in line with the instance's recorded `paused` (a cluster session process
   *  looks now and then): a start or stop request lost on the bus is caught up. */
  async followRecordedRunState(instanceId: string): Promise<void> {
    if (!(await this.resume(instanceId))) await this.stopIfPaused(instanceId);
  }

  /** Not awaited: the send handler that noticed the pause must return before its worker can stop. */
  private stopIfPausedLater(instanceId: string): void {
    this.stopIfPaused(instanceId).catch((err: unknown) => this.opts.log.warn({ instanceId, err: String(err) }, 'session: could not stop the paused instance; its sends stay held'));
  }

  reset(instanceId: string): Promise<void> {
    return this.lanes.run(instanceId, async () => {
      const worker = this.workers.get(instanceId);
      if (worker?.isOwner) return outsideTrace(() => worker.reset());
      // Not running here: erase the pairing so the next start pairs again, with its event. Only
      // another server on the same PostgreSQL could still hold the instance.
      if (!(await resetUnheldSession(this.opts.db, instanceId))) throw sessionBusy();
      this.opts.relay.kick();
    });
  }

  /** A running session is unlinked from the phone first (SessionWorker.unlinkAndStop). */
  remove(instanceId: string, deleteRecord: () => Promise<boolean>): Promise<boolean> {
    return this.lanes.run(instanceId, async () => {
      await this.unlinkWorker(instanceId);
      await new DbAuthStore(this.opts.db, this.opts.crypto, instanceId).clear();
      return deleteRecord();
    });
  }

  /** A cluster session process's part of a delete (the gateway deletes the records next, and the
   *  operator the pod): unlinks and stops the session. Paused first, so that nothing here starts
   *  it again meanwhile. */
  unlink(instanceId: string): Promise<void> {
    return this.lanes.run(instanceId, async () => {
      await this.opts.db('instances').where({ id: instanceId }).update({ paused: true, updated_at: this.opts.db.fn.now() });
      await this.unlinkWorker(instanceId);
    });
  }

  /** A stopping cluster session process's last act when the operator asked it (a delete or a reset
   *  with kubectl): unlinks and stops the session. The record stays as it is: the process follows
   *  no run state any more, and a reset must not leave the instance paused. */
  unlinkAtShutdown(instanceId: string): Promise<void> {
    return this.lanes.run(instanceId, () => this.unlinkWorker(instanceId));
  }

  private async unlinkWorker(instanceId: string): Promise<void> {
    const worker = this.workers.get(instanceId);
    this.workers.delete(instanceId);
    await worker?.unlinkAndStop();
  }

  /** A sandbox operation runs in the instance's lane: a scan still saving its credentials when a
   *  reset is called would otherwise save them after the reset cleared them. A pairing-code
   *  request only waits for the operations queued before it: with WhatsApp unreachable it can
   *  wait up to 20 s for the socket, and a disconnect or delete must not wait behind it. So does a
   *  sandbox message, which saves no credentials: messages that arrive together then reach the
   *  driver together, which hands them over at once (as the network delivers a burst). */
  async call(instanceId: string, op: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
    const callWorker = () => {
      const worker = this.workers.get(instanceId);
      if (!worker) throw problems.conflict('instance_not_running', 'The instance session is not running; connect it first.');
      return callSessionOp(worker, op, body);
    };
    if (op.startsWith('sandbox.') && op !== 'sandbox.inbound') return this.lanes.run(instanceId, callWorker);
    await this.lanes.idle(instanceId);
    return callWorker();
  }

  /** The worker of an instance (tests, diagnostics). */
  worker(instanceId: string): SessionWorker | undefined {
    return this.workers.get(instanceId);
  }

  async close(): Promise<void> {
    // Operations already queued finish first and start nothing new: no worker outlives the runtime.
    this.closed = true;
    for (const worker of this.workers.values()) worker.stopComing();
    await this.lanes.idleAll();
    const workers = [...this.workers.values()];
    this.workers.clear();
    await Promise.all(workers.map((w) => w.stop()));
  }

  private async startWorker(instanceId: string): Promise<void> {
    if (this.closed || this.workers.has(instanceId)) return;
    const worker = new SessionWorker({ ...this.opts, instanceId, pausedMeanwhile: () => this.stopIfPausedLater(instanceId) });
    this.workers.set(instanceId, worker);
    // A session outlives the request that started it: its socket, lock keepalive and settings
    // polls must not all join that request's trace (outsideTrace also for a reset's new socket).
    await outsideTrace(() => worker.start());
  }

  private async recordStopped(instanceId: string): Promise<void> {
    if (await recordConnectionState(this.opts.db, instanceId, 'stopped', { reason: 'paused' })) this.opts.relay.kick();
  }
}
