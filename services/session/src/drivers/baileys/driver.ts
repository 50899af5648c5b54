// The WhatsApp network driver: one Baileys socket per instance. It owns the socket's lifecycle
// (QR or pairing code, restart after pairing, reconnects), sends with the reserved message id and
// turns Baileys events into listener calls, in order.
import type { Knex } from 'knex';
import {
  Browsers,
  generateWAMessageContent,
  generateWAMessageFromContent,
  isJidBroadcast,
  isJidGroup,
  isJidNewsletter,
  isJidStatusBroadcast,
  makeCacheableSignalKeyStore,
  proto,
  type AuthenticationCreds,
  type BaileysEventMap,
  type GroupMetadata,
  type WACallEvent,
  type WAMessage,
  type WAMessageKey,
  type WAVersion,
} from '@whiskeysockets/baileys';
import {
  createLogger,
  isDatabaseUnavailable,
  NOT_CONNECTED,
  PAIRING_CODE_TTL_MS,
  PAIRING_TIMEOUT,
  problems,
  type Problem,
  SendError,
  withDeadline,
  type ConnectionState,
  type Destination,
  type DriverContext,
  type Logger,
  type NetworkDriver,
  type OutboundMessage,
  type PairingCode,
  type Receipt,
} from '@switchboard/core';
import { forgetUnfinishedPairing, hasLinkedAccount, loadCreds, makeSignalKeyStore, saveCreds } from './auth-state.ts';
import { backoffDelay, closeAction, closeCode, closeDetail, closedUnder, DEFAULT_BACKOFF, socketRenewal, type BackoffOptions } from './close-policy.ts';
import { normaliseMessage, type NormaliseDeps } from './inbound.ts';
import { destinationJid, isPersonJid, lidSide, normalised, phoneOf } from './jids.ts';
import { downloadWithRetry } from './media-download.ts';
import { messageContent } from './outbound.ts';
import type { WebVersionSource } from './web-version.ts';
import { ForwardOnlyReceipts, receiptsFromUpdates, receiptsFromUserReceipts } from './receipts.ts';
import { SentMessages } from './sent-messages.ts';
import { TtlCache } from './ttl-cache.ts';
import { SerialQueue } from './serial.ts';
import { retryWhileFailing } from '../../retry-while-failing.ts';
import { realSocketFactory, type BaileysSocket, type SocketFactory } from './socket.ts';

export interface BaileysDriverOptions {
  /** Database handle: `getMessage` reads our own send items from it. */
  db: Knex;
  log?: Logger;
  /** Defaults to makeWASocket; tests pass a stand-in. */
  socketFactory?: SocketFactory;
  backoff?: BackoffOptions;
  /** How long requestPairingCode waits for the socket to be ready (first QR). */
  pairingReadyTimeoutMs?: number;
  /** How long a socket's pairing refs last (QR_REFS_BUDGET_MS); tests shorten it. */
  qrRefsBudgetMs?: number;
  /** How long an unpaired session opens sockets for QR codes before it stops, `logged_out` with
   *  reason PAIRING_TIMEOUT (undefined or 0: for ever). Checked when a socket of the pairing ends
   *  (its QR codes run out about every 160 s), so it stops at most that much later. */
  pairingTimeoutMs?: number;
  /** How long a logout of a linked session between connections waits for one (UNLINK_CONNECT_WAIT_MS). */
  unlinkConnectWaitMs?: number;
  /** A pairing code is asked on a fresh socket when the current one has less left (PAIRING_WINDOW_MS). */
  pairingWindowMs?: number;
  /** After the message went to the socket: how long before the send counts as uncertain. */
  sendTimeoutMs?: number;
  mediaUploadTimeoutMs?: number;
  mediaDownloadTimeoutMs?: number;
  maxMediaBytes?: number;
  /** Which media URLs may be fetched: WhatsApp's media hosts unless a test serves its own. */
  mediaUrlAllowed?: (url: URL) => boolean;
  /**
   * Asked after close 440 (another socket took over the account). Reconnect only when this says
   * we still hold the owner lock. Defaults to DriverContext.stillOwner (the session worker's lock);
   * with neither the driver stays down and leaves it to the worker.
   */
  stillOwner?: (instanceId: string) => Promise<boolean>;
  /** The least time between two reconnects for media hosts the socket can no longer ask for
   *  (MEDIA_HOSTS_RENEWAL_MS); tests shorten it. */
  mediaHostsRenewalMs?: number;
  /** How long the check of a socket's media hosts may wait for the server (MEDIA_HOSTS_CHECK_MS). */
  mediaHostsCheckMs?: number;
  /** Baileys' own log level; its debug output can contain key material, so keep it at warn. */
  baileysLogLevel?: string;
  /** The WhatsApp Web version sockets announce; createBaileysDriver gives its drivers one source. */
  webVersion?: WebVersionSource;
}

/** How long a socket can wait for a pairing: Baileys shows the first of the refs WhatsApp hands
 *  out for 60 s and each further one for 20 s (six refs), then ends the socket (408), and a
 *  pairing code asked on it dies with it. */
const QR_REFS_BUDGET_MS = 60_000 + 5 * 20_000;
/** How long a received message or receipt waits for a database that cannot be reached before it
 *  is given up. */
