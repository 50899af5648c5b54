// SessionWorker: the network session of ONE instance. It owns the instance's single-owner lock,
// one driver at a time, the consumer of `cmd.<instanceId>` (active only while connected, so sends
// wait in the queue) and turns what the driver reports into rows and events.
import type { Knex } from 'knex';
import {
  busDefaults,
  DbAuthStore,
  isDatabaseUnavailable,
  problems,
  recordConnectionState,
  subjects,
  type Bus,
  type ConnectionState,
  type Crypto,
  type DriverContext,
  type DriverFactory,
  type DriverListener,
  type Logger,
  type NetworkDriver,
  type StateInfo,
  type Subscription,
} from '@switchboard/core';
import { requeueQueuedCommands } from './command-requeue.ts';
import { retryWhileFailing } from './retry-while-failing.ts';
import { InboundRecorder, recordPresence } from './inbound.ts';
import type { MediaArchive } from './media-archive.ts';
import { ownerLockFor, type OwnerLock } from './owner-lock.ts';
import { SendCommandHandler } from './send-command.ts';
import { applyReceipt, markUncertain, type SendItemRow } from './send-items.ts';
import { SettingsCache } from './settings-cache.ts';

/** How long a connection state the network reported waits for a database that cannot be reached. */
const STATE_RECORD_RETRY_MS = 60_000;

/** Queued items are published again once they are this close to the commands stream's max age
 *  (before the stream can have dropped their command; a repeat is harmless). */
const COMMAND_AGE_MARGIN_MS = 3_600_000;
/** How long the server keeps a session's commands consumer nobody consumes from. */
const COMMAND_CONSUMER_IDLE_LIFETIME_MS = 3_600_000;
/** The longest wait before another start after starts that failed (they double from lockRetryMs). */
const MAX_START_RETRY_MS = 30_000;

export interface SessionWorkerOptions {
  instanceId: string;
  db: Knex;
  bus: Bus;
  /** Publishes recorded events and commands; kicked after each commit. */
  relay: { kick(): void };
  crypto: Crypto;
  media: MediaArchive;
  driverFactory: DriverFactory;
  log: Logger;
  /** Wait between attempts to take the owner lock, and after a first start that failed. */
  lockRetryMs?: number;
  mediaDownloadTimeoutMs?: number;
  /** How often a connected session re-reads its settings in the background: on PostgreSQL, where
   *  the lock's connection hears each change, a backstop (30 s); embedded, the way (2 s). */
  settingsRefreshMs?: number;
  /** Redelivery delay of a command that arrived while the session was not connected. */
  commandRetryDelayMs?: number;
  /** Redelivery of a command whose handler died (process killed). */
  commandAckWaitMs?: number;
  /** How often a consuming session looks again for queued items older than the commands stream
   *  keeps commands (default 1 h; see requeueOldItems). */
  oldItemsCheckMs?: number;
  /** A send found the instance paused: the runtime stops this worker as a stop request would. */
  pausedMeanwhile?: () => void;
}

export class SessionWorker {
  readonly instanceId: string;
  private readonly log: Logger;
  private readonly lock: OwnerLock;
  private readonly settings: SettingsCache;
  private readonly sends: SendCommandHandler;
  private driver: NetworkDriver | undefined;
  private connection: ConnectionState = 'stopped';
  /** True while reset() logs the driver out. */
  private resetting = false;
  /** The start-up after the owner lock was taken: until it ends, an owner has no driver. */
  private startingUp: Promise<void> = Promise.resolve();
  private subscription: Subscription | undefined;
  /** Starting/stopping the consumer, one change at a time. */
  private consumerChange: Promise<void> = Promise.resolve();
  private lockTimer: NodeJS.Timeout | undefined;
  private settingsTimer: NodeJS.Timeout | undefined;
  private oldItemsTimer: NodeJS.Timeout | undefined;
  private running = false;
  /** A stop waits in the runtime's lane (stopComing). */
  private stopRequested = false;
  private owning = false;
  /** Starts in a row that failed after taking the lock (the next one waits longer). */
  private failedStarts = 0;

