// The sandbox network driver (DESIGN §6): a simulated network that behaves like WhatsApp from the
// session's point of view — pairing by QR or code, sends with receipts, inbound messages,
// presence, dropped connections — driven by control operations instead of a phone.
import { randomBytes } from 'node:crypto';
import type { Knex } from 'knex';
import {
  injectTraceparent,
  NOT_CONNECTED,
  PAIRING_CODE_TTL_MS,
  PAIRING_TIMEOUT,
  SendError,
  problems,
  safeEqual,
  type ConnectionState,
  type DeliveryStatus,
  type DriverContext,
  type DriverFactory,
  type InboundMedia,
  type InboundMessage,
  type MediaStore,
  jsonObject,
  type NetworkDriver,
  type OutboundMessage,
  type PairingCode,
  withParent,
} from '@switchboard/core';
import { readDrop, readInbound, readPair, readPresence, readScan } from './control-bodies.ts';
import { destinationDigits, destinationJid, outcomeFor, receiptsFor } from './outcomes.ts';

export interface SandboxOptions {
  /** Records accepted sends in `sandbox_ledger`, so tests can prove nothing was sent twice. */
  db: Knex;
  /** Delay between sent → delivered → read (→ played). */
  receiptDelayMs: number;
  /** Delay before a session with saved credentials (or a dropped one) is connected again. */
  reconnectDelayMs?: number;
  /** How often a new QR is issued while awaiting a scan. */
  qrRefreshMs?: number;
  /** How long an unpaired session shows QR codes before it stops, `logged_out` with reason
   *  PAIRING_TIMEOUT (undefined or 0: for ever). A pairing-code request starts the time again. */
  pairingTimeoutMs?: number;
  /** How long a pairing code works (default PAIRING_CODE_TTL_MS, as on WhatsApp). */
  pairingCodeTtlMs?: number;
  /** The media store, where the gateway stages large inbound files (core's staged-media.ts). */
  stagedMedia?: MediaStore;
}

const CREDS = { category: 'sandbox', key: 'creds' };
// WhatsApp pairing codes use upper-case letters and digits without look-alikes.
const PAIRING_ALPHABET = 'ABCDEFGHJKLMNPQRSTVWXYZ23456789';

export function sandboxDriverFactory(opts: SandboxOptions): DriverFactory {
  return (ctx) => new SandboxDriver(ctx, opts);
}

export class SandboxDriver implements NetworkDriver {
  private state: ConnectionState = 'stopped';
  private phone: string | null = null;
  private pairing: (PairingCode & { phone: string }) | null = null;
  private qrTimer: NodeJS.Timeout | undefined;
  /** Ends the pairing nobody completed (PAIRING_TIMEOUT_MS). */
  private pairingTimer: NodeJS.Timeout | undefined;
  private readonly timers = new Set<NodeJS.Timeout>();
  /** Listener calls run one after another, in the order the network produced them. */
  private emitting: Promise<void> = Promise.resolve();
  /** Messages that arrived while the listener was busy, to be handed over together (arriveTogether). */
  private arrivals: { handOver(): Promise<void>; notTaken(): void }[] | undefined;
  private closed = false;

  constructor(
    private readonly ctx: DriverContext,
    private readonly opts: SandboxOptions,
  ) {}

  async connect(): Promise<void> {
    this.closed = false;
    await this.emitState('starting');
    const creds = await this.savedCreds();
    if (creds) {
      this.phone = creds.phone;
      this.later(this.opts.reconnectDelayMs ?? 20, async () => {
        // Read before `connected`: a send made once connected owes its own echo and receipts.
        const owed = await this.owedToAccount();
        await this.emitState('connected', { phone: creds.phone });
        this.deliverOwed(owed);
      });
    } else {
      await this.awaitScan();
    }
  }

  async disconnect(): Promise<void> {
    this.closed = true;
    this.stopTimers();
    this.state = 'stopped';
    await this.emitting;
  }