const RECORD_RETRY_MS = 120_000;
/** How long a logout waits for a linked session's connection to come back, to unlink the device,
 *  and then for the unlink: short, as a reset through the API waits for it (the gateway asks a
 *  session for 10 s). */
const UNLINK_CONNECT_WAIT_MS = 4000;
/** The least time a new pairing code is given to be typed on the phone. */
const PAIRING_WINDOW_MS = 100_000;
/** Error codes of a group query that mean the instance may not send there (a bad group id, not
 *  authorised, not a member, no such group); others (rate limit, server errors) are passing. */
const GROUP_REFUSALS = new Set([400, 401, 403, 404, 406]);
/** At most one reconnect in this time to ask the media hosts again: hosts WhatsApp keeps refusing
 *  fail the media sends instead of reconnecting the session in a loop. */
const MEDIA_HOSTS_RENEWAL_MS = 10 * 60_000;
/** How long the check of a socket's media hosts may wait for the server. */
const MEDIA_HOSTS_CHECK_MS = 10_000;
/** Entries a look-up cache (groups, numbers, watched contacts) holds at most. */
const CACHE_LIMIT = 10_000;
const GROUP_METADATA_TTL_MS = 60_000;
/** Signal keys kept in memory in front of the sealed store (Baileys' own default lifetime). */
const SIGNAL_KEY_TTL_MS = 5 * 60_000;
const SIGNAL_KEY_LIMIT = 20_000;
const ON_NETWORK_TTL_MS = 3_600_000;

// History sync kept bounded: the bootstrap chunk, push names and non-blocking data (LID mappings)
// but no message history (RECENT/FULL/ON_DEMAND), which we would not store anyway.
const HISTORY_TYPES_SYNCED = new Set<number>([
  proto.HistorySync.HistorySyncType.INITIAL_BOOTSTRAP,
  proto.HistorySync.HistorySyncType.PUSH_NAME,
  proto.HistorySync.HistorySyncType.NON_BLOCKING_DATA,
]);

export class BaileysDriver implements NetworkDriver {
  private readonly log: Logger;
  private readonly baileysLog: Logger;
  private readonly factory: SocketFactory;
  private readonly backoff: BackoffOptions;
  private readonly keyStore;
  /** Caches the key store for every socket of this driver; emptied with the credentials. */
  private readonly keyCache = new TtlCache(SIGNAL_KEY_TTL_MS, SIGNAL_KEY_LIMIT);
  private readonly sent: SentMessages;
  private readonly receipts = new ForwardOnlyReceipts();
  private readonly events: SerialQueue;
  private credsWrites: Promise<void> = Promise.resolve();

  private sock: BaileysSocket | null = null;
  /** The WhatsApp Web version the current socket announced (undefined: Baileys' own). */
  private sockVersion: WAVersion | undefined;
  /** Bumped for every socket; events of an older socket are ignored. */
  private generation = 0;
  private creds: AuthenticationCreds | null = null;
  private running = false;
  private connected = false;
  private reconnectAttempt = 0;
  /** Restarts (515) since the last login: the second in a row waits its backoff. */
  private restartsSinceOpen = 0;
  private reconnectTimer: NodeJS.Timeout | null = null;
  /** The socket that has shown a QR, i.e. is ready for a pairing-code request. */
  private readySocket: BaileysSocket | null = null;
  /** Sockets known closed at once, while their close may still wait its turn behind slow events:
   *  nothing is sent or asked on them in the meantime. */
  private readonly endedSockets = new WeakSet<BaileysSocket>();
  /** When a socket was last ended to ask the media hosts again. */
  private mediaHostsRenewedAt = -Infinity;
  /** When readySocket showed its first QR: its pairing refs, and a code asked on it, run out from then. */
  private readySince = 0;
  /** A logout is connecting to unlink the device: that connection is not reported (no
   *  `connected` event, no sends taken up again in the middle of a reset). */
  private unlinking = false;
  /** When the first QR of the pairing under way was shown (a pairing-code request starts it again). */
  private pairingSince: number | null = null;
  private readyWaiters: Array<{ resolve: (sock: BaileysSocket) => void; reject: (err: Error) => void }> = [];
  /** Why the last socket closed, until a newer one reaches the server (explains a failed pairing request). */
  private lastCloseReason: string | null = null;
  /** Contacts whose presence the current socket asked for (a subscription ends with its socket). */
  private presenceWatched = new Set<string>();
  private readonly groupCache = new TtlCache(GROUP_METADATA_TTL_MS, CACHE_LIMIT);
  /** Counts group changes heard of, so a members query that overlapped one is not cached. */
  private groupChanges = 0;
  private readonly onNetworkCache = new TtlCache(ON_NETWORK_TTL_MS, CACHE_LIMIT);

  constructor(
    private readonly ctx: DriverContext,
    private readonly opts: BaileysDriverOptions,
  ) {
    const log = opts.log ?? createLogger({ name: 'session' });
    this.log = log.child({ driver: 'baileys', instanceId: ctx.instanceId });
    this.baileysLog = log.child({ component: 'baileys', instanceId: ctx.instanceId }, { level: quieterLevel(log, opts.baileysLogLevel ?? 'warn') });
    this.factory = opts.socketFactory ?? realSocketFactory;
    this.backoff = opts.backoff ?? DEFAULT_BACKOFF;
    this.keyStore = makeSignalKeyStore(ctx.auth);
    this.sent = new SentMessages(opts.db, ctx.instanceId);
    this.events = new SerialQueue((error) => this.log.error({ err: errorSummary(error) }, 'event handling failed'));
  }