  constructor(private readonly opts: SessionWorkerOptions) {
    this.instanceId = opts.instanceId;
    this.log = opts.log.child({ instanceId: opts.instanceId });
    this.lock = ownerLockFor(opts.db, opts.instanceId, (err) => this.lockLost(err), undefined, () => this.settingsChanged());
    this.settings = new SettingsCache(opts.db, opts.instanceId);
    this.sends = new SendCommandHandler({
      db: opts.db,
      instanceId: opts.instanceId,
      media: opts.media,
      log: this.log,
      connectedDriver: () => (this.connection === 'connected' ? this.driver : undefined),
      refreshSettings: () => this.settings.reload(), // a setting changed just before a send applies to it
      eventsRecorded: () => opts.relay.kick(),
      pausedMeanwhile: () => opts.pausedMeanwhile?.(),
    });
  }

  /** The connection state as the driver last reported it. */
  get state(): ConnectionState {
    return this.connection;
  }

  get isRunning(): boolean {
    return this.running;
  }

  /** True once this worker holds the owner lock and has a driver. */
  get isOwner(): boolean {
    return this.owning;
  }

  /**
   * Starts the session: takes the owner lock (retrying in the background while another process
   * holds it), recovers interrupted sends, then connects. Resolves after the first lock attempt.
   */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.failedStarts = 0; // a start asked for (a connect) tries at once, whatever came before
    await this.tryTakeOwnership();
  }

  /** Stops consuming, closes the socket (credentials kept) and releases the lock. */
  async stop(final?: { state: ConnectionState; reason: string }): Promise<void> {
    this.running = false;
    if (this.lockTimer) clearTimeout(this.lockTimer);
    // A start under way (a lock retry's, or a retake after the lock was lost) ends first: it opens
    // no socket once stopped, and closing now would release the lock under it.
    await this.startingUp;
    await this.closeSession();
    if (final) await this.applyState(final.state, { reason: final.reason }, { evenWhenStopped: true });
  }

  /** Before the instance is deleted (or, in cluster mode, reset by the operator): unlinks this
   *  device from the phone, so its "Linked devices" keeps no device nobody will use, then stops as
   *  stop() does. Records no state: the record goes next, or the reset records its own. Best
   *  effort: a network that does not answer within the driver's limit leaves the device linked,
   *  and the delete or reset goes on. */
  async unlinkAndStop(): Promise<void> {
    this.running = false;
    if (this.lockTimer) clearTimeout(this.lockTimer);
    await this.startingUp;
    const driver = this.owning ? this.driver : undefined;
    if (driver) {
      this.setConsuming(false);
      await driver.logout().catch((err) => this.log.warn({ err: String(err) }, 'session: could not unlink the device from the phone'));
    }
    await this.closeSession();
  }

  /** Logs out, clears the credentials and starts pairing again (state → awaiting_scan). */
  async reset(): Promise<void> {
    await this.startingUp; // a reset right after the lock was taken waits for the driver
    const driver = this.requireDriver();
    this.setConsuming(false);
    this.resetting = true;
    try {
      await driver.logout();
    } finally {
      this.resetting = false;
    }
    await new DbAuthStore(this.opts.db, this.opts.crypto, this.instanceId).clear();
    await driver.disconnect();
    await this.applyState('logged_out', { phone: null, reason: 'reset' });
    await this.connectNewDriver('reset');
  }

  /** A session that was logged out by the network starts pairing again (connect after logout). */
  async reconnectIfLoggedOut(): Promise<void> {
    if (!this.owning || this.connection !== 'logged_out') return;
    await this.driver?.disconnect();
    await this.connectNewDriver(null); // asked for by connect, which recorded its own change
  }

  /** The driver of the running session; 409 `instance_not_running` otherwise. */
  requireDriver(): NetworkDriver {
    if (!this.running || !this.owning || !this.driver) {
      throw problems.conflict('instance_not_running', 'The instance session is not running; connect it first.');
    }
    return this.driver;
  }

  /** Resolves once the command in progress (if any) has recorded its outcome (tests, shutdown). */
  async idle(): Promise<void> {
    await this.consumerChange;
    await this.sends.settled();
  }

  // ---- ownership ----

  private async tryTakeOwnership(): Promise<void> {
    if (!this.running || this.owning) return;
    let acquired = false;
    try {
      acquired = await this.lock.tryAcquire();
    } catch (err) {
      this.log.warn({ err: String(err) }, 'session: owner lock attempt failed');
    }
    if (!this.running) {
      if (acquired) await this.lock.release();
      return;
    }
    if (!acquired) return this.retryOwnership(this.lockRetryMs);
    this.owning = true;
    this.startingUp = this.startUp();
    await this.startingUp;
  }

  /** Recovery, then the driver. */
  private async startUp(): Promise<void> {
    try {
      await this.recoverInterruptedSends();
      await this.requeueQueuedItems();
      await this.settings.reload();
      if (!this.running) return; // stopped meanwhile: stop() closes the session and releases the lock
      this.keepSettingsFresh();
      // After a crash or restart the record still says what the last process left (`connected`):
      // the event says why the state went back to `starting`.
      await this.connectNewDriver('session_started');
      this.failedStarts = 0;
    } catch (err) {
      // Each start re-publishes the backlog's commands: a start that keeps failing backs off.
      this.failedStarts++;
      const retryMs = Math.min(this.lockRetryMs * 2 ** (this.failedStarts - 1), MAX_START_RETRY_MS);
      this.log.error({ err: String(err), failedStarts: this.failedStarts, retryMs }, 'session: start failed, retrying');
      await this.closeSession();
      this.retryOwnership(retryMs);
    }
  }

  private get lockRetryMs(): number {
    return this.opts.lockRetryMs ?? 2000;
  }

  private retryOwnership(afterMs: number): void {
    this.lockTimer = setTimeout(() => void this.tryTakeOwnership(), afterMs);
    this.lockTimer.unref();
  }

  private lockLost(err: Error): void {
    this.log.warn({ err: err.message }, 'session: owner lock lost; closing the socket and taking the lock again');
    void (async () => {
      // Another process may own the account already: the socket goes first, so a send under way
      // ends (uncertain) now rather than leave after the new owner's next sends.
      const driver = this.driver;
      this.driver = undefined;
      await driver?.disconnect().catch((e) => this.log.warn({ err: String(e) }, 'session: disconnect failed'));
      await this.closeSession(false);
      await this.applyState('reconnecting', { reason: 'owner_lock_lost' }, { evenWhenStopped: true }).catch(() => undefined);
      await this.tryTakeOwnership();
    })();
  }

  private async closeSession(releaseLock = true): Promise<void> {
    if (this.settingsTimer) clearInterval(this.settingsTimer);
    this.settingsTimer = undefined;
    this.setConsuming(false);
    await this.consumerChange;
    const driver = this.driver;
    this.driver = undefined;
    this.connection = 'stopped';
    await driver?.disconnect().catch((err) => this.log.warn({ err: String(err) }, 'session: disconnect failed'));
    await this.sends.settled();
    this.owning = false;
    if (releaseLock) await this.lock.release();
  }

  /** Drivers read settings synchronously on events that no send precedes (an incoming call and
   *  autoRejectCalls, autoReadMessages): re-read them in the background while connected — only a
   *  connected session gets such events, and hundreds of instances waiting for a scan would
   *  otherwise read their settings every few seconds for nothing. */
  private keepSettingsFresh(): void {
    if (this.settingsTimer) clearInterval(this.settingsTimer);
    const everyMs = Math.max(this.opts.settingsRefreshMs ?? (this.lock.hearsSettingsChanges ? 30_000 : 2000), 100);
    this.settingsTimer = setInterval(() => {
      if (this.connection !== 'connected') return;
      this.settings.reload().catch((err) => this.log.warn({ err: String(err) }, 'session: settings refresh failed'));
    }, everyMs);
    this.settingsTimer.unref();
  }

  /** Told by the lock's connection (a PostgreSQL notification): read them at once. */
  private settingsChanged(): void {
    if (!this.owning) return; // the next start reads them
    this.settings.reload().catch((err) => this.log.warn({ err: String(err) }, 'session: settings refresh failed'));
  }

  // ---- start-up recovery ----

  /** Items left in `sending` by a previous owner may have left: uncertain, never resent. */
  private async recoverInterruptedSends(): Promise<void> {
    const interrupted = { code: 'session_restarted', message: 'The session stopped while sending; the message may or may not have left.' };
    const { db, instanceId } = this.opts;
    let recovered = 0;
    await db.transaction(async (trx) => {
      const items = (await trx('send_items').where({ instance_id: instanceId, status: 'sending' }).forUpdate()) as SendItemRow[];
      for (const item of items) if (await markUncertain(trx, item, interrupted)) recovered++;
    });
    if (recovered) {
      this.log.info({ recovered }, 'session: interrupted sends marked uncertain');
      this.opts.relay.kick();
    }
  }

  /** Publishes the commands of queued items again (command-requeue.ts), for a bus that lost them.
   *  `olderThanMs`: only items at least that old. */
  private async requeueQueuedItems(olderThanMs = 0): Promise<void> {
    if (await requeueQueuedCommands(this.opts.db, { instanceId: this.instanceId, olderThanMs })) this.opts.relay.kick();
  }

  // ---- driver ----

  private async connectNewDriver(reason: string | null): Promise<void> {
    await this.applyState('starting', { reason });
    const driver: NetworkDriver = this.opts.driverFactory(this.driverContext(() => driver));
    this.driver = driver;
    await driver.connect();
  }

  private driverContext(driver: () => NetworkDriver | undefined): DriverContext {
    const { db, crypto } = this.opts;
    return {
      instanceId: this.instanceId,
      auth: new DbAuthStore(db, crypto, this.instanceId),
      listener: this.listenerFor(),
      isOwnSend: (messengerId) => this.isOwnSend(messengerId),
      settings: () => this.settings.current(),
      // Only the current driver may reconnect on our lock: an older one's session has been replaced.
      stillOwner: async () => this.driver === driver() && this.running && this.owning && (await this.lock.isHeld()),
    };
  }

  private listenerFor(): DriverListener {
    const inbound = new InboundRecorder({
      db: this.opts.db,
      instanceId: this.instanceId,
      media: this.opts.media,
      downloadTimeoutMs: this.opts.mediaDownloadTimeoutMs ?? 30_000,
      log: this.log,
      isOwnSend: (id: string) => this.isOwnSend(id),
    });
    return {
      // The logout a reset asks for is reported as the reset, not as the phone unlinking us.
      onState: (state, info) => this.applyState(state, this.resetting && state === 'logged_out' ? { ...info, reason: 'reset' } : info, { retryForMs: STATE_RECORD_RETRY_MS }),
      onMessage: async (msg) => {
        if (await inbound.record(msg)) this.opts.relay.kick();
      },
      onReceipt: async (receipt) => {
        await this.sends.settled(); // the send's own outcome is recorded first
        const moved = await this.opts.db.transaction((trx) => applyReceipt(trx, this.instanceId, receipt.messengerId, receipt.status));
        if (moved) this.opts.relay.kick();
      },
      onPresence: async (update) => {
        await recordPresence(this.opts.db, this.instanceId, update);
        this.opts.relay.kick();
      },
    };
  }

  private async isOwnSend(messengerId: string): Promise<boolean> {
    const row = await this.opts.db('send_items').where({ instance_id: this.instanceId, messenger_id: messengerId }).first('id');
    return row !== undefined;
  }

  /** A stop is on its way (it waits in the runtime's lane behind what runs now): state records
   *  stop waiting for the database, so the stop comes soon. */
  stopComing(): void {
    this.stopRequested = true;
  }

  /** Applies a connection state: row + event, then consume commands only while connected. A state
   *  the network reported waits up to `retryForMs`, while the session runs and no stop is coming,
   *  for a database that is away for a moment (its connection.update would be lost); one the
   *  worker decides itself does not, since it runs in the runtime's lane, where a stop waits. */
  private async applyState(state: ConnectionState, info: StateInfo, { evenWhenStopped = false, retryForMs = 0 } = {}): Promise<void> {
    if (!this.running && !evenWhenStopped) return;
    const wasConnected = this.connection === 'connected';
    this.connection = state;
    try {
      const recorded = await retryWhileFailing(() => recordConnectionState(this.opts.db, this.instanceId, state, info), {
        forMs: retryForMs,
        worthRetrying: (err) => this.running && !this.stopRequested && isDatabaseUnavailable(err),
        onRetry: (err, retryInMs) => this.log.warn({ err: String(err), state, retryInMs }, 'session: the database is not reachable; recording the connection state again'),
      });
      if (recorded) this.opts.relay.kick();
      // Settings are refreshed in the background only while connected: catch up on connecting,
      // before the messages and calls that arrive with the connection read them.
      if (state === 'connected' && !wasConnected) await this.settings.reload().catch((err) => this.log.warn({ err: String(err) }, 'session: settings refresh failed'));
    } finally {
      // Commands follow the connection even when its record failed: queued sends must not wait
      // for the next change of state.
      if (!evenWhenStopped) this.setConsuming(state === 'connected');
    }
  }

  // ---- command consumer ----

  /** Not awaited by callers on the driver's path: stopping waits for the running handler, which may be waiting on the driver. */
  private setConsuming(wanted: boolean): void {
    this.consumerChange = this.consumerChange
      .then(() => (wanted && this.running && this.connection === 'connected' ? this.startConsumer() : this.stopConsumer()))
      .catch((err) => this.log.error({ err: String(err) }, 'session: command consumer change failed'));
  }

  private async startConsumer(): Promise<void> {
    if (this.subscription) return;
    await this.requeueOldItems();
    this.oldItemsTimer = setInterval(() => void this.requeueOldItems(), this.opts.oldItemsCheckMs ?? 3_600_000);
    this.oldItemsTimer.unref();
    this.subscription = await this.opts.bus.consume(
      {
        stream: 'commands',
        filter: subjects.command(this.instanceId),
        durable: `session-${this.instanceId}`,
        maxAckPending: 1,
        retryDelayMs: this.opts.commandRetryDelayMs ?? 1000,
        ackWaitMs: this.opts.commandAckWaitMs,
        // The owner lock makes this the only consumer of the durable, so a command left
        // unacknowledged by a stopped consumer (a drop, a crash) comes back now, not after the ack wait.
        singleOwner: true,
        // Not consuming (paused, waiting for a scan, deleted) for this long: the server drops the
        // consumer, and the next start creates it again with every command still queued.
        idleLifetimeMs: COMMAND_CONSUMER_IDLE_LIFETIME_MS,
      },
      (msg) => this.sends.handle(msg),
    );
  }

  /** The commands stream drops what it held longer than its max age, while SEND_EXPIRY_MS may
   *  keep an item queued longer (a connection down for more than a day): those go out when
   *  consuming starts, after the newer items whose commands the stream still holds, and the
   *  periodic look catches any that a failed attempt left. */
  private requeueOldItems(): Promise<void> {
    return this.requeueQueuedItems(busDefaults.commandsMaxAgeMs - COMMAND_AGE_MARGIN_MS).catch((err) =>
      this.log.warn({ err: String(err) }, 'session: could not publish again the commands of old queued items; will look again'),
    );
  }

  private async stopConsumer(): Promise<void> {
    clearInterval(this.oldItemsTimer);
    this.oldItemsTimer = undefined;
    const sub = this.subscription;
    this.subscription = undefined;
    await sub?.stop();
  }
}