  async logout(): Promise<void> {
    this.stopTimers();
    await this.ctx.auth.clear();
    this.phone = null;
    this.pairing = null;
    if (!this.closed) await this.emitState('logged_out', { reason: 'logged_out' });
    this.closed = true;
  }

  async requestPairingCode(phone: string): Promise<PairingCode> {
    if (this.state === 'connected') throw problems.conflict('already_connected', 'The instance is already connected.');
    if (this.state !== 'awaiting_scan') throw problems.conflict('not_pairing', 'The session is not waiting for a pairing.');
    const bytes = randomBytes(8);
    let code = '';
    for (let i = 0; i < 8; i++) code += PAIRING_ALPHABET[bytes[i] % PAIRING_ALPHABET.length];
    const expiresAt = new Date(Date.now() + (this.opts.pairingCodeTtlMs ?? PAIRING_CODE_TTL_MS));
    this.pairing = { code: `${code.slice(0, 4)}-${code.slice(4)}`, expiresAt, phone };
    this.startPairingTime(); // somebody is pairing now: the code gets the whole time
    return { code: this.pairing.code, expiresAt };
  }

  async send(msg: OutboundMessage): Promise<void> {
    if (this.state !== 'connected') throw new SendError(NOT_CONNECTED, 'The session is not connected.', true);
    const outcome = outcomeFor(msg.to);
    switch (outcome.kind) {
      case 'rejected':
        throw new SendError('rejected', 'The network rejected the message.', true);
      case 'not_on_network':
        throw new SendError('not_on_network', `${destinationDigits(msg.to)} is not on the network.`, true);
      case 'announcement_group':
        if (this.ctx.settings().protectAnnouncementGroups) {
          throw new SendError('announcement_group', 'Only admins can send to this announcement group.', true);
        }
        break;
      case 'connection_drop':
        // The bytes left, then the socket died before the server's ack: the sender cannot know.
        await this.recordInLedger(msg, [], null);
        this.later(0, () => this.dropConnection());
        throw new SendError('connection_lost', 'The connection dropped while sending.', false);
    }
    const receipts = receiptsFor(outcome, msg.type === 'audio' && msg.ptt === true);
    const echo = echoOf(msg);
    await this.recordInLedger(msg, receipts, echo);
    this.scheduleReceipts(msg.messengerId, receipts);
    this.deliverEcho(echo, async () => msg.media ?? noLongerAvailable());
  }

  async sandbox(op: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
    switch (op) {
      case 'scan':
        return this.completePairing(readScan(body).phone);
      case 'pair':
        return this.pairWithCode(readPair(body).code);
      case 'inbound':
        return this.inbound(body);
      case 'presence':
        this.requireConnected();
        await this.arrive(() => this.ctx.listener.onPresence(readPresence(body)));
        return {};
      case 'drop':
        return this.drop(readDrop(body).reason);
      default:
        throw problems.notFound(`Sandbox operation "${op}"`);
    }
  }

  // ---- pairing ----

  private async awaitScan(): Promise<void> {
    await this.emitState('awaiting_scan', { qr: newQr() });
    this.scheduleQrRefresh();
    this.startPairingTime();
  }

  private startPairingTime(): void {
    clearTimeout(this.pairingTimer);
    const timeoutMs = this.opts.pairingTimeoutMs;
    if (!timeoutMs) return;
    this.pairingTimer = setTimeout(() => void this.endUnfinishedPairing(), timeoutMs);
    this.pairingTimer.unref();
  }

  /** Nobody scanned or typed a code in time: no more QR codes until a connect starts a new
   *  session (the worker replaces a logged-out driver), as the WhatsApp driver does. */
  private async endUnfinishedPairing(): Promise<void> {
    if (this.state !== 'awaiting_scan' || this.closed) return;
    this.stopTimers();
    this.pairing = null;
    await this.emitState('logged_out', { reason: PAIRING_TIMEOUT });
    this.closed = true;
  }