  // ── lifecycle ──────────────────────────────────────────────────────────────

  async connect(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.reconnectAttempt = 0;
    this.restartsSinceOpen = 0;
    await this.report('starting', {});
    try {
      await this.openSocket();
    } catch (error) {
      this.running = false; // e.g. the credentials could not be read: a later connect() tries again
      throw error;
    }
  }

  /** Closes the socket, keeps credentials. The worker records the resulting state itself. */
  async disconnect(): Promise<void> {
    await this.closeSocket();
    await this.events.idle();
    // The worker releases the owner lock next: a credentials write still in flight must land
    // before the next owner reads them.
    await this.credsWrites;
  }

  async logout(): Promise<void> {
    const reconnected = await this.reconnectToUnlink();
    const sock = this.sock;
    const wasConnected = this.connected;
    this.stopRunning();
    this.unlinking = false;
    if (sock && wasConnected) {
      // Unlinks the device on the phone's side too; Baileys then closes the socket (ignored: stale).
      // After a reconnect for it, within what is left of the time a reset through the API waits.
      const limitMs = reconnected ? UNLINK_CONNECT_WAIT_MS : 10_000;
      await withTimeout(sock.logout(), limitMs, 'logout').catch((error) => this.log.warn({ err: errorSummary(error) }, 'logout request failed'));
    }
    if (sock) await sock.end(undefined).catch(() => {});
    await this.clearAuth();
    await this.report('logged_out', { reason: 'logout' });
  }

