// The single-owner lock of an instance's network session (DESIGN §1: one socket per account).
// PostgreSQL: a session-level advisory lock on a dedicated connection held for the worker's
// life — if the process dies the connection closes and the lock is released by the server.
// PGlite (embedded): one process owns the database file, so an in-process registry suffices.
import pg from 'pg';
import { isEmbedded, sessionLockKey, settingsChannel, withDeadline, type Db } from '@switchboard/core';

export interface OwnerLock {
  /** Tries once; true when this holder now owns the instance. */
  tryAcquire(): Promise<boolean>;
  /** Whether the lock is still held now (asks the database; false on any failure). */
  isHeld(): Promise<boolean>;
  release(): Promise<void>;
  /** True when the holder is told of settings changes while it holds the lock (onSettingsChanged),
   *  so it need not poll for them. */
  readonly hearsSettingsChanges: boolean;
}

/** How the holder checks its own lock: a round trip every `everyMs`; none within `timeoutMs`
 *  means the lock must be taken as lost (see AdvisoryLock.watch). */
export interface LockProbe {
  everyMs: number;
  timeoutMs: number;
}

export const DEFAULT_LOCK_PROBE: LockProbe = { everyMs: 5_000, timeoutMs: 10_000 };

/** `onSettingsChanged`: on PostgreSQL the holder listens for its instance's settings changes on
 *  the lock's connection (core/settings-channel.ts), and is told of each while it holds the lock. */
export function ownerLockFor(db: Db, instanceId: string, onLost: (err: Error) => void, probe: LockProbe = DEFAULT_LOCK_PROBE, onSettingsChanged?: () => void): OwnerLock {
  if (isEmbedded(db)) return new InProcessLock(db, instanceId);
  const listen = onSettingsChanged && { channel: settingsChannel(instanceId), onNotify: onSettingsChanged };
  return new AdvisoryLock(db, { key: sessionLockKey(instanceId), shared: false }, onLost, probe, listen);
}

/** A PostgreSQL advisory lock on its own connection, watched like an owner lock: `key` is a signed
 *  64-bit integer as a string; `shared` holders exclude only exclusive ones. */
export function advisoryLock(db: Db, lock: { key: string; shared: boolean }, onLost: (err: Error) => void, probe: LockProbe = DEFAULT_LOCK_PROBE): OwnerLock {
  return new AdvisoryLock(db, lock, onLost, probe);
}

/** How long the server waits for a silent lock holder: probes after 10 s idle, every 5 s, 3 tries
 *  (≈ 25 s), and gives up as soon on data it sent and never saw acknowledged (tcp_user_timeout, ms). */
export const LOCK_PEER_PROBES = { tcp_keepalives_idle: 10, tcp_keepalives_interval: 5, tcp_keepalives_count: 3, tcp_user_timeout: 25_000 } as const;

/**
 * The lock's own connection. A process that dies closes it and the server releases the lock at
 * once; a node that is lost closes nothing, and the server would hold the lock until the
 * operating system's keepalive (about two hours) while the replacement session waits. Asking the
 * server to probe this peer releases it within about 25 s. Set with SET rather than a startup
 * option, which connection poolers refuse.
 */
export async function openLockConnection(db: Db): Promise<pg.Client> {
  const client = new pg.Client(db.client.config.connection as pg.ClientConfig | string);
  client.on('error', () => undefined); // reported through 'end' (see tryAcquire)
  await client.connect();
  try {
    for (const [name, value] of Object.entries(LOCK_PEER_PROBES)) await client.query(`SET ${name} = ${value}`);
  } catch (err) {
    await client.end().catch(() => undefined);
    throw err;
  }
  return client;
}