  /** Each QR lives 75–125 % of qrRefreshMs: many sessions started together (a server start, a
   *  batch of new instances) do not all write their new code at the same moment. */
  private scheduleQrRefresh(): void {
    const every = this.opts.qrRefreshMs ?? 20_000;
    this.qrTimer = setTimeout(() => {
      if (this.state !== 'awaiting_scan' || this.closed) return;
      void this.emitState('awaiting_scan', { qr: newQr() });
      this.scheduleQrRefresh();
    }, every * (0.75 + Math.random() * 0.5));
    this.qrTimer.unref();
  }

  private requireAwaitingScan(): void {
    if (this.state !== 'awaiting_scan') throw problems.conflict('not_awaiting_scan', `The instance is ${this.state}, not awaiting a scan.`);
  }

  private async pairWithCode(code: string): Promise<Record<string, unknown>> {
    this.requireAwaitingScan();
    if (!this.pairing) throw problems.conflict('no_pairing_code', 'No pairing code was issued.');
    // As on a phone, the dash shown in the code is optional and case does not matter.
    const typed = (c: string) => c.toUpperCase().replace(/[^A-Z0-9]/g, '');
    if (!safeEqual(typed(code), typed(this.pairing.code))) throw problems.badRequest('invalid_pairing_code', 'The code is not the last issued pairing code.');
    if (Date.now() >= this.pairing.expiresAt.getTime()) throw problems.conflict('pairing_code_expired', 'The pairing code expired; request a new one.');
    return this.completePairing(this.pairing.phone);
  }

  private async completePairing(phone: string): Promise<Record<string, unknown>> {
    // Checked and claimed in one turn of the event loop: of concurrent scans or codes one pairs,
    // the others are 409, however long saving the credentials takes.
    this.requireAwaitingScan();
    this.state = 'starting';
    clearTimeout(this.qrTimer);
    clearTimeout(this.pairingTimer);
    this.pairing = null;
    try {
      // A new link of the account: what the network owed an earlier one (before a reset or a
      // logout) is not delivered to it.
      await this.owedRows().update({ receipts_owed: '{}', echo_owed: null });
      await this.ctx.auth.set({ [CREDS.category]: { [CREDS.key]: { phone } } });
    } catch (err) {
      if (!this.closed) await this.awaitScan(); // a new QR: the phone may scan again
      throw err;
    }
    this.phone = phone;
    await this.emitState('connected', { phone });
    return { state: 'connected', phone };
  }

  private async savedCreds(): Promise<{ phone: string } | null> {
    const found = await this.ctx.auth.get(CREDS.category, [CREDS.key]);
    const creds = found[CREDS.key] as { phone?: unknown } | undefined;
    return creds && typeof creds.phone === 'string' ? { phone: creds.phone } : null;
  }

  // ---- connection ----

  private async drop(reason: 'connection_lost' | 'logged_out'): Promise<Record<string, unknown>> {
    this.requireConnected();
    if (reason === 'logged_out') {
      this.state = 'logged_out'; // claimed before the first await: a concurrent drop is 409
      this.stopTimers();
      await this.ctx.auth.clear();
      this.phone = null;
      await this.emitState('logged_out', { reason: 'logged_out' });
    } else {
      await this.dropConnection();
    }
    return { state: this.state };
  }

  private async dropConnection(): Promise<void> {
    if (this.state !== 'connected') return;
    const phone = this.phone;
    await this.emitState('reconnecting', { phone, reason: 'connection_lost' });
    this.later(this.opts.reconnectDelayMs ?? 20, () => (this.state === 'reconnecting' ? this.emitState('connected', { phone }) : undefined));
  }

  private requireConnected(): void {
    if (this.state !== 'connected') throw problems.conflict('not_connected', `The instance is ${this.state}, not connected.`);
  }

  // ---- messages ----