  /** A linked session between connections (a drop, a restart) cannot unlink its device: it
   *  connects now rather than at its backoff's end, and the logout waits a little for it. Without
   *  that the phone keeps listing a device nobody uses, and WhatsApp allows only four, so the
   *  next pairing may be refused. A connection that does not come in time leaves it linked. */
  private async reconnectToUnlink(): Promise<boolean> {
    if (this.connected || !this.running || !this.creds || !hasLinkedAccount(this.creds)) return false;
    this.unlinking = true;
    if (this.reconnectTimer) await this.openSocket().catch(() => undefined);
    const deadline = Date.now() + (this.opts.unlinkConnectWaitMs ?? UNLINK_CONNECT_WAIT_MS);
    while (!this.connected && this.running && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
    if (!this.connected) this.log.warn('not connected in time to unlink the device; the phone keeps listing it until WhatsApp removes it');
    return true;
  }

  /** Phone pairing: asked only once the socket is ready (has shown a QR); returns `ABCD-EFGH`. */
  async requestPairingCode(phone: string): Promise<PairingCode> {
    if (!/^\d{8,15}$/.test(phone)) throw problems.badRequest('invalid_phone', 'The phone must be 8 to 15 digits.');
    if (this.connected) throw problems.conflict('already_connected', 'The instance is already connected.');
    if (!this.running) throw problems.conflict('not_pairing', 'The session is not waiting for a pairing.');
    // Kept credentials of a linked phone: the socket logs in with them and never shows a QR.
    if (this.creds && hasLinkedAccount(this.creds)) throw problems.linkedAlready();
    this.pairingSince = Date.now(); // somebody is pairing now: a socket ending meanwhile is not the end of it
    const readyTimeout = this.opts.pairingReadyTimeoutMs ?? 20_000;
    const budget = this.opts.qrRefsBudgetMs ?? QR_REFS_BUDGET_MS;
    let sock = await this.waitUntilReady(readyTimeout);
    // A code lives only as long as the socket it was asked on: with little of its refs' time
    // left, the code is asked on a fresh socket, so the phone's user has time to type it.
    if (this.readySince + budget - Date.now() < (this.opts.pairingWindowMs ?? PAIRING_WINDOW_MS)) {
      await this.renewSocket();
      sock = await this.waitUntilReady(readyTimeout);
    }
    const code = await sock.requestPairingCode(phone).catch((error) => {
      // The socket closed under the request: nothing was asked of the phone; a new one is coming.
      if (closedUnder(error)) throw pairingNotReady();
      throw error;
    });
    this.pairingSince = Date.now(); // somebody is pairing now: the code gets the whole time
    const expiresAt = new Date(Math.min(Date.now() + PAIRING_CODE_TTL_MS, this.readySince + budget));
    return { code: code.length === 8 ? `${code.slice(0, 4)}-${code.slice(4)}` : code, expiresAt };
  }

  /** Unpaired past the time. A pairing that succeeded (the scan came, the login is under way)
   *  is never given up, however late. */
  private pairingOverdue(): boolean {
    const timeoutMs = this.opts.pairingTimeoutMs;
    if (!timeoutMs || this.pairingSince === null || (this.creds && hasLinkedAccount(this.creds))) return false;
    return Date.now() - this.pairingSince >= timeoutMs;
  }

  /** Nobody scanned a QR or typed a code in time: each further socket would be one more
   *  handshake with WhatsApp (every ~160 s, for ever, for an instance nobody uses), and an account
   *  that keeps asking for QR codes is one WhatsApp may flag. The session stays up without a
   *  socket; a connect or a pairing-code request replaces this driver with a new one. */
  private async endUnfinishedPairing(): Promise<void> {
    this.stopRunning();
    this.pairingSince = null;
    this.log.info({ pairingTimeoutMs: this.opts.pairingTimeoutMs }, 'nobody paired the instance in time; no more QR codes until it is connected again');
    await this.report('logged_out', { reason: PAIRING_TIMEOUT });
  }

  /** Replaces the socket that is waiting for a pairing with a fresh one (new refs). */
  private async renewSocket(): Promise<void> {
    const old = this.sock;
    try {
      await this.openSocket(); // a new generation: the old socket's events are ignored from now on
    } catch (error) {
      // The old socket's close will be ignored: reconnecting is ours to start, and it is no
      // longer the socket to hand out.
      if (this.sock === old) this.sock = null;
      if (this.readySocket === old) this.readySocket = null;
      this.reopenFailed(error);
      throw pairingNotReady();
    } finally {
      await old?.end(undefined).catch(() => {});
    }
    if (!this.running) throw stoppedWhilePairing();
  }

  private async openSocket(): Promise<void> {
    this.clearReconnectTimer();
    const generation = ++this.generation;
    this.creds ??= await loadCreds(this.ctx.auth);
    const version = await this.opts.webVersion?.current();
    if (generation !== this.generation || !this.running) return; // stopped meanwhile
    this.sockVersion = version;
    if (forgetUnfinishedPairing(this.creds)) {
      this.log.info('a pairing code was not confirmed in time; pairing starts afresh');
      this.writeCreds(this.creds);
    }
    const sock = this.factory({
      auth: { creds: this.creds, keys: makeCacheableSignalKeyStore(this.keyStore, this.baileysLog, this.keyCache) },
      logger: this.baileysLog,
      browser: Browsers.ubuntu('Chrome'),
      ...(version && { version }),
      markOnlineOnConnect: false,
      syncFullHistory: false,
      shouldSyncHistoryMessage: (n) => HISTORY_TYPES_SYNCED.has(n.syncType ?? -1),
      getMessage: (key) => this.sent.get(key),
      // The members resolveDestination just read: relayMessage would otherwise query them again.
      cachedGroupMetadata: async (jid) => this.groupCache.get<GroupMetadata>(jid),
    });
    this.sock = sock;
    this.readySocket = null;
    this.presenceWatched = new Set();
    this.subscribe(sock, generation);
  }

  /** Stops wanting a connection: no reconnects, events of the current socket ignored from now on. */
  private stopRunning(): void {
    this.running = false;
    this.connected = false;
    this.clearReconnectTimer();
    this.generation++;
    this.sock = null;
    this.readySocket = null;
    // A pairing-code request waiting for a QR gets none now: answered at once, not after its time-out.
    for (const waiter of this.readyWaiters.splice(0)) waiter.reject(stoppedWhilePairing());
  }

  private async closeSocket(): Promise<void> {
    const sock = this.sock;
    sock?.ev.flush(); // what Baileys holds is taken while the socket is current (see subscribe)
    this.stopRunning();
    if (sock) await sock.end(undefined).catch((error) => this.log.warn({ err: errorSummary(error) }, 'socket end failed'));
  }

  private async clearAuth(): Promise<void> {
    await this.credsWrites; // a creds write still in flight must not resurrect what we clear
    await this.ctx.auth.clear();
    this.keyCache.flushAll();
    this.creds = null;
  }

  /** A socket that could not be opened is tried again later, while the session runs. */
  private reopenFailed(error: unknown): void {
    this.log.error({ err: errorSummary(error) }, 'could not open the socket');
    if (this.running) this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    const delay = backoffDelay(this.reconnectAttempt++, this.backoff);
    this.log.info({ delayMs: delay }, 'reconnecting');
    this.clearReconnectTimer();
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      if (!this.running) return;
      this.openSocket().catch((error) => this.reopenFailed(error));
    }, delay);
  }

  private clearReconnectTimer(): void {
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
  }

  private waitUntilReady(timeoutMs: number): Promise<BaileysSocket> {
    if (this.readySocket && this.readySocket === this.sock && !this.endedSockets.has(this.readySocket)) return Promise.resolve(this.readySocket);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.readyWaiters = this.readyWaiters.filter((w) => w !== waiter);
        reject(
          this.lastCloseReason === 'server_unreachable'
            ? pairingNotReady('The WhatsApp servers cannot be reached from this service (it needs outbound access to web.whatsapp.com:443); pairing is not possible until they can.')
            : pairingNotReady(),
        );
      }, timeoutMs);
      const waiter = {
        resolve: (sock: BaileysSocket) => (clearTimeout(timer), resolve(sock)),
        reject: (err: Error) => (clearTimeout(timer), reject(err)),
      };
      this.readyWaiters.push(waiter);
    });
  }

  // ── events ─────────────────────────────────────────────────────────────────

  private subscribe(sock: BaileysSocket, generation: number): void {
    const current = () => generation === this.generation;
    const on = <E extends keyof BaileysEventMap>(event: E, handle: (data: BaileysEventMap[E]) => Promise<void>) => {
      sock.ev.on(event, (data) => {
        if (current()) this.events.post(() => (current() ? handle(data) : Promise.resolve()));
      });
    };
    // Messages and receipts the socket took while it was current are handled even if it is closed
    // before their turn (behind a slow media download): the network acknowledged them already and
    // will not send them again. disconnect() waits for them.
    const onReceived = <E extends keyof BaileysEventMap>(event: E, handle: (data: BaileysEventMap[E]) => Promise<void>) => {
      sock.ev.on(event, (data) => {
        if (current()) this.events.post(() => handle(data));
      });
    };
    // Credentials are written on their own chain, so a slow listener never delays them.
    sock.ev.on('creds.update', () => {
      if (current() && this.creds) this.writeCreds(this.creds);
    });
    // Readiness for pairing is signalled at once, not behind queued events.
    // A logged-in socket holds its events until the server has handed over what it kept offline,
    // and a socket that ends before then (dropped, replaced) discards them, although it told the
    // server they arrived: they are taken first, ahead of the close.
    sock.ev.on('connection.update', (update) => {
      if (update.connection === 'close') {
        this.endedSockets.add(sock);
        sock.ev.flush();
      }
      if (current() && update.qr) this.markReady(sock);
    });
    on('connection.update', (update) => this.onConnectionUpdate(sock, update));
    onReceived('messages.upsert', (upsert) => this.onUpsert(sock, upsert));
    onReceived('messages.update', (updates) => this.onReceipts(receiptsFromUpdates(updates)));
    onReceived('message-receipt.update', (updates) => this.onReceipts(receiptsFromUserReceipts(updates, ownJids(sock, this.creds))));
    on('presence.update', (update) => this.onPresence(update));
    on('call', (calls) => this.onCalls(sock, calls));
    // Members changed: the next send reads them again (relayMessage encrypts for those it is
    // given). At once, not behind queued events, as a send may come before them.
    sock.ev.on('group-participants.update', ({ id }) => this.forgetGroup(id));
    sock.ev.on('groups.update', (updates) => updates.forEach((u) => u.id && this.forgetGroup(u.id)));
  }

  private writeCreds(creds: AuthenticationCreds): void {
    this.credsWrites = this.credsWrites
      .then(() => saveCreds(this.ctx.auth, creds))
      .catch((error) => this.log.error({ err: errorSummary(error) }, 'saving credentials failed'));
  }

  private markReady(sock: BaileysSocket): void {
    if (this.readySocket !== sock) this.readySince = Date.now();
    this.readySocket = sock;
    this.lastCloseReason = null;
    const waiters = this.readyWaiters;
    this.readyWaiters = [];
    for (const waiter of waiters) waiter.resolve(sock);
  }

  private async onConnectionUpdate(sock: BaileysSocket, update: BaileysEventMap['connection.update']): Promise<void> {
    if (update.qr && !this.connected) {
      this.reconnectAttempt = 0; // the server answered: the next QR session starts without a long backoff
      this.pairingSince ??= Date.now();
      await this.report('awaiting_scan', { qr: update.qr });
    }
    if (update.connection === 'open') {
      this.connected = true;
      if (this.unlinking) return; // the logout waiting for it takes it from here
      // Logged in with kept credentials while a pairing-code request waited for a QR: none will come.
      for (const waiter of this.readyWaiters.splice(0)) waiter.reject(problems.linkedAlready());
      this.lastCloseReason = null;
      this.reconnectAttempt = 0;
      this.restartsSinceOpen = 0;
      this.pairingSince = null;
      await this.report('connected', { phone: phoneOf(sock.user?.id) });
    }
    if (update.connection === 'close') await this.onClose(update.lastDisconnect?.error);
  }

  private async onClose(error: unknown): Promise<void> {
    this.connected = false;
    this.sock = null;
    this.readySocket = null;
    const statusCode = closeCode(error);
    const action = closeAction(statusCode, error);
    const reason = action.kind === 'restart' ? 'restart_required' : action.reason;
    this.lastCloseReason = reason;
    // (`statusCode`, not `code`: the logger redacts fields named `code`, which may be pairing codes.)
    const fields = { statusCode, action: action.kind, reason, detail: closeDetail(error) };
    if (reason === 'server_unreachable') this.log.warn(fields, 'cannot reach the WhatsApp servers; retrying with backoff');
    else if (reason === 'client_outdated') {
      this.opts.webVersion?.refused(this.sockVersion);
      this.log.error(fields, 'WhatsApp refused the client version; reading the current one and retrying (if this repeats, update @whiskeysockets/baileys)');
    } else this.log.info(fields, 'socket closed');
    switch (action.kind) {
      case 'restart':
        // Once (after pairing) at once; a server that keeps asking is not answered in a tight loop.
        if (this.restartsSinceOpen++ > 0) {
          await this.report('reconnecting', { reason: 'restart_required' });
          return this.scheduleReconnect();
        }
        // A failed reopen (e.g. credentials unreadable for a moment) must not leave us without a socket.
        await this.openSocket().catch((error) => this.reopenFailed(error));
        return;
      case 'reconnect':
        // Unpaired: whatever ended the socket (its QR codes ran out, a proxy cut it), not another one.
        if (this.pairingOverdue()) return this.endUnfinishedPairing();
        await this.report('reconnecting', { reason: action.reason });
        this.scheduleReconnect();
        return;
      case 'logged_out':
        this.stopRunning();
        await this.clearAuth();
        await this.report('logged_out', { reason: action.reason });
        return;
      case 'replaced': {
        await this.report('reconnecting', { reason: action.reason });
        const owner = await this.stillOwner();
        if (owner && this.running) this.scheduleReconnect();
        else {
          this.log.warn('another connection took over this account; not reconnecting');
          this.stopRunning();
        }
        return;
      }
    }
  }

  private async onUpsert(sock: BaileysSocket, upsert: BaileysEventMap['messages.upsert']): Promise<void> {
    // Both types are live: Baileys marks what the server held for us while we were offline
    // `append`, and history arrives as `messaging-history.set` instead (ignored). Our own sends
    // go out with relayMessage, which upserts nothing; the rest of `append` are stubs without
    // content (group notifications, offline calls), which normaliseMessage drops. The incoming
    // table's unique message id absorbs a message the server hands over twice.
    if (upsert.type !== 'notify' && upsert.type !== 'append') return;
    for (const msg of upsert.messages) await this.takeReceived(sock, msg);
  }

  private takeReceived(sock: BaileysSocket, msg: WAMessage): Promise<void> {
    return this.recordHandedOver('received message', msg.key?.id, () => this.onLiveMessage(sock, msg));
  }

  /** The network acknowledged what it handed over (a message, a receipt) and will not send it
   *  again: a database that cannot be reached for a moment (a restart, a failover, a deadlock) is
   *  waited for, in order, rather than the record lost. Any other fault is logged, and the next
   *  one goes on. */
  private async recordHandedOver(what: string, messageId: string | null | undefined, record: () => Promise<void>): Promise<void> {
    await retryWhileFailing(record, {
      forMs: RECORD_RETRY_MS,
      worthRetrying: isDatabaseUnavailable,
      onRetry: (error, retryInMs) => this.log.warn({ err: errorSummary(error), messageId, retryInMs }, `the database is not reachable; recording the ${what} again`),
    }).catch((error) => this.log.error({ err: errorSummary(error), messageId }, `could not process a ${what}`));
  }

  private async onLiveMessage(sock: BaileysSocket, msg: WAMessage): Promise<void> {
    const chat = msg.key?.remoteJid;
    if (!chat) return;
    const settings = this.ctx.settings();
    if (isJidStatusBroadcast(chat)) {
      if (settings.autoReadStatus && !msg.key.fromMe) await this.markRead(sock, msg.key);
      return;
    }
    if (isJidNewsletter(chat) || isJidBroadcast(chat)) return;
    const inbound = await normaliseMessage(msg, this.normaliseDeps(sock));
    if (!inbound) return;
    this.watchPresence(sock, chat);
    await this.ctx.listener.onMessage(inbound);
    if (settings.autoReadMessages && !msg.key.fromMe) await this.markRead(sock, msg.key);
  }

  private async markRead(sock: BaileysSocket, key: WAMessageKey): Promise<void> {
    await sock.readMessages([key]).catch((error) => this.log.warn({ err: errorSummary(error) }, 'marking read failed'));
  }

  private normaliseDeps(sock: BaileysSocket): NormaliseDeps {
    return {
      me: () => {
        const me = ownUser(sock, this.creds);
        return { phone: phoneOf(me.id), lid: normalised(me.lid) };
      },
      isOwnSend: (id) => this.ctx.isOwnSend(id),
      download: (message) =>
        downloadWithRetry(message, {
          timeoutMs: this.opts.mediaDownloadTimeoutMs ?? 25_000,
          maxBytes: this.opts.maxMediaBytes ?? 100 * 1024 * 1024,
          reupload: (m) => sock.updateMediaMessage(m),
          urlAllowed: this.opts.mediaUrlAllowed,
        }),
    };
  }

  private async onReceipts(receipts: Receipt[]): Promise<void> {
    for (const receipt of receipts) {
      if (this.receipts.accept(receipt)) await this.recordHandedOver('receipt', receipt.messengerId, () => this.ctx.listener.onReceipt(receipt));
    }
  }

  private async onPresence(update: BaileysEventMap['presence.update']): Promise<void> {
    // A member typing in a group: chat.presence has no field for the group, and reported as is it
    // would read as typing in the private chat.
    if (isJidGroup(update.id)) return;
    for (const [jid, data] of Object.entries(update.presences)) {
      await this.ctx.listener.onPresence({
        phone: phoneOf(jid),
        chatLid: lidSide(jid, null),
        presence: data.lastKnownPresence,
      });
    }
  }

  private async onCalls(sock: BaileysSocket, calls: WACallEvent[]): Promise<void> {
    for (const call of calls) {
      if (call.status !== 'offer') continue;
      if (this.ctx.settings().autoRejectCalls) {
        await sock.rejectCall(call.id, call.from).catch((error) => this.log.warn({ err: errorSummary(error) }, 'rejecting a call failed'));
      }
      await this.ctx.listener.onCall?.({ id: call.id, from: call.callerPn ?? call.from });
    }
  }

  /** The option wins (tests); else the session worker's owner lock through the context. */
  private async stillOwner(): Promise<boolean> {
    const ask = this.opts.stillOwner ? () => this.opts.stillOwner!(this.ctx.instanceId) : this.ctx.stillOwner;
    return ask ? await ask().catch(() => false) : false;
  }

  private async report(state: ConnectionState, info: { qr?: string | null; phone?: string | null; reason?: string | null }): Promise<void> {
    await this.ctx.listener.onState(state, info);
  }

  // ── sending ────────────────────────────────────────────────────────────────

  async send(msg: OutboundMessage): Promise<void> {
    const sock = this.sock;
    if (!sock || !this.connected || this.endedSockets.has(sock)) throw new SendError(NOT_CONNECTED, 'the instance is not connected', true);
    const content = messageContent(msg); // SendError on bad input
    const jid = await this.resolveDestination(sock, msg.to);

    let prepared: proto.IMessage;
    try {
      prepared = await generateWAMessageContent(content, {
        upload: sock.waUploadToServer,
        logger: this.baileysLog,
        mediaUploadTimeoutMs: this.opts.mediaUploadTimeoutMs ?? 60_000,
        jid,
      });
    } catch (error) {
      throw await this.uploadFailure(sock, error);
    }
    const full = generateWAMessageFromContent(jid, prepared, { userJid: sock.user?.id ?? '', messageId: msg.messengerId });
    this.sent.remember(msg.messengerId, full.message!);

    // From here on the message may reach the network: a failure no longer proves it did not.
    try {
      await withTimeout(sock.relayMessage(jid, full.message!, { messageId: msg.messengerId }), this.opts.sendTimeoutMs ?? 30_000, 'send');
    } catch (error) {
      // Refused by the close before the stanza was written (see closedUnder): nothing left, so
      // the send goes back to the queue. Anything else may have left.
      if (closedUnder(error)) throw new SendError(NOT_CONNECTED, `the connection closed before the message left: ${errorSummary(error)}`, true);
      const timedOut = error instanceof TimeoutError;
      throw new SendError(timedOut ? 'timeout' : 'connection_lost', `the send was interrupted: ${errorSummary(error)}`, false);
    }
    this.echoOwnSend(sock, full, msg);
    this.watchPresence(sock, jid);
  }

  /** What a failed media upload means for its send. Nothing was sent either way. */
  private async uploadFailure(sock: BaileysSocket, error: unknown): Promise<SendError> {
    // An upload that met a closed connection is no verdict on the file: back to the queue.
    const closed = () => new SendError(NOT_CONNECTED, `the connection closed while the media was uploaded: ${errorSummary(error)}`, true);
    if (closedUnder(error) || this.endedSockets.has(sock)) return closed();
    const failed = new SendError('media_upload_failed', `could not prepare the message: ${errorSummary(error)}`, true);
    // Baileys keeps a failed media-hosts query (a time-out, a server error) for the socket's
    // life: every later upload on it would fail, and only a new socket asks again. An answer that
    // is only slow (our deadline) is no such failure: it may still come.
    const hosts = await withTimeout(sock.refreshMediaConn(false), this.opts.mediaHostsCheckMs ?? MEDIA_HOSTS_CHECK_MS, 'media hosts query').then(
      () => 'known' as const,
      (err: unknown) => (err instanceof TimeoutError ? ('slow' as const) : ('lost' as const)),
    );
    // The connection closed meanwhile: nothing was sent, back to the queue.
    if (this.endedSockets.has(sock)) return closed();
    if (hosts !== 'lost') return failed;
    if (Date.now() - this.mediaHostsRenewedAt < (this.opts.mediaHostsRenewalMs ?? MEDIA_HOSTS_RENEWAL_MS)) return failed;
    this.mediaHostsRenewedAt = Date.now();
    this.log.warn({ err: errorSummary(error) }, 'the socket can no longer ask where to upload media; reconnecting');
    await sock.end(socketRenewal('media_hosts_unavailable'));
    return new SendError(NOT_CONNECTED, 'the connection is renewed to ask again where to upload media', true);
  }

  /** chat.presence needs a subscription per contact and socket: asked for every contact a
   *  private chat is had with (groups report their members' typing only inside the group). */
  private watchPresence(sock: BaileysSocket, jid: string): void {
    const contact = normalised(jid);
    if (!contact || !isPersonJid(contact) || this.presenceWatched.has(contact)) return;
    if (this.presenceWatched.size >= CACHE_LIMIT) this.presenceWatched.clear();
    this.presenceWatched.add(contact);
    sock.presenceSubscribe(contact).catch((error) => {
      this.presenceWatched.delete(contact);
      this.log.debug({ err: errorSummary(error) }, 'presence subscription failed');
    });
  }

  /** Checks and maps a destination; definite failures here mean nothing was sent. */
  private async resolveDestination(sock: BaileysSocket, to: Destination): Promise<string> {
    const jid = destinationJid(to);
    if (to.kind === 'phone') return this.phoneOnNetwork(sock, to.phone, jid);
    if (to.kind === 'group') {
      const meta = await this.groupForSend(sock, jid);
      if (this.ctx.settings().protectAnnouncementGroups) assertMayPostTo(meta, ownJids(sock, this.creds));
    }
    return jid;
  }

  /** The group's members, which relayMessage needs. Read here, before anything is sent: the
   *  server refusing them (not a member, no such group) fails the send for good, and a query
   *  that did not come back (connection lost, time-out) puts it back in the queue. */
  private async groupForSend(sock: BaileysSocket, jid: string): Promise<GroupMetadata> {
    try {
      return await this.groupMetadata(sock, jid);
    } catch (error) {
      // Baileys' Boom of the server's error node carries its code; only these say "not for you".
      const refused = GROUP_REFUSALS.has((error as { data?: unknown }).data as number);
      throw new SendError(refused ? 'group_unavailable' : NOT_CONNECTED, `could not read the group: ${errorSummary(error)}`, true);
    }
  }

  /** WhatsApp's canonical JID of a phone number; `not_on_network` when it has no account. */
  private async phoneOnNetwork(sock: BaileysSocket, phone: string, jid: string): Promise<string> {
    const cached = this.onNetworkCache.get<string>(phone);
    if (cached) return cached;
    let result: { jid: string; exists: boolean }[] | undefined;
    try {
      result = await sock.onWhatsApp(phone);
    } catch (error) {
      // The lookup is a courtesy; when it fails the send goes ahead and the network decides.
      this.log.warn({ err: errorSummary(error) }, 'number lookup failed');
      return jid;
    }
    if (!result) return jid;
    const found = result.find((r) => r.exists);
    if (!found) throw new SendError('not_on_network', 'the number is not on WhatsApp', true);
    this.onNetworkCache.set(phone, found.jid);
    return found.jid;
  }

  private async groupMetadata(sock: BaileysSocket, jid: string): Promise<GroupMetadata> {
    const cached = this.groupCache.get<GroupMetadata>(jid);
    if (cached) return cached;
    const changes = this.groupChanges;
    const meta = await sock.groupMetadata(jid);
    // A change of some group while the query ran may be this one's: not cached then.
    if (changes === this.groupChanges) this.groupCache.set(jid, meta);
    return meta;
  }

  private forgetGroup(jid: string): void {
    this.groupChanges++;
    this.groupCache.del(jid);
  }

  /** The network echoes our sends as own messages; we relay them like one from the phone. */
  private echoOwnSend(sock: BaileysSocket, full: WAMessage, msg: OutboundMessage): void {
    const media = msg.media;
    const deps: NormaliseDeps = {
      ...this.normaliseDeps(sock),
      isOwnSend: async () => true,
      download: async () => media ?? new Uint8Array(),
    };
    this.events.post(() =>
      this.recordHandedOver('echo of a send', msg.messengerId, async () => {
        const inbound = await normaliseMessage(full, deps);
        if (inbound) await this.ctx.listener.onMessage(inbound);
      }),
    );
  }
}