class AdvisoryLock implements OwnerLock {
  private client: pg.Client | undefined;
  private probeTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly db: Db,
    private readonly lock: { key: string; shared: boolean },
    private readonly onLost: (err: Error) => void,
    private readonly probe: LockProbe,
    private readonly listen?: { channel: string; onNotify: () => void },
  ) {}

  get hearsSettingsChanges(): boolean {
    return this.listen !== undefined;
  }

  async tryAcquire(): Promise<boolean> {
    if (this.client) return true;
    const client = await openLockConnection(this.db);
    const take = this.lock.shared ? 'pg_try_advisory_lock_shared' : 'pg_try_advisory_lock';
    const { rows } = await client.query(`SELECT ${take}($1::bigint) AS ok`, [this.lock.key]).catch(async (err) => {
      await client.end().catch(() => undefined);
      throw err;
    });
    if (!rows[0]?.ok) {
      await client.end().catch(() => undefined);
      return false;
    }
    if (this.listen) await this.startListening(client, this.listen);
    // A connection that ends without release() means the lock is gone (server restart, network).
    client.once('end', () => this.lose(client, new Error('the owner-lock connection closed')));
    this.client = client;
    this.watch(client);
    return true;
  }

  /** Changes made before this LISTEN are read by the start that follows the lock's acquisition. */
  private async startListening(client: pg.Client, listen: { channel: string; onNotify: () => void }): Promise<void> {
    client.on('notification', (n) => {
      if (n.channel === listen.channel && this.client === client) listen.onNotify();
    });
    await client.query(`LISTEN ${client.escapeIdentifier(listen.channel)}`).catch(async (err) => {
      await client.end().catch(() => undefined); // releases the lock just taken
      throw err;
    });
  }

  /**
   * Cut off from the database (a network partition), this process would not notice that the
   * server released its lock (≈ 25 s, LOCK_PEER_PROBES) and would keep its WhatsApp connection
   * while a replacement takes the lock and connects too. A connection that does not answer within
   * `timeoutMs` is taken as lost first, so the worker closes its socket before that can happen.
   */
  private watch(client: pg.Client): void {
    let probing = false;
    this.probeTimer = setInterval(() => {
      if (probing || this.client !== client) return;
      probing = true;
      withDeadline(client.query('SELECT 1'), this.probe.timeoutMs, () => new Error(`the owner-lock connection did not answer within ${this.probe.timeoutMs} ms`))
        .catch((err: Error) => this.lose(client, err))
        .finally(() => (probing = false));
    }, this.probe.everyMs);
    this.probeTimer.unref();
  }

  private lose(client: pg.Client, err: Error): void {
    if (this.client !== client) return;
    this.client = undefined;
    clearInterval(this.probeTimer);
    void client.end().catch(() => undefined);
    this.onLost(err);
  }

  async isHeld(): Promise<boolean> {
    const client = this.client;
    if (!client) return false;
    // A session-level advisory lock lives as long as its database session: a round trip on the
    // lock's own connection proves the session (and so the lock) is still there.
    try {
      await client.query('SELECT 1');
      return this.client === client;
    } catch {
      return false;
    }
  }

  async release(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    clearInterval(this.probeTimer);
    if (!client) return;
    // Closing the session releases its advisory locks.
    await client.end().catch(() => undefined);
  }
}

// Keyed by database handle, so two embedded servers in one process (tests) never share locks.
const heldInProcess = new WeakMap<Db, Set<string>>();

class InProcessLock implements OwnerLock {
  private held = false;
  readonly hearsSettingsChanges = false;

  constructor(
    private readonly db: Db,
    private readonly instanceId: string,
  ) {}

  async tryAcquire(): Promise<boolean> {
    if (this.held) return true;
    let owners = heldInProcess.get(this.db);
    if (!owners) heldInProcess.set(this.db, (owners = new Set()));
    if (owners.has(this.instanceId)) return false;
    owners.add(this.instanceId);
    this.held = true;
    return true;
  }

  async isHeld(): Promise<boolean> {
    return this.held;
  }

  async release(): Promise<void> {
    if (!this.held) return;
    this.held = false;
    heldInProcess.get(this.db)?.delete(this.instanceId);
  }
}