  private async inbound(body: Record<string, unknown>): Promise<Record<string, unknown>> {
    const { message, stagedMediaId } = readInbound(body, this.opts.stagedMedia);
    this.requireConnected();
    await this.arriveTogether(() => this.ctx.listener.onMessage(message));
    // Recorded, the file with it: the staged copy has served (a failure leaves it to retention).
    if (stagedMediaId !== undefined) await this.opts.stagedMedia!.delete(stagedMediaId).catch(() => undefined);
    return { messageId: message.messageId };
  }

  /** The network's record of a message it accepted, with what it still owes the account. */
  private async recordInLedger(msg: OutboundMessage, receipts: DeliveryStatus[], echo: OwedEcho | null): Promise<void> {
    await this.opts.db('sandbox_ledger').insert({
      instance_id: this.ctx.instanceId,
      messenger_id: msg.messengerId,
      phone: destinationJid(msg.to),
      receipts_owed: receipts,
      echo_owed: echo ? JSON.stringify(echo) : null,
    });
  }

  private ledgerRow(messengerId: string) {
    return this.opts.db('sandbox_ledger').where({ instance_id: this.ctx.instanceId, messenger_id: messengerId });
  }

  /** Receipts come `receiptDelayMs` apart, the first at once: `sent` is the server's ack of the
   *  send itself, so `delivered` follows the send by one delay, not two. Each receipt is crossed
   *  off the ledger once the session has taken it; one the session never took (it stopped
   *  first) is delivered again when the account reconnects. */
  private scheduleReceipts(messengerId: string, receipts: DeliveryStatus[], delayMs = 0): void {
    const [status, ...rest] = receipts;
    if (!status) return;
    // Each receipt's timer is set once the one before it was queued: timers set together for 0,
    // 20 and 40 ms can fire out of order after a busy moment of the event loop (Node runs the
    // lists of each duration in turn), and a `read` before its `delivered` left a gap.
    this.later(delayMs, () => {
      const taken = this.emit(async () => {
        await this.ctx.listener.onReceipt({ messengerId, status });
        await this.ledgerRow(messengerId).update({ receipts_owed: this.opts.db.raw('array_remove(receipts_owed, ?)', [status]) });
      });
      this.scheduleReceipts(messengerId, rest, this.opts.receiptDelayMs);
      return taken;
    });
  }

  /** What the network still owes this account (the session was not there to take it): echoes
   *  and receipts, in the order of the sends. */
  private async owedToAccount(): Promise<OwedItem[]> {
    return this.owedRows().orderBy('seq').select('messenger_id', 'receipts_owed', 'echo_owed');
  }

  private owedRows() {
    const predicate = `(receipts_owed <> '{}' or echo_owed is not null)`; // the partial index's (migration 012)
    return this.opts.db('sandbox_ledger').where({ instance_id: this.ctx.instanceId }).whereRaw(predicate);
  }

  private deliverOwed(owed: OwedItem[]): void {
    for (const row of owed) {
      if (row.echo_owed) this.deliverEcho(jsonObject(row.echo_owed) as unknown as OwedEcho, noLongerAvailable);
      this.scheduleReceipts(row.messenger_id, row.receipts_owed);
    }
  }

  /** The real network echoes our own sends back to the account as its own messages; the echo is
   *  crossed off the ledger once the session has taken it. */
  private deliverEcho(echo: OwedEcho, download: () => Promise<Uint8Array>): void {
    this.emit(async () => {
      await this.ctx.listener.onMessage({ ...echo, media: echo.media ? { ...echo.media, download } : undefined });
      await this.ledgerRow(echo.messageId).update({ echo_owed: null });
    }).catch(() => undefined); // not taken: it stays owed, and comes with the next connection
  }

  // ---- plumbing ----