/** Our own user (phone-number JID and LID). The credentials come first: Baileys writes the LID
 *  into them when the server names it, while `sock.user` may be a copy taken before. */
function ownUser(sock: BaileysSocket, creds: AuthenticationCreds | null): { id?: string; lid?: string } {
  return { id: creds?.me?.id ?? sock.user?.id, lid: creds?.me?.lid ?? sock.user?.lid };
}

/** Our own user's JIDs, normalised. */
function ownJids(sock: BaileysSocket, creds: AuthenticationCreds | null): Set<string> {
  const me = ownUser(sock, creds);
  return new Set([normalised(me.id), normalised(me.lid)].filter((jid): jid is string => jid !== null));
}

function assertMayPostTo(meta: GroupMetadata, me: Set<string>): void {
  if (!meta.announce) return;
  const self = meta.participants.find((p) => [p.id, p.lid, p.phoneNumber].some((j) => j && me.has(normalised(j) ?? '')));
  if (!self?.admin) throw new SendError('announcement_group', 'only admins can send to this announcement group', true);
}

class TimeoutError extends Error {
  override name = 'TimeoutError';
}

function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  return withDeadline(work, ms, () => new TimeoutError(`${what} timed out after ${ms} ms`));
}

/** Error text for logs and send errors: message and status, never payloads or URLs. */
function errorSummary(error: unknown): string {
  const e = error as { message?: string; output?: { statusCode?: number } } | undefined;
  const text = (e?.message ?? String(error)).replace(/[a-z]+:\/\/\S+/gi, '<url>').slice(0, 200);
  return e?.output?.statusCode ? `${text} (${e.output.statusCode})` : text;
}

/** The quieter of the parent logger's level and the wanted one (never more verbose than the parent). */
function quieterLevel(parent: Logger, wanted: string): string {
  const wantedValue = parent.levels.values[wanted] ?? parent.levels.values.warn;
  return parent.levelVal > wantedValue ? parent.level : wanted;
}

function pairingNotReady(detail = 'The network session is not ready for pairing yet; try again.'): Problem {
  return problems.unavailable('pairing_not_ready', detail);
}

function stoppedWhilePairing(): Problem {
  return problems.conflict('not_pairing', 'The session stopped while the pairing code was requested.');
}
