// A stand-in for Baileys' socket, for tests: no WhatsApp server is reachable from test machines.
// It behaves like makeWASocket as far as the driver can observe: Baileys' own event buffer as `ev`
// (including buffering until offline notifications are handled), the same event order on
// connect/pair/close, the same Boom errors and status codes, credentials mutated through
// `creds.update`, media uploaded as encrypted files. The test drives the "server side" through
// StandInNetwork (show a QR, complete a scan, open, drop with a code, deliver events).
import { readFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { Boom } from '@hapi/boom';
import {
  bytesToCrockford,
  DisconnectReason,
  isJidGroup,
  jidEncode,
  jidNormalizedUser,
  makeEventBuffer,
  type BaileysEventMap,
  type GroupMetadata,
  type MediaConnInfo,
  type MessageRelayOptions,
  type UserFacingSocketConfig,
  type WAMediaUploadFunction,
  type WAMessage,
  type WAMessageKey,
  proto,
} from '@whiskeysockets/baileys';
import type { Logger } from '@switchboard/core';
import type { BaileysSocket, SocketFactory } from './socket.ts';

export interface RelayedMessage {
  jid: string;
  message: proto.IMessage;
  messageId: string | undefined;
}

/** How the next relayMessage calls behave: answered; never answered; the connection drops while
 *  the stanza is being written (it may have left); or it drops while a device query waits, before
 *  anything is written (Baileys rejects the query with the WebSocket's close code, a number). */
export type RelayBehaviour = 'accept' | 'hang' | 'close' | 'close-before-write';

/** The simulated server side, shared by all sockets one driver creates over its life. */
export class StandInNetwork {
  readonly sockets: StandInSocket[] = [];
  readonly relayed: RelayedMessage[] = [];
  readonly uploads = new Map<string, Buffer>();
  readonly reads: WAMessageKey[] = [];
  readonly rejectedCalls: { id: string; from: string }[] = [];
  readonly pairingRequests: string[] = [];
  readonly logouts: string[] = [];
  readonly presenceSubscriptions: string[] = [];
  /** Every group members query, and the error code the server answers them with (none: success). */
  readonly groupQueries: string[] = [];
  groupQueryError: number | null = null;
  /** How long the server takes to answer a group members query. */
  groupQueryDelayMs = 0;
  /** Group sends, and whether relayMessage found the members in the driver's cache. */
  readonly groupRelays: Array<{ jid: string; cached: boolean }> = [];
  reuploads = 0;
  relayBehaviour: RelayBehaviour = 'accept';
  uploadFails = false;
  /** How the server answers the next media-hosts queries (Baileys' refreshMediaConn), in order,
   *  then `ok`: with an error node; the connection drops while it waits; the hosts, 300 ms late. */
  mediaHostsAnswers: Array<'ok' | 'error' | 'close' | 'slow'> = [];
  /** How long an answer to a media-hosts query stays valid (WhatsApp's `ttl`). */
  mediaHostsTtlSeconds = 300;
  /** Media-hosts queries asked, over all sockets. */
  mediaHostsQueries = 0;
  /** The connection drops while the next pairing-code request waits for the server. */
  pairingRequestCloses = false;
  /** Calls the driver made on a socket already closed (Baileys refuses them with 428). */
  callsAfterClose = 0;
  /** Phone digits that have no WhatsApp account. */
  readonly notOnNetwork = new Set<string>();
  readonly groups = new Map<string, GroupMetadata>();
  /** Media base URL handed out by uploads (the test may serve it over HTTP). */
  mediaBaseUrl = 'http://127.0.0.1:9/media';
  /** What the sender's phone answers to a re-upload request; default: the media is gone. */
  reupload: (message: WAMessage) => Promise<WAMessage> = async () => {
    throw new Boom('Media re-upload failed by device (NOT_FOUND)', { statusCode: 404 });
  };

  /**
   * `auto`: the server answers on its own like WhatsApp does — a socket without credentials gets a
   * QR, one with credentials is logged in, and accepted sends get server-ack, delivery and read
   * receipts `receiptDelayMs` apart. Without it the test performs each step itself.
   */
  constructor(
    private readonly log: Logger,
    readonly opts: { auto?: boolean; receiptDelayMs?: number } = {},
  ) {}

  readonly factory: SocketFactory = (config) => {
    const sock = new StandInSocket(this, config, this.log);
    this.sockets.push(sock);
    return sock;
  };

  /** The most recently created socket. */
  get current(): StandInSocket {
    const sock = this.sockets[this.sockets.length - 1];
    if (!sock) throw new Error('no socket was created');
    return sock;
  }
}

export class StandInSocket implements BaileysSocket {
  readonly ev;
  readonly config: UserFacingSocketConfig;
  private closed = false;
  private buffering = false;
  /** Like Baileys' `mediaConn`: the socket's last media-hosts query, a failed one included. */
  private mediaConn: Promise<MediaConnInfo> | undefined;

  constructor(
    private readonly network: StandInNetwork,
    config: UserFacingSocketConfig,
    log: Logger,
  ) {
    this.config = config;
    this.ev = makeEventBuffer(log as never);
    // Like makeWASocket: credentials are mutated in place by every creds.update.
    this.ev.on('creds.update', (update) => Object.assign(config.auth.creds, update));
    process.nextTick(() => {
      if (this.closed) return;
      if (config.auth.creds.me?.id) {
        this.ev.buffer(); // a logged-in socket buffers until offline notifications are handled
        this.buffering = true;
      }
      this.ev.emit('connection.update', { connection: 'connecting', receivedPendingNotifications: false, qr: undefined });
      if (network.opts.auto) setImmediate(() => !this.closed && (config.auth.creds.me?.id ? this.open() : this.showQr()));
    });
  }

  get user() {
    return this.config.auth.creds.me;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  // ── server side, driven by tests ───────────────────────────────────────────

  /** The server handed out a pairing ref: a QR is shown. */
  showQr(qr = `2@${randomBytes(24).toString('base64')},${randomBytes(8).toString('hex')}`): string {
    this.ev.emit('connection.update', { qr });
    return qr;
  }

  /** The phone scanned the QR (or typed the code): pair-success, then the server asks for a restart (515). */
  completePairing(phone: string, lid = `${phone.slice(-6)}0042`): void {
    const me = { id: jidEncode(phone, 's.whatsapp.net', 12), name: 'Switchboard Test', lid: jidEncode(lid, 'lid', 12) };
    // Like configureSuccessfulPairing: a completed pairing always brings the signed device identity.
    const account = { details: randomBytes(40), accountSignatureKey: randomBytes(32), accountSignature: randomBytes(64), deviceSignature: randomBytes(64) };
    this.ev.emit('creds.update', { me, account, platform: 'android', signalIdentities: [] });
    this.ev.emit('connection.update', { isNewLogin: true, qr: undefined });
    void this.end(new Boom('Stream Errored (restart required)', { statusCode: DisconnectReason.restartRequired }));
  }

  /** Login succeeded (CB:success) and the offline notifications were handled. */
  open(): void {
    const me = this.config.auth.creds.me;
    this.ev.emit('creds.update', { me: { ...me!, lid: me?.lid } });
    this.ev.emit('connection.update', { connection: 'open' });
    if (this.buffering) {
      this.ev.flush();
      this.buffering = false;
    }
    this.ev.emit('connection.update', { receivedPendingNotifications: true });
  }

  /** Every QR of this pairing session went unscanned: Baileys ends the socket with 408. */
  qrRefsEnded(): Promise<void> {
    return this.end(new Boom('QR refs attempts ended', { statusCode: DisconnectReason.timedOut }));
  }

  /** The WebSocket could not reach the server (no DNS/route), as Baileys' mapWebSocketError reports it. */
  unreachable(errno = 'ENOTFOUND'): Promise<void> {
    const error = Object.assign(new Error(`getaddrinfo ${errno} web.whatsapp.com`), { code: errno, syscall: 'getaddrinfo' });
    return this.end(new Boom(`WebSocket Error (${error.message})`, { statusCode: DisconnectReason.timedOut, data: error }));
  }

  /** The connection closes with a DisconnectReason code. */
  drop(statusCode: number, message = 'Connection Failure'): Promise<void> {
    return this.end(new Boom(message, { statusCode }));
  }

  emit<E extends keyof BaileysEventMap>(event: E, data: BaileysEventMap[E]): void {
    this.ev.emit(event, data);
  }

  // ── the socket API the driver uses ─────────────────────────────────────────

  async requestPairingCode(phoneNumber: string): Promise<string> {
    this.assertOpen();
    if (this.network.pairingRequestCloses) return this.closeUnderQuery();
    const code = bytesToCrockford(randomBytes(5));
    this.config.auth.creds.pairingCode = code;
    this.config.auth.creds.me = { id: jidEncode(phoneNumber, 's.whatsapp.net'), name: '~' };
    this.ev.emit('creds.update', this.config.auth.creds);
    this.network.pairingRequests.push(phoneNumber);
    return code;
  }

  async presenceSubscribe(toJid: string): Promise<void> {
    this.assertOpen();
    this.network.presenceSubscriptions.push(toJid);
  }

  async logout(msg?: string): Promise<void> {
    const jid = this.config.auth.creds.me?.id;
    if (jid) {
      this.assertOpen();
      this.network.logouts.push(jid);
    }
    void this.end(new Boom(msg || 'Intentional Logout', { statusCode: DisconnectReason.loggedOut }));
  }

  async end(error: Error | undefined): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.ev.emit('connection.update', { connection: 'close', lastDisconnect: { error, date: new Date() } });
    this.ev.removeAllListeners('connection.update');
    this.ev.destroy();
  }

  async relayMessage(jid: string, message: proto.IMessage, opts: MessageRelayOptions): Promise<string> {
    this.assertOpen();
    if (!this.config.auth.creds.me?.id) throw new Boom('Not authenticated', { statusCode: 401 });
    const behaviour = this.network.relayBehaviour;
    if (behaviour === 'hang') return new Promise<string>(() => {});
    if (isJidGroup(jid)) {
      // Like relayMessage: the members come from cachedGroupMetadata, else from a query that the
      // server refuses (before anything is sent) for a group we are not in.
      this.network.groupRelays.push({ jid, cached: !!(await this.config.cachedGroupMetadata?.(jid)) });
      if (!this.network.groupRelays.at(-1)!.cached) await this.groupMetadata(jid);
    }
    if (behaviour === 'close-before-write') return this.closeUnderQuery();
    this.network.relayed.push({ jid, message, messageId: opts.messageId });
    if (behaviour === 'close') {
      // The write failed part-way (the ws library's send callback): whether the server got the
      // stanza is unknown. Baileys passes that error on as it is, without a status code.
      void this.drop(DisconnectReason.connectionLost, 'Connection was lost');
      throw new Error('write ECONNRESET');
    }
    if (this.network.opts.auto && opts.messageId) this.acknowledge(jid, opts.messageId);
    return opts.messageId ?? '';
  }

  /**
   * The receipts of a sent message as Baileys emits them: our phone's "sender" receipt (it got its
   * copy), then a recipient's delivery and read receipts. In a private chat they are
   * `messages.update` statuses; in a group, `message-receipt.update` per participant, where
   * Baileys reports the sender receipt, a read and a played alike as a `readTimestamp`.
   */
  private acknowledge(jid: string, id: string): void {
    const delay = this.network.opts.receiptDelayMs ?? 5;
    const key = { remoteJid: jid, fromMe: true, id };
    const { SERVER_ACK, DELIVERY_ACK, READ } = proto.WebMessageInfo.Status;
    const member = '5511955554444@s.whatsapp.net';
    const me = jidNormalizedUser(this.user?.id);
    // Like handleReceipt: the key names the participant whose receipt it is.
    const receipt = (userJid: string, stamp: 'readTimestamp' | 'receiptTimestamp') => () =>
      this.ev.emit('message-receipt.update', [{ key: { ...key, participant: userJid }, receipt: { userJid, [stamp]: unixNow() } }]);
    const emits: (() => void)[] = isJidGroup(jid)
      ? [receipt(me, 'readTimestamp'), receipt(member, 'receiptTimestamp'), receipt(member, 'readTimestamp')]
      : [SERVER_ACK, DELIVERY_ACK, READ].map((status) => () => this.ev.emit('messages.update', [{ key, update: { status } }]));
    emits.forEach((emit, i) =>
      setTimeout(() => {
        if (!this.closed) emit();
      }, delay * (i + 1)),
    );
  }

  readonly waUploadToServer: WAMediaUploadFunction = async (encFilePath, { mediaType }) => {
    // Like getWAUploadToServer: the media hosts come from the socket first.
    await this.refreshMediaConn(false);
    if (this.network.uploadFails) throw new Boom('Media upload failed on all hosts', { statusCode: 500 });
    const id = randomBytes(8).toString('hex');
    this.network.uploads.set(id, await readFile(encFilePath));
    return { mediaUrl: `${this.network.mediaBaseUrl}/${mediaType}/${id}`, directPath: `/media/${mediaType}/${id}` };
  };

  /** Like Baileys' refreshMediaConn: it awaits the last query first, so a failed one is thrown
   *  again by every later call, until the socket ends. */
  async refreshMediaConn(forceGet = false): Promise<MediaConnInfo> {
    const media = await this.mediaConn;
    if (!media || forceGet || Date.now() - media.fetchDate.getTime() > media.ttl * 1000) this.mediaConn = this.queryMediaHosts();
    return this.mediaConn!;
  }

  private async queryMediaHosts(): Promise<MediaConnInfo> {
    this.assertOpen();
    this.network.mediaHostsQueries++;
    const answer = this.network.mediaHostsAnswers.shift() ?? 'ok';
    if (answer === 'close') return this.closeUnderQuery();
    if (answer === 'slow') await new Promise((resolve) => setTimeout(resolve, 300));
    // Like Baileys' query: the server's error node becomes a Boom carrying its code as `data`.
    if (answer === 'error') throw new Boom('internal-server-error', { data: 500 });
    const ttl = this.network.mediaHostsTtlSeconds;
    return { hosts: [{ hostname: 'mmg.whatsapp.net', maxContentLengthBytes: 104_857_600 }], auth: randomBytes(8).toString('hex'), ttl, fetchDate: new Date() };
  }

  async updateMediaMessage(message: WAMessage): Promise<WAMessage> {
    this.assertOpen();
    // Like Baileys' assertMediaContent: only these kinds are media to it (a ptvMessage is not).
    const content = message.message;
    if (!(content?.documentMessage || content?.imageMessage || content?.videoMessage || content?.audioMessage || content?.stickerMessage)) {
      throw new Boom('given message is not a media message', { statusCode: 400 });
    }
    this.network.reuploads++;
    return this.network.reupload(message);
  }

  async onWhatsApp(...phoneNumbers: string[]): Promise<{ jid: string; exists: boolean }[]> {
    this.assertOpen();
    // Like the real usync query: numbers without an account are simply absent from the list.
    return phoneNumbers
      .map((p) => p.replace(/\D/g, ''))
      .filter((digits) => !this.network.notOnNetwork.has(digits))
      .map((digits) => ({ jid: `${digits}@s.whatsapp.net`, exists: true }));
  }

  async groupMetadata(jid: string): Promise<GroupMetadata> {
    this.assertOpen();
    this.network.groupQueries.push(jid);
    if (this.network.groupQueryDelayMs) await new Promise((resolve) => setTimeout(resolve, this.network.groupQueryDelayMs));
    if (this.network.groupQueryError) throw new Boom('rate-overlimit', { data: this.network.groupQueryError });
    const meta = this.network.groups.get(jid);
    // Like Baileys' query: the server's error node becomes a Boom carrying its code as `data`.
    if (!meta) throw new Boom('item-not-found', { data: 404 });
    return meta;
  }

  async readMessages(keys: WAMessageKey[]): Promise<void> {
    this.assertOpen();
    this.network.reads.push(...keys);
  }

  async rejectCall(callId: string, callFrom: string): Promise<void> {
    this.assertOpen();
    this.network.rejectedCalls.push({ id: callId, from: callFrom });
  }

  private assertOpen(): void {
    if (!this.closed) return;
    this.network.callsAfterClose++;
    throw new Boom('Connection Closed', { statusCode: DisconnectReason.connectionClosed });
  }

  /** The connection drops while a query waits for its answer: Baileys' waitForMessage rejects
   *  with what the WebSocket's 'close' event passes, its close code. */
  private closeUnderQuery(): Promise<never> {
    void this.drop(DisconnectReason.connectionLost, 'Connection was lost');
    return Promise.reject(1006); // what Baileys rejects with, not an Error
  }
}

function unixNow(): number {
  return Math.floor(Date.now() / 1000);
}