  private emitState(state: ConnectionState, info: { qr?: string | null; phone?: string | null; reason?: string | null } = {}): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.state = state;
    return this.emit(() => this.ctx.listener.onState(state, info));
  }

  /** An arrival a sandbox request waits for. A session that closed while the arrival waited its
   *  turn never takes it: that is a refusal to retry, not a 200 for a message nobody recorded. */
  private async arrive(call: () => Promise<void>): Promise<void> {
    let taken = false;
    await this.emit(async () => {
      taken = true;
      await call();
    });
    if (!taken) throw notTaken();
  }

  /**
   * Like arrive, for messages: those that arrive while the listener is busy are handed over together
   * as the next listener call, each without waiting for the one before it to be recorded (the
   * session keeps their order and writes them in one statement), as the network delivers a burst
   * of messages at once. Each is handed over in its own request's trace.
   */
  private arriveTogether(call: () => Promise<void>): Promise<void> {
    const traceparent = injectTraceparent();
    return new Promise<void>((resolve, reject) => {
      const arrival = { handOver: () => withParent(traceparent, call).then(resolve, reject), notTaken: () => reject(notTaken()) };
      if (this.arrivals) return void this.arrivals.push(arrival);
      const group = (this.arrivals = [arrival]);
      let taken = false;
      void this.emit(async () => {
        taken = true;
        this.arrivals = undefined;
        await Promise.all(group.map((a) => a.handOver()));
      }).finally(() => {
        if (taken) return;
        if (this.arrivals === group) this.arrivals = undefined;
        for (const a of group) a.notTaken();
      });
    });
  }

  /** Queues a listener call behind the previous ones; resolves when it ran. Errors do not break the chain. */
  private emit(call: () => Promise<void>): Promise<void> {
    const run = this.emitting.then(() => (this.closed ? undefined : call()));
    this.emitting = run.catch(() => undefined);
    return run;
  }

  private later(ms: number, fn: () => Promise<void> | void): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (!this.closed) void Promise.resolve(fn()).catch(() => undefined);
    }, ms);
    this.timers.add(timer);
  }

  private stopTimers(): void {
    clearTimeout(this.qrTimer);
    clearTimeout(this.pairingTimer);
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
  }
}

interface OwedItem {
  messenger_id: string;
  receipts_owed: DeliveryStatus[];
  echo_owed: unknown;
}

/** An echo as the ledger keeps it: the message without its bytes. */
type OwedEcho = Omit<InboundMessage, 'media'> & { media?: Omit<InboundMedia, 'download'> };

function echoOf(msg: OutboundMessage): OwedEcho {
  return {
    messageId: msg.messengerId,
    from: destinationJid(msg.to),
    phone: msg.to.kind === 'phone' ? msg.to.phone : null,
    chatLid: msg.to.kind === 'lid' ? `${msg.to.lid}@lid` : null,
    participant: null,
    fromMe: true,
    name: null,
    type: msg.type,
    text: msg.type === 'text' ? (msg.text ?? null) : msg.type === 'sticker' ? null : (msg.caption ?? null),
    isGroup: msg.to.kind === 'group',
    media: msg.media ? { mimetype: msg.mimetype ?? 'application/octet-stream', fileName: msg.fileName, voiceNote: msg.ptt === true, seconds: msg.seconds } : undefined,
  };
}

/** The download of an echo's medium the session did not take before it stopped: the sandbox
 *  keeps no bytes, as the real network keeps media only for a while. */
async function noLongerAvailable(): Promise<never> {
  throw new Error('the sandbox network no longer has this file: the session stopped before taking the echo');
}

function newQr(): string {
  // Shaped like a WhatsApp QR payload: ref,publicKey,identityKey,advSecret.
  return ['2@' + randomBytes(24).toString('base64'), randomBytes(32).toString('base64'), randomBytes(32).toString('base64'), randomBytes(16).toString('base64')].join(',');
}

function notTaken() {
  return problems.conflict('not_connected', 'The session closed before it took this; send it again once the instance is connected.');
}
