// The Baileys driver driven through the stand-in socket: connection flow and every close code,
// sends of every type (with the reserved id, to every destination form) and their failure modes,
// receipts, received messages built as Baileys 7 delivers them (LID addressing, wrappers, media),
// presence, calls and settings.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { readFile, unlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { Boom } from '@hapi/boom';
import {
  DisconnectReason,
  downloadContentFromMessage,
  encryptedStream,
  proto,
  type GroupMetadata,
  type WAMessage,
  type WAVersion,
} from '@whiskeysockets/baileys';
import {
  createLogger,
  defaultSettings,
  migrate,
  NOT_CONNECTED,
  openDatabase,
  Problem,
  SendError,
  type Db,
  type DriverContext,
  type InboundMessage,
  type InstanceSettings,
  type NetworkDriver,
  type OutboundMessage,
  type PresenceUpdate,
} from '@switchboard/core';
import { createTestDatabase } from '../../../test/support/services.ts';
import { createBaileysDriver, type BaileysDriverOptions } from '../src/drivers/baileys/index.ts';
import { driverFactoryFor } from '../src/drivers.ts';
import { isWhatsAppMediaUrl } from '../src/drivers/baileys/media-download.ts';
import { backoffDelay, closeAction } from '../src/drivers/baileys/close-policy.ts';
import { StandInNetwork, type StandInSocket } from '../src/drivers/baileys/stand-in-socket.ts';
import { webVersionSource } from '../src/drivers/baileys/web-version.ts';
import { MemoryAuthStore, RecordingListener, until } from './driver-contract.ts';
import { isAnimatedWebp } from '../src/drivers/baileys/outbound.ts';
import { mediaFixtures } from '../../../test/fixtures/media/index.ts';

const log = createLogger({ level: 'silent' });
const INSTANCE = 'inst-baileys';
const MY_PHONE = '5511900000001';
const MY_LID = '90000000000001';
let db: Db;
let drop: () => Promise<void>;

before(async () => {
  const created = await createTestDatabase();
  drop = created.drop;
  db = openDatabase({ databaseUrl: created.url, dataDir: '/nonexistent' });
  await migrate(db);
  await db('instances').insert({ id: INSTANCE, name: 'test', token_hash: 'h'.repeat(64), token_sealed: 'x' });
});
after(async () => {
  await db?.destroy();
  await drop?.();
});

class Listener extends RecordingListener {
  presences: PresenceUpdate[] = [];
  calls: { id: string; from: string }[] = [];
  constructor() {
    super();
    // The shared recorder ignores presence; this one keeps it.
    this.onPresence = async (update?: PresenceUpdate) => void this.presences.push(update!);
  }
  async onCall(call: { id: string; from: string }): Promise<void> {
    this.calls.push(call);
  }
}

interface Rig {
  network: StandInNetwork;
  auth: MemoryAuthStore;
  listener: Listener;
  driver: NetworkDriver;
  settings: InstanceSettings;
  ownSends: Set<string>;
  sock(): StandInSocket;
}

const rigs: Rig[] = [];
afterEach(async () => {
  for (const rig of rigs.splice(0)) await rig.driver.disconnect();
});

function rig(opts: Partial<BaileysDriverOptions> = {}, ctx: Pick<DriverContext, 'stillOwner'> = {}): Rig {
  const network = new StandInNetwork(log);
  const auth = new MemoryAuthStore();
  const listener = new Listener();
  const settings = defaultSettings();
  const ownSends = new Set<string>();
  const driver = createBaileysDriver({
    db,
    log,
    socketFactory: network.factory,
    backoff: { baseMs: 5, maxMs: 40, jitter: 0.2 },
    mediaUrlAllowed: (url) => url.hostname === '127.0.0.1', // the tests' stand-in media server
    ...opts,
  })({ instanceId: INSTANCE, auth, listener, isOwnSend: async (id) => ownSends.has(id), settings: () => settings, ...ctx });
  const r = { network, auth, listener, driver, settings, ownSends, sock: () => network.current };
  rigs.push(r);
  return r;
}

/** Connect → QR → pairing (515 restart) → login. */
async function connectedRig(opts: Partial<BaileysDriverOptions> = {}, ctx: Pick<DriverContext, 'stillOwner'> = {}): Promise<Rig> {
  const r = rig(opts, ctx);
  await r.driver.connect();
  await until(() => r.network.sockets.length === 1, 'first socket');
  r.sock().showQr();
  await until(() => r.listener.state === 'awaiting_scan', 'awaiting_scan');
  r.sock().completePairing(MY_PHONE, MY_LID);
  await until(() => r.network.sockets.length === 2, 'restart after pairing');
  r.sock().open();
  await until(() => r.listener.state === 'connected', 'connected');
  return r;
}

function received(fields: {
  chat: string;
  chatAlt?: string;
  participant?: string;
  participantAlt?: string;
  fromMe?: boolean;
  id?: string;
  pushName?: string;
  message: Record<string, unknown>;
}): WAMessage {
  return {
    key: {
      remoteJid: fields.chat,
      remoteJidAlt: fields.chatAlt,
      participant: fields.participant,
      participantAlt: fields.participantAlt,
      fromMe: !!fields.fromMe,
      id: fields.id ?? `3A${randomBytes(9).toString('hex').toUpperCase()}`,
    },
    message: proto.Message.fromObject(fields.message),
    pushName: fields.pushName,
    messageTimestamp: Math.floor(Date.now() / 1000),
  };
}

async function deliver(r: Rig, msg: WAMessage, type: 'notify' | 'append' = 'notify'): Promise<InboundMessage | undefined> {
  const before = r.listener.messages.length;
  r.sock().emit('messages.upsert', { messages: [msg], type });
  await until(async () => r.listener.messages.length > before || (await settled()), 'message handled');
  return r.listener.messages.slice(before).find((m) => m.messageId === msg.key.id);
}

/** Lets queued events run (for checks that something did NOT happen). */
async function settled(ms = 30): Promise<true> {
  await new Promise((resolve) => setTimeout(resolve, ms));
  return true;
}

function text(messengerId: string, to: OutboundMessage['to'], body = 'hello'): OutboundMessage {
  return { messengerId, to, type: 'text', text: body };
}

function mid(): string {
  return `3EB0${randomBytes(9).toString('hex').toUpperCase()}`;
}

async function rejectsWith(p: Promise<unknown>, code: string, definite: boolean): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof SendError, `SendError expected, got ${String(err)}`);
    assert.equal(err.code, code);
    assert.equal(err.definite, definite);
    return true;
  });
}

describe('baileys driver: connection', () => {
  it('starts, then reports awaiting_scan with each raw QR', async () => {
    const r = rig();
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    const first = r.sock().showQr();
    const second = r.sock().showQr();
    await until(() => r.listener.states.filter((s) => s.state === 'awaiting_scan').length === 2, 'two QRs');
    assert.deepEqual(
      r.listener.states.map((s) => [s.state, s.qr ?? null]),
      [
        ['starting', null],
        ['awaiting_scan', first],
        ['awaiting_scan', second],
      ],
    );
  });

  it('a connect that cannot read the credentials fails, and a later connect tries again', async () => {
    const r = rig();
    const get = r.auth.get.bind(r.auth);
    r.auth.get = async () => {
      throw new Error('database unavailable');
    };
    await assert.rejects(r.driver.connect(), /database unavailable/);
    assert.equal(r.network.sockets.length, 0);
    r.auth.get = get;
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket on the second connect');
  });

  it('configures the socket: not online on connect, bounded history, getMessage from our records', async () => {
    const r = rig();
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    const config = r.sock().config;
    assert.equal(config.markOnlineOnConnect, false);
    assert.equal(config.syncFullHistory, false);
    const T = proto.HistorySync.HistorySyncType;
    assert.equal(config.shouldSyncHistoryMessage!({ syncType: T.INITIAL_BOOTSTRAP }), true);
    assert.equal(config.shouldSyncHistoryMessage!({ syncType: T.NON_BLOCKING_DATA }), true);
    assert.equal(config.shouldSyncHistoryMessage!({ syncType: T.FULL }), false);
    assert.equal(config.shouldSyncHistoryMessage!({ syncType: T.RECENT }), false);

    // Signal keys: written through to our AuthStore, read through Baileys' cache on top of it.
    const keys = config.auth.keys;
    await keys.set({ session: { '5511912345678.0': Buffer.from('session-bytes') } });
    assert.ok(r.auth.data.has('session/5511912345678.0'), 'written to the AuthStore');
    await r.auth.set({ session: { '5511912345678.0': null } });
    const cached = await keys.get('session', ['5511912345678.0']);
    assert.deepEqual(Buffer.from(cached['5511912345678.0']!), Buffer.from('session-bytes'), 'served by makeCacheableSignalKeyStore');

    const messengerId = mid();
    await db('send_items').insert({
      id: `snd_${randomBytes(6).toString('hex')}`,
      instance_id: INSTANCE,
      messenger_id: messengerId,
      phone: '5511912345678',
      type: 'text',
      payload: { text: 'stored text' },
      status: 'sent',
      expires_at: new Date(Date.now() + 60_000),
    });
    const got = await config.getMessage!({ remoteJid: '5511912345678@s.whatsapp.net', fromMe: true, id: messengerId });
    assert.equal(got?.extendedTextMessage?.text, 'stored text');
    assert.equal(await config.getMessage!({ remoteJid: 'x@s.whatsapp.net', fromMe: true, id: mid() }), undefined);
  });

  it('requests a pairing code only once the socket is ready, formatted for the phone', async () => {
    const r = rig();
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    const pending = r.driver.requestPairingCode('5511988887777');
    await settled();
    assert.deepEqual(r.network.pairingRequests, [], 'not asked before the socket is ready');
    r.sock().showQr();
    const { code } = await pending;
    assert.match(code, /^[A-Z0-9]{4}-[A-Z0-9]{4}$/);
    assert.deepEqual(r.network.pairingRequests, ['5511988887777']);
  });

  it("asks a pairing code on a fresh socket when the current one's refs are running out, and says when the code dies", async () => {
    const r = rig({ qrRefsBudgetMs: 600, pairingWindowMs: 400 });
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    r.sock().showQr();
    const first = await r.driver.requestPairingCode('5511988887777');
    const fresh = Date.now();
    assert.ok(first.expiresAt.getTime() <= fresh + 600, 'no later than the socket ends');
    assert.equal(r.network.sockets.length, 1, 'enough time left: the same socket');

    await settled(300); // 300 ms left of 600: less than the 400 a code is given
    const pending = r.driver.requestPairingCode('5511988887777');
    await until(() => r.network.sockets.length === 2, 'a fresh socket');
    assert.equal(r.network.sockets[0].isClosed, true, 'the old one is closed');
    r.sock().showQr();
    const second = await pending;
    assert.equal(r.network.pairingRequests.length, 2);
    assert.equal(r.sock().config.auth.creds.pairingCode?.length, 8, 'asked on the fresh socket');
    assert.ok(second.expiresAt.getTime() - Date.now() > 400, `the code gets its window (${second.expiresAt.getTime() - Date.now()} ms)`);
    assert.notEqual(second.code, first.code);
  });

  it('answers a pairing-code request waiting for a QR at once when the session stops', async () => {
    const r = rig({ pairingReadyTimeoutMs: 10_000 });
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    const pending = r.driver.requestPairingCode('5511988887777');
    await settled();
    const asked = Date.now();
    await r.driver.disconnect();
    await assert.rejects(pending, (err: { status?: number; code?: string }) => (assert.deepEqual([err.status, err.code], [409, 'not_pairing']), true));
    assert.ok(Date.now() - asked < 2000, 'not after the 10 s time-out');
  });

  it('refuses a pairing code at once (409 not_pairing) when the session logs in with a linked phone', async () => {
    const isNotPairing = (err: { status?: number; code?: string }) => (assert.deepEqual([err.status, err.code], [409, 'not_pairing']), true);
    // Kept credentials: the reconnecting socket will never show a QR to pair with.
    const paired = await connectedRig({ pairingReadyTimeoutMs: 10_000 });
    await paired.driver.disconnect();
    await paired.driver.connect();
    const refusedAt = Date.now();
    await assert.rejects(paired.driver.requestPairingCode('5511988887777'), isNotPairing);
    assert.ok(Date.now() - refusedAt < 5000, 'refused, not timed out');

    // A request already waiting for a QR when the socket logs in instead.
    const r = rig({ pairingReadyTimeoutMs: 10_000 });
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    const waiting = r.driver.requestPairingCode('5511988887777');
    await settled();
    r.sock().open();
    await assert.rejects(waiting, isNotPairing);
    assert.deepEqual([...paired.network.pairingRequests, ...r.network.pairingRequests], []);
  });

  it('a pairing-code request on a socket that just closed answers 503 pairing_not_ready, not a 500', async () => {
    const r = rig({ pairingReadyTimeoutMs: 60 });
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    r.sock().showQr();
    await until(() => r.listener.state === 'awaiting_scan', 'awaiting_scan');
    const notReady = (err: { status?: number; code?: string }) => (assert.deepEqual([err.status, err.code], [503, 'pairing_not_ready']), true);
    // The close is known at once; its handling may wait behind other events, the request does not.
    void r.sock().drop(DisconnectReason.connectionLost, 'Connection was lost');
    await assert.rejects(r.driver.requestPairingCode('5511988887777'), notReady);
    assert.equal(r.network.callsAfterClose, 0, 'nothing asked of the closed socket');
    // A close while the request waits for the server.
    await until(() => r.network.sockets.length === 2, 'a new socket');
    r.sock().showQr();
    await until(() => r.listener.state === 'awaiting_scan', 'awaiting_scan again');
    r.network.pairingRequestCloses = true;
    await assert.rejects(r.driver.requestPairingCode('5511988887777'), notReady);
    assert.deepEqual(r.network.pairingRequests, []);
  });

  it('a pairing-code request while WhatsApp is unreachable fails with a clear reason', async () => {
    const r = rig({ pairingReadyTimeoutMs: 60 });
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    await r.sock().unreachable();
    await until(() => r.listener.state === 'reconnecting', 'reconnecting');
    await assert.rejects(r.driver.requestPairingCode('5511988887777'), (err: { status?: number; code?: string; detail?: string }) => {
      assert.deepEqual([err.status, err.code], [503, 'pairing_not_ready']);
      assert.match(err.detail ?? '', /cannot be reached/);
      return true;
    });
    assert.deepEqual(r.network.pairingRequests, []);
  });

  it('restarts after pairing (515) without reporting a drop, saves credentials and connects as the phone', async () => {
    const r = await connectedRig();
    assert.deepEqual(
      r.listener.states.map((s) => s.state),
      ['starting', 'awaiting_scan', 'connected'],
    );
    assert.equal(r.listener.states.at(-1)!.phone, MY_PHONE);
    const creds = r.auth.data.get('creds/creds') as { me?: { id?: string } };
    assert.equal(creds?.me?.id, `${MY_PHONE}:12@s.whatsapp.net`);
  });

  it('answers one restart (515) at once, and a server that keeps asking with backoff', async () => {
    const r = rig({ backoff: { baseMs: 300, maxMs: 300, jitter: 0 } });
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    await r.sock().drop(DisconnectReason.restartRequired);
    await until(() => r.network.sockets.length === 2, 'the first restart at once');
    const askedAgain = Date.now();
    await r.sock().drop(DisconnectReason.restartRequired);
    await until(() => r.listener.state === 'reconnecting', 'the wait is reported');
    assert.deepEqual(r.listener.states.at(-1), { state: 'reconnecting', reason: 'restart_required' });
    await until(() => r.network.sockets.length === 3, 'the second after its backoff');
    assert.ok(Date.now() - askedAgain >= 290, `waited ${Date.now() - askedAgain} ms`);
  });

  for (const [code, reason] of [
    [DisconnectReason.connectionLost, 'connection_lost'],
    [DisconnectReason.connectionClosed, 'connection_closed'],
    [DisconnectReason.badSession, 'bad_session'],
    [DisconnectReason.unavailableService, 'service_unavailable'],
    [402, 'temporarily_banned'],
  ] as const) {
    it(`reconnects after a transient close ${code} and keeps credentials`, async () => {
      const r = await connectedRig();
      await r.sock().drop(code);
      await until(() => r.network.sockets.length === 3, 'new socket after backoff');
      assert.deepEqual(r.listener.states.at(-1), { state: 'reconnecting', reason });
      r.sock().open();
      await until(() => r.listener.state === 'connected', 'connected again');
      assert.ok(r.auth.data.has('creds/creds'));
    });
  }

  for (const [code, reason] of [
    [DisconnectReason.loggedOut, 'logged_out'],
    [DisconnectReason.forbidden, 'forbidden'],
    [DisconnectReason.multideviceMismatch, 'multidevice_mismatch'],
    [406, 'unknown_logout'],
  ] as const) {
    it(`stops on ${code}: logged_out, credentials cleared, no reconnect`, async () => {
      const r = await connectedRig();
      await r.sock().drop(code);
      await until(() => r.listener.state === 'logged_out', 'logged_out');
      assert.equal(r.listener.states.at(-1)!.reason, reason);
      assert.equal(r.auth.data.size, 0);
      await settled(80);
      assert.equal(r.network.sockets.length, 2, 'no new socket');
    });
  }

  it('on 440 (replaced) does not reconnect unless the owner lock says so', async () => {
    const r = await connectedRig();
    await r.sock().drop(DisconnectReason.connectionReplaced);
    await until(() => r.listener.state === 'reconnecting', 'reconnecting');
    assert.equal(r.listener.states.at(-1)!.reason, 'connection_replaced');
    await settled(80);
    assert.equal(r.network.sockets.length, 2, 'no blind reconnect');

    let asked = 0;
    const owner = await connectedRig({ stillOwner: async (id) => (asked++, id === INSTANCE) });
    await owner.sock().drop(DisconnectReason.connectionReplaced);
    await until(() => owner.network.sockets.length === 3, 'reconnect as the lock holder');
    assert.equal(asked, 1);

    // Without the option the driver asks the session's owner lock through its context.
    let contextAsked = 0;
    const lockGone = await connectedRig({}, { stillOwner: async () => (contextAsked++, false) });
    await lockGone.sock().drop(DisconnectReason.connectionReplaced);
    await until(() => contextAsked === 1, 'the context asked');
    await settled(80);
    assert.equal(lockGone.network.sockets.length, 2, 'the lock is gone: no reconnect');
    const lockHeld = await connectedRig({}, { stillOwner: async () => true });
    await lockHeld.sock().drop(DisconnectReason.connectionReplaced);
    await until(() => lockHeld.network.sockets.length === 3, 'reconnect as the lock holder (context)');
  });

  it('says why it reconnects: servers unreachable (no route/DNS), QR expired unscanned', async () => {
    const r = rig();
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    await r.sock().unreachable('EAI_AGAIN');
    await until(() => r.listener.state === 'reconnecting', 'reconnecting');
    assert.equal(r.listener.states.at(-1)!.reason, 'server_unreachable');
    await until(() => r.network.sockets.length === 2, 'retried');
    r.sock().showQr();
    await until(() => r.listener.state === 'awaiting_scan', 'awaiting_scan');
    await r.sock().qrRefsEnded();
    await until(() => r.network.sockets.length === 3, 'a fresh QR session');
    assert.deepEqual(
      r.listener.states.map((s) => [s.state, s.reason ?? null]),
      [['starting', null], ['reconnecting', 'server_unreachable'], ['awaiting_scan', null], ['reconnecting', 'qr_expired']],
    );
    // Errors Baileys builds for these closes (mapWebSocketError, the QR timer) and a plain drop.
    const wsError = Object.assign(new Error('getaddrinfo ENOTFOUND web.whatsapp.com'), { code: 'ENOTFOUND' });
    assert.deepEqual(closeAction(408, new Boom('WebSocket Error (getaddrinfo ENOTFOUND web.whatsapp.com)', { statusCode: 408, data: wsError })), { kind: 'reconnect', reason: 'server_unreachable' });
    assert.deepEqual(closeAction(408, new Boom('QR refs attempts ended', { statusCode: 408 })), { kind: 'reconnect', reason: 'qr_expired' });
    assert.deepEqual(closeAction(408, new Boom('Connection was lost', { statusCode: 408 })), { kind: 'reconnect', reason: 'connection_lost' });
    assert.equal(closeAction(401, new Boom('x', { statusCode: 401, data: wsError })).kind, 'logged_out', 'the code decides the action');
  });

  it('stops opening sockets for QR codes once nobody paired it within pairingTimeoutMs; a pairing code starts the time again', async () => {
    const r = rig({ pairingTimeoutMs: 1000 });
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    r.sock().showQr(); // the time starts
    await until(() => r.listener.state === 'awaiting_scan', 'awaiting_scan');
    await r.sock().qrRefsEnded(); // within the time: a fresh QR session
    await until(() => r.network.sockets.length === 2, 'a second QR session');
    r.sock().showQr();
    await settled(1050);
    // Over the time, but a code is asked on this socket: somebody is pairing, the time runs from here.
    await r.driver.requestPairingCode('5511988887777');
    await r.sock().qrRefsEnded();
    await until(() => r.network.sockets.length === 3, 'after a code: another QR session');
    r.sock().showQr();
    await settled(1050);
    await r.sock().qrRefsEnded();
    await until(() => r.listener.state === 'logged_out', 'given up');
    assert.deepEqual(r.listener.states.at(-1), { state: 'logged_out', reason: 'pairing_timeout' });
    await settled(80); // the backoff (5–40 ms) has passed
    assert.equal(r.network.sockets.length, 3, 'no further socket');
    await assert.rejects(r.driver.requestPairingCode('5511988887777'), (err: unknown) => err instanceof Problem && err.code === 'not_pairing');

    // Sockets of the pairing that end for another reason (a proxy cutting idle connections) end it too.
    const cut = rig({ pairingTimeoutMs: 300 });
    await cut.driver.connect();
    await until(() => cut.network.sockets.length === 1, 'socket');
    cut.sock().showQr();
    await settled(320);
    await cut.sock().drop(DisconnectReason.connectionLost);
    await until(() => cut.listener.state === 'logged_out', 'given up on a socket cut');
    assert.deepEqual(cut.listener.states.at(-1), { state: 'logged_out', reason: 'pairing_timeout' });

    // A scan that came just in time: the login that follows is never given up, whatever ends its socket.
    const late = rig({ pairingTimeoutMs: 300 });
    await late.driver.connect();
    await until(() => late.network.sockets.length === 1, 'socket');
    late.sock().showQr();
    await settled(320);
    late.sock().completePairing(MY_PHONE, MY_LID);
    await until(() => late.network.sockets.length === 2, 'restart after pairing');
    await late.sock().drop(DisconnectReason.connectionLost);
    await until(() => late.network.sockets.length === 3, 'reconnects with the new pairing');
    late.sock().open();
    await until(() => late.listener.state === 'connected', 'connected');
    assert.ok(!late.listener.states.some((st) => st.state === 'logged_out'));

    // Without a limit the sockets go on.
    const forever = rig();
    await forever.driver.connect();
    await until(() => forever.network.sockets.length === 1, 'socket');
    forever.sock().showQr();
    await forever.sock().qrRefsEnded();
    await until(() => forever.network.sockets.length === 2, 'no limit: a new QR session');
    assert.ok(!forever.listener.states.some((s) => s.state === 'logged_out'));
  });

  it('announces the current WhatsApp Web version, and reads it again when WhatsApp refuses it (405)', async () => {
    const versions: WAVersion[] = [[2, 3000, 1], [2, 3000, 2]];
    const reads: WAVersion[] = [];
    const webVersion = webVersionSource({ fetchLatest: async () => (reads.push(versions[reads.length]), { version: versions[reads.length - 1], isLatest: true }) });
    const r = rig({ webVersion });
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    assert.deepEqual(r.sock().config.version, [2, 3000, 1]);
    await r.sock().drop(405);
    await until(() => r.listener.state === 'reconnecting', 'reconnecting');
    assert.equal(r.listener.states.at(-1)!.reason, 'client_outdated');
    await until(() => r.network.sockets.length === 2, 'retried');
    assert.deepEqual(r.sock().config.version, [2, 3000, 2], 'read again after the refusal');
    assert.equal(reads.length, 2);
    // A plain drop keeps the version read.
    await r.sock().drop(DisconnectReason.connectionLost);
    await until(() => r.network.sockets.length === 3, 'reconnected');
    assert.deepEqual([r.sock().config.version, reads.length], [[2, 3000, 2], 2]);
  });

  it('waits for a credentials write in flight before disconnect returns (the owner lock is released next)', async () => {
    const r = await connectedRig();
    const set = r.auth.set.bind(r.auth);
    r.auth.set = async (batch) => {
      await settled(100);
      await set(batch);
    };
    r.sock().emit('creds.update', { lastPropHash: 'written-late' });
    await r.driver.disconnect();
    assert.equal((r.auth.data.get('creds/creds') as { lastPropHash?: string }).lastPropHash, 'written-late');
  });

  it('drops an unconfirmed pairing code before reconnecting, so it never logs in as an unlinked device', async () => {
    const r = rig();
    await r.driver.connect();
    await until(() => r.network.sockets.length === 1, 'socket');
    r.sock().showQr();
    await r.driver.requestPairingCode('5511988887777');
    assert.equal(r.sock().config.auth.creds.me?.id, '5511988887777@s.whatsapp.net', 'Baileys wrote `me` for the code');
    await r.sock().qrRefsEnded(); // the code was never typed on the phone
    await until(() => r.network.sockets.length === 2, 'new socket');
    const creds = r.sock().config.auth.creds;
    assert.equal(creds.me, undefined, 'registers afresh instead of logging in');
    assert.equal(creds.pairingCode, undefined);
    await until(() => !(r.auth.data.get('creds/creds') as { me?: unknown } | undefined)?.me, 'stored credentials updated');
    r.sock().showQr();
    await until(() => r.listener.state === 'awaiting_scan', 'awaiting_scan again');
    assert.ok(!r.listener.states.some((s) => s.state === 'logged_out'));

    // A completed pairing (with its signed device identity) is kept across reconnects.
    const paired = await connectedRig();
    await paired.sock().drop(DisconnectReason.connectionLost);
    await until(() => paired.network.sockets.length === 3, 'reconnect');
    assert.equal(paired.sock().config.auth.creds.me?.id, `${MY_PHONE}:12@s.whatsapp.net`);
  });

  it('waits exponentially longer between consecutive failed attempts', async () => {
    const r = rig({ backoff: { baseMs: 10, maxMs: 10_000, jitter: 0.2 } });
    await r.driver.connect();
    for (let n = 1; n <= 5; n++) {
      await until(() => r.network.sockets.length === n, `attempt ${n}`);
      await r.sock().unreachable();
    }
    const failedAt = Date.now();
    await until(() => r.network.sockets.length === 6, 'sixth attempt');
    // The fifth delay is 10 ms · 2⁴ ± 20 % (timers never fire early, so this bound is not flaky).
    assert.ok(Date.now() - failedAt >= 128, `waited ${Date.now() - failedAt} ms`);
  });

  it('backs off exponentially with jitter, capped', () => {
    const opts = { baseMs: 100, maxMs: 1000, jitter: 0.2 };
    assert.deepEqual([0, 1, 2, 3, 4, 10].map((a) => backoffDelay(a, opts, () => 0.5)), [100, 200, 400, 800, 1000, 1000]);
    assert.equal(backoffDelay(2, opts, () => 0), 320);
    assert.equal(backoffDelay(2, opts, () => 1), 480);
    assert.equal(closeAction(undefined).kind, 'reconnect');
  });

  it('disconnect closes the socket, keeps credentials and ignores what the old socket still emits', async () => {
    const r = await connectedRig();
    const old = r.sock();
    const states = r.listener.states.length;
    await r.driver.disconnect();
    assert.ok(old.isClosed);
    assert.ok(r.auth.data.has('creds/creds'));
    await settled(60);
    assert.equal(r.network.sockets.length, 2);
    assert.equal(r.listener.states.length, states);
  });

  it('logout unlinks the device, clears credentials and reports logged_out', async () => {
    const r = await connectedRig();
    await r.driver.logout();
    assert.deepEqual(r.network.logouts, [`${MY_PHONE}:12@s.whatsapp.net`]);
    assert.equal(r.auth.data.size, 0);
    assert.deepEqual(r.listener.states.at(-1), { state: 'logged_out', reason: 'logout' });
    await settled(60);
    assert.equal(r.network.sockets.length, 2, 'no reconnect after logout');
  });

  it('a logout between connections connects first to unlink the device (at once, not at the backoff), within a limit', async () => {
    const linkedJid = `${MY_PHONE}:12@s.whatsapp.net`;
    // The reconnect waits a long backoff: the logout opens the socket now, and unlinks once it is open.
    const slow = await connectedRig({ backoff: { baseMs: 60_000, maxMs: 60_000, jitter: 0 } });
    await slow.sock().drop(DisconnectReason.connectionLost);
    await until(() => slow.listener.state === 'reconnecting', 'reconnecting');
    assert.equal(slow.network.sockets.length, 2, 'no socket before the backoff ends');
    const loggingOut = slow.driver.logout();
    await until(() => slow.network.sockets.length === 3, 'a socket opened for the unlink');
    slow.sock().open();
    await loggingOut;
    assert.deepEqual(slow.network.logouts, [linkedJid], 'unlinked on the phone');
    assert.ok(!slow.listener.states.slice(-2).some((st) => st.state === 'connected'), 'the connection made for the unlink is not reported');
    assert.equal(slow.auth.data.size, 0);
    assert.deepEqual(slow.listener.states.at(-1), { state: 'logged_out', reason: 'logout' });

    // A connection that does not come in time: credentials cleared all the same, the device left listed.
    const never = await connectedRig({ unlinkConnectWaitMs: 200 });
    await never.sock().drop(DisconnectReason.connectionLost);
    await until(() => never.network.sockets.length === 3, 'reconnecting socket');
    await never.driver.logout();
    assert.deepEqual(never.network.logouts, []);
    assert.equal(never.auth.data.size, 0);
    assert.deepEqual(never.listener.states.at(-1), { state: 'logged_out', reason: 'logout' });
  });
});

describe('baileys driver: sending', () => {
  it('sends text with the reserved id to phone, group, -group and LID destinations', async () => {
    const r = await connectedRig();
    const cases: [OutboundMessage['to'], string][] = [
      [{ kind: 'phone', phone: '5511912345678' }, '5511912345678@s.whatsapp.net'],
      [{ kind: 'group', groupId: '120363025246125486' }, '120363025246125486@g.us'],
      [{ kind: 'group', groupId: '5511912345678-1600000000' }, '5511912345678-1600000000@g.us'],
      [{ kind: 'lid', lid: '123456789012345' }, '123456789012345@lid'],
    ];
    for (const jid of ['120363025246125486@g.us', '5511912345678-1600000000@g.us']) r.network.groups.set(jid, group(jid, false, null));
    for (const [to, jid] of cases) {
      const id = mid();
      await r.driver.send(text(id, to, `to ${jid}`));
      const relayed = r.network.relayed.at(-1)!;
      assert.equal(relayed.messageId, id);
      assert.equal(relayed.jid, jid);
      assert.equal(relayed.message.extendedTextMessage?.text, `to ${jid}`);
    }
  });

  it('echoes an API send as an own message (fromMe, fromApi); never a phone for a LID', async () => {
    const r = await connectedRig();
    const id = mid();
    await r.driver.send(text(id, { kind: 'lid', lid: '123456789012345' }, 'echo'));
    await until(() => r.listener.messages.some((m) => m.messageId === id), 'echo');
    const echo = r.listener.messages.find((m) => m.messageId === id)!;
    assert.equal(echo.fromMe, true);
    assert.equal(echo.fromApi, true);
    assert.equal(echo.phone, null);
    assert.equal(echo.chatLid, '123456789012345@lid');
    assert.equal(echo.text, 'echo');
  });

  it('uploads media encrypted and sends image, video, voice note, audio, document and sticker', async () => {
    const r = await connectedRig();
    const server = await mediaServer((path) => {
      const [, , , id] = path.split('/');
      return r.network.uploads.get(id!);
    });
    try {
      r.network.mediaBaseUrl = `${server.url}/media`;
      const bytes = (n: number) => randomBytes(n);
      const sends: [OutboundMessage, (m: proto.IMessage) => unknown][] = [
        [{ messengerId: mid(), to: phoneTo(), type: 'image', media: bytes(900), mimetype: 'image/jpeg', caption: 'a photo' }, (m) => m.imageMessage],
        [{ messengerId: mid(), to: phoneTo(), type: 'video', media: bytes(1500), mimetype: 'video/mp4', caption: 'a clip' }, (m) => m.videoMessage],
        [{ messengerId: mid(), to: phoneTo(), type: 'audio', media: bytes(700), mimetype: 'audio/ogg', ptt: true, seconds: 3, waveform: Uint8Array.from({ length: 64 }, (_, i) => i) }, (m) => m.audioMessage],
        [{ messengerId: mid(), to: phoneTo(), type: 'audio', media: bytes(700), mimetype: 'audio/mpeg' }, (m) => m.audioMessage],
        [{ messengerId: mid(), to: phoneTo(), type: 'document', media: bytes(400), mimetype: 'application/pdf', fileName: 'invoice.pdf', caption: 'the invoice' }, (m) => m.documentMessage],
        [{ messengerId: mid(), to: phoneTo(), type: 'sticker', media: bytes(300), mimetype: 'image/webp' }, (m) => m.stickerMessage],
      ];
      for (const [msg, pick] of sends) {
        await r.driver.send(msg);
        const relayed = r.network.relayed.at(-1)!;
        assert.equal(relayed.messageId, msg.messengerId);
        const media = pick(relayed.message) as proto.Message.IImageMessage & proto.Message.IAudioMessage & proto.Message.IDocumentMessage;
        assert.ok(media, `${msg.type} content`);
        const plain = await collect(await downloadContentFromMessage({ mediaKey: media.mediaKey, url: media.url }, mediaTypeOf(msg.type)));
        assert.deepEqual(plain, Buffer.from(msg.media!), `${msg.type} decrypts to the original bytes`);
        if (msg.caption) assert.equal(media.caption, msg.caption);
        if (msg.type === 'audio') {
          assert.equal(!!media.ptt, !!msg.ptt);
          assert.equal(media.mimetype, msg.ptt ? 'audio/ogg; codecs=opus' : 'audio/mpeg');
          if (msg.ptt) assert.equal(media.seconds, 3, 'a voice note carries its length');
          if (msg.ptt) assert.deepEqual(Buffer.from(media.waveform!), Buffer.from(msg.waveform!), 'and the waveform the gateway worked out');
        }
        if (msg.type === 'document') assert.equal(media.fileName, 'invoice.pdf');
        if (msg.type === 'sticker') assert.deepEqual([media.mimetype, (media as proto.Message.IStickerMessage).isAnimated], ['image/webp', false]);
      }
    } finally {
      await server.close();
    }
  });

  it('marks an animated WebP sticker animated (WhatsApp plays it only then)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sb-webp-'));
    try {
      const file = join(dir, 'moving.webp');
      await promisify(execFile)('ffmpeg', ['-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'testsrc=size=64x64:rate=5', '-t', '1', '-c:v', 'libwebp', '-loop', '0', file]);
      const animated = await readFile(file);
      assert.equal(isAnimatedWebp(animated), true);
      assert.equal(isAnimatedWebp(mediaFixtures.sticker.bytes()), false, 'a still WebP');
      assert.equal(isAnimatedWebp(Buffer.from('RIFF')), false);
      const r = await connectedRig();
      await r.driver.send({ messengerId: mid(), to: phoneTo(), type: 'sticker', media: animated, mimetype: 'image/webp' });
      assert.equal(r.network.relayed.at(-1)!.message.stickerMessage?.isAnimated, true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('fails definitely before the message reaches the socket', async () => {
    const offline = rig();
    await rejectsWith(offline.driver.send(text(mid(), phoneTo())), 'not_connected', true);

    const r = await connectedRig();
    r.network.notOnNetwork.add('5511900000404');
    await rejectsWith(r.driver.send(text(mid(), { kind: 'phone', phone: '5511900000404' })), 'not_on_network', true);

    r.network.uploadFails = true;
    await rejectsWith(r.driver.send({ messengerId: mid(), to: phoneTo(), type: 'image', media: randomBytes(100), mimetype: 'image/jpeg' }), 'media_upload_failed', true);
    await rejectsWith(r.driver.send({ messengerId: mid(), to: phoneTo(), type: 'image', mimetype: 'image/jpeg' }), 'invalid_message', true);
    assert.equal(r.network.relayed.length, 0, 'nothing reached the socket');
  });

  it('puts a send back in the queue when the connection closed before the message left', async () => {
    // Refused by the close before anything was written: a device query the close cut off, a media
    // upload whose host query met it, or a socket whose close is still waiting its turn.
    const r = await connectedRig();
    r.network.relayBehaviour = 'close-before-write';
    await rejectsWith(r.driver.send(text(mid(), phoneTo())), NOT_CONNECTED, true);
    await until(() => r.listener.state === 'reconnecting', 'the drop is reported');

    const upload = await connectedRig();
    upload.network.mediaHostsAnswers = ['close'];
    await rejectsWith(upload.driver.send({ messengerId: mid(), to: phoneTo(), type: 'image', media: randomBytes(100), mimetype: 'image/jpeg' }), NOT_CONNECTED, true);

    const stale = await connectedRig();
    void stale.sock().drop(DisconnectReason.connectionLost, 'Connection was lost');
    await rejectsWith(stale.driver.send(text(mid(), phoneTo())), NOT_CONNECTED, true);
    assert.equal(stale.network.callsAfterClose, 0, 'nothing asked of the closed socket');
    assert.deepEqual([r, upload, stale].map((rig) => rig.network.relayed.length), [0, 0, 0], 'nothing was written');
  });

  it('reconnects to ask the media hosts again when the socket keeps a failed answer, at most once in a while', async () => {
    // Baileys keeps a failed media-hosts query for the socket's life: without a new socket every
    // later media send would fail. The send goes back to the queue and waits for the reconnect.
    const image = (): OutboundMessage => ({ messengerId: mid(), to: phoneTo(), type: 'image', media: randomBytes(100), mimetype: 'image/jpeg' });
    const r = await connectedRig();
    const first = r.sock();
    r.network.mediaHostsAnswers = ['error'];
    await rejectsWith(r.driver.send(image()), NOT_CONNECTED, true);
    assert.equal(first.isClosed, true, 'the socket that kept the failure is ended');
    await until(() => r.listener.state === 'reconnecting', 'the renewal is reported');
    assert.deepEqual(r.listener.states.at(-1), { state: 'reconnecting', reason: 'media_hosts_unavailable' });
    await until(() => r.sock() !== first, 'a new socket');
    r.sock().open();
    await until(() => r.listener.state === 'connected', 'connected again');
    await r.driver.send(image());
    assert.deepEqual([r.network.uploads.size, r.network.mediaHostsQueries], [1, 2], 'the new socket asked again and uploaded');

    // Hosts that keep failing soon after: the sends fail, the session is not reconnected in a loop.
    const socketsBefore = r.network.sockets.length;
    r.network.mediaHostsAnswers = ['error'];
    await r.sock().refreshMediaConn(true).catch(() => {}); // the kept answer expired and its renewal failed
    await rejectsWith(r.driver.send(image()), 'media_upload_failed', true);
    await rejectsWith(r.driver.send(image()), 'media_upload_failed', true);
    await settled();
    assert.equal(r.network.sockets.length, socketsBefore, 'no second reconnect');
    assert.equal(r.listener.state, 'connected');
    assert.equal(r.network.mediaHostsQueries, 3, 'the failed answer is kept, as Baileys does');

    // An upload that fails while the media hosts are known is the file's failure: no reconnect.
    const other = await connectedRig({ mediaHostsRenewalMs: 0, mediaHostsCheckMs: 100 });
    other.network.uploadFails = true;
    await rejectsWith(other.driver.send(image()), 'media_upload_failed', true);
    assert.equal(other.sock().isClosed, false);
    // Nor when the check's fresh query is merely slow: its answer may still come.
    other.network.mediaHostsTtlSeconds = -1; // answers expired at once: every upload and every check asks again
    await other.sock().refreshMediaConn(true); // replaces the answer kept with one that expired
    other.network.mediaHostsAnswers = ['ok', 'slow'];
    const asked = other.network.mediaHostsQueries;
    await rejectsWith(other.driver.send(image()), 'media_upload_failed', true);
    assert.equal(other.network.mediaHostsQueries - asked, 2, 'the upload and the check asked');
    assert.equal(other.sock().isClosed, false, 'a slow answer renews nothing');
    await new Promise((resolve) => setTimeout(resolve, 300)); // the slow answer arrives
    // A connection that closes under the check: nothing was sent, the send goes back to the queue.
    other.network.mediaHostsAnswers = ['ok', 'close'];
    await rejectsWith(other.driver.send(image()), NOT_CONNECTED, true);
    assert.deepEqual([other.network.mediaHostsAnswers, other.network.relayed.length], [[], 0]);
  });

  it('is uncertain when the connection closes or times out after the message went to the socket', async () => {
    const r = await connectedRig({ sendTimeoutMs: 60 });
    r.network.relayBehaviour = 'hang';
    await rejectsWith(r.driver.send(text(mid(), phoneTo())), 'timeout', false);
    r.network.relayBehaviour = 'close';
    await rejectsWith(r.driver.send(text(mid(), phoneTo())), 'connection_lost', false);
    await until(() => r.listener.state === 'reconnecting', 'the drop is reported');
  });

  it('protectAnnouncementGroups refuses announcement groups where we are not admin', async () => {
    const r = await connectedRig();
    r.settings.protectAnnouncementGroups = true;
    r.network.groups.set('120363000000000001@g.us', group('120363000000000001@g.us', true, null));
    r.network.groups.set('120363000000000002@g.us', group('120363000000000002@g.us', true, 'admin'));
    r.network.groups.set('120363000000000003@g.us', group('120363000000000003@g.us', false, null));
    await rejectsWith(r.driver.send(text(mid(), { kind: 'group', groupId: '120363000000000001' })), 'announcement_group', true);
    await r.driver.send(text(mid(), { kind: 'group', groupId: '120363000000000002' }));
    await r.driver.send(text(mid(), { kind: 'group', groupId: '120363000000000003' }));
    r.settings.protectAnnouncementGroups = false;
    await r.driver.send(text(mid(), { kind: 'group', groupId: '120363000000000001' }));
    assert.equal(r.network.relayed.length, 3);
  });

  it("fails a send to a group we are not in (nothing sent), and gives relayMessage the members it read", async () => {
    const r = await connectedRig();
    // The server refuses the members of a group we left: the send fails for good, it is not uncertain.
    await rejectsWith(r.driver.send(text(mid(), { kind: 'group', groupId: '120363000000000009' })), 'group_unavailable', true);
    assert.equal(r.network.relayed.length, 0);
    r.network.groups.set('120363000000000003@g.us', group('120363000000000003@g.us', false, null));
    await r.driver.send(text(mid(), { kind: 'group', groupId: '120363000000000003' }));
    await r.driver.send(text(mid(), { kind: 'group', groupId: '120363000000000003' }));
    assert.deepEqual(r.network.groupRelays, [true, true].map((cached) => ({ jid: '120363000000000003@g.us', cached })), 'no second query for the members');
    assert.equal(r.network.groupQueries.filter((j) => j === '120363000000000003@g.us').length, 1);

    // Members changed: read again before the next send.
    r.sock().emit('group-participants.update', { id: '120363000000000003@g.us', author: '5511977776666@s.whatsapp.net', participants: [], action: 'add' });
    await settled();
    await r.driver.send(text(mid(), { kind: 'group', groupId: '120363000000000003' }));
    assert.equal(r.network.groupQueries.filter((j) => j === '120363000000000003@g.us').length, 2);

    // A change heard while the members were being read: that answer may be stale, so it is not kept.
    const change = (action: 'add' | 'remove') => r.sock().emit('group-participants.update', { id: '120363000000000003@g.us', author: '5511977776666@s.whatsapp.net', participants: [], action });
    change('add'); // nothing cached from here on
    r.network.groupQueryDelayMs = 100;
    const before = r.network.groupQueries.length;
    const sending = r.driver.send(text(mid(), { kind: 'group', groupId: '120363000000000003' }));
    await until(() => r.network.groupQueries.length === before + 1, 'the members query under way');
    change('remove');
    await sending;
    r.network.groupQueryDelayMs = 0;
    const queried = r.network.groupQueries.length;
    await r.driver.send(text(mid(), { kind: 'group', groupId: '120363000000000003' }));
    assert.ok(r.network.groupQueries.length > queried, 'read again after the change');

    // A passing error (rate limit) puts the send back in the queue: nothing was sent, nothing failed.
    r.network.groupQueryError = 429;
    r.network.groups.set('120363000000000004@g.us', group('120363000000000004@g.us', false, null));
    await rejectsWith(r.driver.send(text(mid(), { kind: 'group', groupId: '120363000000000004' })), NOT_CONNECTED, true);
  });
});

describe('baileys driver: receipts', () => {
  it('maps messages.update statuses and only moves forward', async () => {
    const r = await connectedRig();
    const id = mid();
    const key = { remoteJid: '5511912345678@s.whatsapp.net', fromMe: true, id };
    const S = proto.WebMessageInfo.Status;
    for (const status of [S.SERVER_ACK, S.DELIVERY_ACK, S.SERVER_ACK, S.READ, S.DELIVERY_ACK, S.PLAYED, S.ERROR]) {
      r.sock().emit('messages.update', [{ key, update: { status } }]);
    }
    // Not ours, or not a status change: ignored.
    r.sock().emit('messages.update', [{ key: { ...key, fromMe: false, id: mid() }, update: { status: S.READ } }]);
    r.sock().emit('messages.update', [{ key, update: { message: { conversation: 'edited' } } }]);
    await until(() => r.listener.receipts.some((x) => x.status === 'played'), 'played');
    await settled();
    assert.deepEqual(r.listener.receipts, ['sent', 'delivered', 'read', 'played'].map((status) => ({ messengerId: id, status })));

    const failing = mid();
    r.sock().emit('messages.update', [{ key: { ...key, id: failing }, update: { status: S.ERROR, messageStubParameters: ['479'] } }]);
    await until(() => r.listener.receipts.some((x) => x.messengerId === failing), 'failed receipt');
    assert.equal(r.listener.receipts.at(-1)!.status, 'failed');
  });

  it('reports a group send delivered, then read, as the members\' receipts come (not our phone\'s copy)', async () => {
    const r = await connectedRig();
    (r.network.opts as { auto?: boolean }).auto = true; // the server now acknowledges sends as WhatsApp does
    const groupJid = '120363000000000009@g.us';
    r.network.groups.set(groupJid, group(groupJid, false, null));
    const id = mid();
    await r.driver.send(text(id, { kind: 'group', groupId: '120363000000000009' }, 'to the group'));
    await until(() => r.listener.receipts.some((x) => x.messengerId === id && x.status === 'read'), 'read by a member');
    assert.deepEqual(r.listener.receipts.filter((x) => x.messengerId === id).map((x) => x.status), ['delivered', 'read']);
  });

  it('maps per-participant group receipts (message-receipt.update)', async () => {
    const r = await connectedRig();
    const id = mid();
    const key = { remoteJid: '120363025246125486@g.us', fromMe: true, id };
    // Our phone got its copy: Baileys turns that "sender" receipt into a readTimestamp of our own
    // user (messages-recv.js handleReceipt), by phone number or LID. Not a read.
    r.sock().emit('message-receipt.update', [{ key, receipt: { userJid: `${MY_PHONE}@s.whatsapp.net`, readTimestamp: 1_700_000_000 } }]);
    r.sock().emit('message-receipt.update', [{ key, receipt: { userJid: `${MY_LID}@lid`, readTimestamp: 1_700_000_000 } }]);
    r.sock().emit('message-receipt.update', [{ key, receipt: { userJid: '5511911111111@s.whatsapp.net', receiptTimestamp: 1_700_000_001 } }]);
    r.sock().emit('message-receipt.update', [{ key, receipt: { userJid: '123456789012345@lid', receiptTimestamp: 1_700_000_002 } }]);
    r.sock().emit('message-receipt.update', [{ key, receipt: { userJid: '5511911111111@s.whatsapp.net', readTimestamp: 1_700_000_003 } }]);
    r.sock().emit('message-receipt.update', [{ key, receipt: { userJid: '5511911111111@s.whatsapp.net', playedTimestamp: 1_700_000_004 } }]);
    await until(() => r.listener.receipts.length === 3, 'three receipts');
    assert.deepEqual(r.listener.receipts.map((x) => x.status), ['delivered', 'read', 'played']);
  });
});

describe('baileys driver: receiving', () => {
  it('normalises a private PN-addressed text with the LID from remoteJidAlt', async () => {
    const r = await connectedRig();
    const m = await deliver(r, received({ chat: '5511977776666@s.whatsapp.net', chatAlt: '111122223333444@lid', pushName: 'Ana', message: { conversation: 'oi' } }));
    assert.deepEqual(pick(m), { from: '5511977776666@s.whatsapp.net', phone: '5511977776666', chatLid: '111122223333444@lid', participant: null, fromMe: false, fromApi: false, name: 'Ana', type: 'text', text: 'oi', isGroup: false });
  });

  it('takes the phone of a LID-addressed chat only from its PN alternative', async () => {
    const r = await connectedRig();
    const withPn = await deliver(r, received({ chat: '111122223333444@lid', chatAlt: '5511977776666@s.whatsapp.net', message: { extendedTextMessage: { text: 'link https://example.com' } } }));
    assert.equal(withPn?.phone, '5511977776666');
    assert.equal(withPn?.chatLid, '111122223333444@lid');
    assert.equal(withPn?.text, 'link https://example.com');
    const lidOnly = await deliver(r, received({ chat: '111122223333444@lid', message: { conversation: 'who am i' } }));
    assert.equal(lidOnly?.phone, null, 'never derived from the LID');
    assert.equal(lidOnly?.chatLid, '111122223333444@lid');
    assert.equal(lidOnly?.from, '111122223333444@lid');
  });

  it('normalises group messages from LID and PN participants', async () => {
    const r = await connectedRig();
    const lidSender = await deliver(r, received({ chat: '120363025246125486@g.us', participant: '222233334444555@lid', participantAlt: '5511955554444@s.whatsapp.net', pushName: 'Bia', message: { conversation: 'hello group' } }));
    assert.deepEqual(pick(lidSender), { from: '120363025246125486@g.us', phone: '5511955554444', chatLid: '222233334444555@lid', participant: '222233334444555@lid', fromMe: false, fromApi: false, name: 'Bia', type: 'text', text: 'hello group', isGroup: true });
    const pnSender = await deliver(r, received({ chat: '120363025246125486@g.us', participant: '5511955554444:3@s.whatsapp.net', message: { conversation: 'from a device' } }));
    assert.equal(pnSender?.participant, '5511955554444@s.whatsapp.net');
    assert.equal(pnSender?.phone, '5511955554444');
    assert.equal(pnSender?.chatLid, null);
  });

  it('unwraps ephemeral, view-once, document-with-caption, edited, album and group-status messages', async () => {
    const r = await connectedRig();
    const chat = '5511977776666@s.whatsapp.net';
    const eph = await deliver(r, received({ chat, message: { ephemeralMessage: { message: { extendedTextMessage: { text: 'disappearing' } } } } }));
    assert.deepEqual([eph?.type, eph?.text], ['text', 'disappearing']);

    const once = await deliver(r, received({ chat, message: { viewOnceMessageV2: { message: { imageMessage: { mimetype: 'image/jpeg', caption: 'once', viewOnce: true, url: 'https://mmg.whatsapp.net/x', mediaKey: randomBytes(32) } } } } }));
    assert.deepEqual([once?.type, once?.text, once?.media?.viewOnce], ['image', 'once', true]);

    const doc = await deliver(r, received({ chat, message: { documentWithCaptionMessage: { message: { documentMessage: { mimetype: 'application/pdf', fileName: 'report.pdf', caption: 'the report' } } } } }));
    assert.deepEqual([doc?.type, doc?.text, doc?.media?.fileName, doc?.media?.mimetype, doc?.media?.viewOnce], ['document', 'the report', 'report.pdf', 'application/pdf', false]);

    const edited = await deliver(r, received({ chat, message: { protocolMessage: { type: proto.Message.ProtocolMessage.Type.MESSAGE_EDIT, key: { id: 'ORIGINAL' }, editedMessage: { conversation: 'fixed typo' } } } }));
    assert.deepEqual([edited?.type, edited?.text], ['text', 'fixed typo']);
    const editedWrapper = await deliver(r, received({ chat, message: { editedMessage: { message: { conversation: 'also edited' } } } }));
    assert.equal(editedWrapper?.text, 'also edited');

    // Each picture of an album comes wrapped; so does a status posted to a group.
    const albumPicture = await deliver(r, received({ chat, message: { associatedChildMessage: { message: { imageMessage: { mimetype: 'image/jpeg', caption: 'first of three', url: 'https://mmg.whatsapp.net/y', mediaKey: randomBytes(32) } } } } }));
    assert.deepEqual([albumPicture?.type, albumPicture?.text], ['image', 'first of three']);
    const groupStatus = await deliver(r, received({ chat: '120363025246125486@g.us', participant: '5511977776666@s.whatsapp.net', message: { groupStatusMessageV2: { message: { extendedTextMessage: { text: 'posted to the group' } } } } }));
    assert.deepEqual([groupStatus?.type, groupStatus?.text], ['text', 'posted to the group']);
  });

  it('records what business messages say (templates, buttons, interactive), without their buttons', async () => {
    const r = await connectedRig();
    const chat = '5511977776666@s.whatsapp.net';
    // As they arrive: encoded by the sender, decoded by Baileys.
    const wire = (message: proto.IMessage) => proto.Message.decode(proto.Message.encode(message).finish()) as unknown as Record<string, unknown>;
    const code = await deliver(r, received({ chat, message: wire({ templateMessage: { hydratedTemplate: { hydratedContentText: 'Your code is 123456', hydratedButtons: [{ index: 0, quickReplyButton: { displayText: 'Copy', id: 'c' } }] } } }) }));
    assert.deepEqual([code?.type, code?.text], ['text', 'Your code is 123456']);
    const fourRow = await deliver(r, received({ chat, message: wire({ templateMessage: { hydratedFourRowTemplate: { hydratedContentText: 'Order shipped' } } }) }));
    assert.deepEqual([fourRow?.type, fourRow?.text], ['text', 'Order shipped']);
    const buttons = await deliver(r, received({ chat, message: wire({ buttonsMessage: { contentText: 'Pick one', buttons: [{ buttonId: 'a', buttonText: { displayText: 'A' } }] } }) }));
    assert.deepEqual([buttons?.type, buttons?.text], ['text', 'Pick one']);
    const interactive = await deliver(r, received({ chat, message: wire({ interactiveMessage: { body: { text: 'Confirm your booking' }, nativeFlowMessage: { buttons: [{ name: 'quick_reply' }] } } }) }));
    assert.deepEqual([interactive?.type, interactive?.text], ['text', 'Confirm your booking']);
    const withFile = await deliver(r, received({ chat, message: wire({ templateMessage: { hydratedTemplate: { hydratedContentText: 'Your invoice', documentMessage: { mimetype: 'application/pdf', fileName: 'invoice.pdf', url: 'https://mmg.whatsapp.net/z', mediaKey: randomBytes(32) } } } }) }));
    assert.deepEqual([withFile?.type, withFile?.text, withFile?.media?.fileName, withFile?.media?.mimetype], ['document', 'Your invoice', 'invoice.pdf', 'application/pdf']);
    const titled = await deliver(r, received({ chat, message: wire({ buttonsMessage: { contentText: '', text: 'Only a title', headerType: proto.Message.ButtonsMessage.HeaderType.TEXT } }) }));
    assert.deepEqual([titled?.type, titled?.text], ['text', 'Only a title']);
    // Senders wrap buttons in a view-once envelope: the file is no single-view file.
    const enveloped = await deliver(r, received({ chat, message: wire({ viewOnceMessage: { message: { interactiveMessage: { body: { text: 'Your ticket' }, header: { hasMediaAttachment: true, imageMessage: { mimetype: 'image/jpeg', url: 'https://mmg.whatsapp.net/t', mediaKey: randomBytes(32) } } } } } }) }));
    assert.deepEqual([enveloped?.type, enveloped?.text, enveloped?.media?.viewOnce], ['image', 'Your ticket', false]);
    const empty = await deliver(r, received({ chat, message: wire({ buttonsMessage: { buttons: [{ buttonId: 'a' }] } }) }));
    assert.equal(empty, undefined, 'nothing to show: not recorded');
  });

  it('records a shared place as words with a geo: URI, and shared contacts as their vCard file', async () => {
    const r = await connectedRig();
    const chat = '5511977776666@s.whatsapp.net';
    const place = await deliver(r, received({ chat, message: { locationMessage: { degreesLatitude: -23.5505, degreesLongitude: -46.6333, name: 'Sé', address: 'Praça da Sé, São Paulo' } } }));
    assert.deepEqual([place?.type, place?.text, place?.media], ['text', 'Sé\nPraça da Sé, São Paulo\ngeo:-23.5505,-46.6333', undefined]);
    const bare = await deliver(r, received({ chat, message: { locationMessage: { degreesLatitude: 48.8584, degreesLongitude: 2.2945 } } }));
    assert.equal(bare?.text, 'geo:48.8584,2.2945');
    const live = await deliver(r, received({ chat, message: { liveLocationMessage: { degreesLatitude: 1.5, degreesLongitude: -0.25, caption: 'on my way' } } }));
    assert.deepEqual([live?.type, live?.text], ['text', 'on my way\ngeo:1.5,-0.25']);
    // Plain decimals as RFC 5870 writes them (JavaScript would write 1e-7), and no place off the Earth.
    const nearZero = await deliver(r, received({ chat, message: { locationMessage: { degreesLatitude: 0.0000001, degreesLongitude: -0 } } }));
    assert.equal(nearZero?.text, 'geo:0.0000001,0');
    for (const [lat, lng] of [[Number.NaN, 0], [91, 0], [0, Number.POSITIVE_INFINITY], [0, -180.5]]) {
      assert.equal(await deliver(r, received({ chat, message: { locationMessage: { degreesLatitude: lat, degreesLongitude: lng } } })), undefined, `${lat},${lng} is no place`);
    }

    const vcard = (name: string) => `BEGIN:VCARD\nVERSION:3.0\nFN:${name}\nTEL;type=CELL;waid=5511955554444:+55 11 95555-4444\nEND:VCARD`;
    const card = await deliver(r, received({ chat, message: { contactMessage: { displayName: 'Ana/Maria', vcard: vcard('Ana Maria') } } }));
    assert.deepEqual([card?.type, card?.text, card?.media?.mimetype, card?.media?.fileName], ['document', null, 'text/vcard', 'Ana/Maria.vcf']);
    assert.equal(Buffer.from(await card!.media!.download()).toString(), `${vcard('Ana Maria')}\r\n`);
    const several = await deliver(r, received({ chat, message: { contactsArrayMessage: { displayName: '2 contacts', contacts: [{ displayName: 'A', vcard: vcard('A') }, { displayName: 'B', vcard: vcard('B') }] } } }));
    assert.deepEqual([several?.type, several?.media?.fileName], ['document', '2 contacts.vcf']);
    assert.equal(Buffer.from(await several!.media!.download()).toString(), `${vcard('A')}\r\n${vcard('B')}\r\n`);
    const noCard = await deliver(r, received({ chat, message: { contactMessage: { displayName: 'empty' } } }));
    assert.equal(noCard, undefined, 'a contact without a card shows nothing: not recorded');
  });

  it('describes audio, video and sticker media', async () => {
    const r = await connectedRig();
    const chat = '5511977776666@s.whatsapp.net';
    const voice = await deliver(r, received({ chat, message: { audioMessage: { mimetype: 'audio/ogg; codecs=opus', seconds: 7, ptt: true } } }));
    assert.deepEqual([voice?.type, voice?.media?.voiceNote, voice?.media?.seconds], ['audio', true, 7]);
    const video = await deliver(r, received({ chat, message: { videoMessage: { mimetype: 'video/mp4', seconds: 12, caption: 'clip' } } }));
    assert.deepEqual([video?.type, video?.text, video?.media?.seconds], ['video', 'clip', 12]);
    const sticker = await deliver(r, received({ chat, message: { stickerMessage: { mimetype: 'image/webp' } } }));
    assert.deepEqual([sticker?.type, sticker?.media?.mimetype], ['sticker', 'image/webp']);
  });

  it('flags own messages from the phone, and fromApi only for our sends', async () => {
    const r = await connectedRig();
    const chat = '5511977776666@s.whatsapp.net';
    const fromPhone = await deliver(r, received({ chat, fromMe: true, message: { conversation: 'typed on the phone' } }));
    assert.deepEqual([fromPhone?.fromMe, fromPhone?.fromApi, fromPhone?.phone], [true, false, '5511977776666']);
    const ours = mid();
    r.ownSends.add(ours);
    const api = await deliver(r, received({ chat, fromMe: true, id: ours, message: { conversation: 'sent by the API' } }));
    assert.deepEqual([api?.fromMe, api?.fromApi], [true, true]);
    const inGroup = await deliver(r, received({ chat: '120363025246125486@g.us', fromMe: true, message: { conversation: 'me in a group' } }));
    assert.equal(inGroup?.phone, MY_PHONE);
    // Typed on our phone in a LID chat: Baileys may give our own number as the chat's alternative
    // address (the sender's side of the stanza comes first). The chat's phone is then unknown.
    const lidChat = await deliver(r, received({ chat: '111122223333444@lid', chatAlt: `${MY_PHONE}@s.whatsapp.net`, fromMe: true, message: { conversation: 'to a LID chat' } }));
    assert.deepEqual([lidChat?.phone, lidChat?.chatLid], [null, '111122223333444@lid']);
    const pnChat = await deliver(r, received({ chat, chatAlt: `${MY_LID}@lid`, fromMe: true, message: { conversation: 'to a PN chat' } }));
    assert.deepEqual([pnChat?.phone, pnChat?.chatLid], ['5511977776666', null]);
    const theirs = await deliver(r, received({ chat: '111122223333444@lid', chatAlt: '5511977776666@s.whatsapp.net', fromMe: true, message: { conversation: 'alt is theirs' } }));
    assert.equal(theirs?.phone, '5511977776666');
    // Notes to self: the chat is ours, and so is its phone.
    const toSelf = await deliver(r, received({ chat: `${MY_LID}@lid`, chatAlt: `${MY_PHONE}@s.whatsapp.net`, fromMe: true, message: { conversation: 'note to self' } }));
    assert.deepEqual([toSelf?.phone, toSelf?.chatLid], [MY_PHONE, `${MY_LID}@lid`]);
  });

  it('ignores history, reactions and stubs; records what arrived while offline (append), held until login like Baileys', async () => {
    const r = await connectedRig();
    const chat = '5511977776666@s.whatsapp.net';
    r.sock().emit('messaging-history.set', { chats: [], contacts: [], messages: [received({ chat, message: { conversation: 'history' } })], isLatest: true });
    assert.equal(await deliver(r, received({ chat, message: { reactionMessage: { text: '👍', key: { id: 'X' } } } })), undefined);
    const stub = { ...received({ chat: '120363025246125486@g.us', participant: '5511977776666@s.whatsapp.net', message: {} }), message: undefined, messageStubType: 27 };
    assert.equal(await deliver(r, stub, 'append'), undefined, 'a group notification stub');
    assert.equal(r.listener.messages.length, 0);

    await r.sock().drop(DisconnectReason.connectionLost);
    await until(() => r.network.sockets.length === 3, 'reconnect');
    // Baileys upserts a message the server held while the socket was away as `append`
    // (messages-recv.js: `node.attrs.offline ? 'append' : 'notify'`).
    const offline = received({ chat, message: { conversation: 'arrived while offline' } });
    r.sock().emit('messages.upsert', { messages: [offline], type: 'append' });
    await settled();
    assert.equal(r.listener.messages.length, 0, 'held in Baileys\' buffer until the offline notifications are handled');
    r.sock().open();
    await until(() => r.listener.messages.some((m) => m.messageId === offline.key.id), 'flushed on login');
  });

  it('autoReadMessages and autoReadStatus mark messages read; status broadcasts are not relayed', async () => {
    const r = await connectedRig();
    const chat = '5511977776666@s.whatsapp.net';
    const status = received({ chat: 'status@broadcast', participant: '5511977776666@s.whatsapp.net', message: { conversation: 'my status' } });
    r.sock().emit('messages.upsert', { messages: [status], type: 'notify' });
    await deliver(r, received({ chat, message: { conversation: 'unread' } }));
    await settled();
    assert.equal(r.network.reads.length, 0);
    assert.ok(!r.listener.messages.some((m) => m.messageId === status.key.id));

    r.settings.autoReadMessages = true;
    r.settings.autoReadStatus = true;
    const msg = received({ chat, message: { conversation: 'read me' } });
    await deliver(r, msg);
    r.sock().emit('messages.upsert', { messages: [status], type: 'notify' });
    await until(() => r.network.reads.length === 2, 'two reads');
    assert.deepEqual(r.network.reads.map((k) => k.id).sort(), [msg.key.id, status.key.id].sort());
  });

  describe('media download', () => {
    let server: Awaited<ReturnType<typeof mediaServer>>;
    const files = new Map<string, Buffer | 'hang'>();
    before(async () => {
      server = await mediaServer((path) => files.get(path));
    });
    after(() => server.close());

    async function encryptedImage(path: string, plain: Buffer): Promise<proto.Message.IImageMessage> {
      const enc = await encryptedStream(plain, 'image');
      files.set(path, await readFile(enc.encFilePath));
      await unlink(enc.encFilePath);
      return { url: `${server.url}${path}`, mediaKey: enc.mediaKey, fileSha256: enc.fileSha256, fileEncSha256: enc.fileEncSha256, fileLength: plain.length, mimetype: 'image/jpeg' };
    }

    it('downloads and decrypts inbound media', async () => {
      const r = await connectedRig();
      const plain = randomBytes(5000);
      const m = await deliver(r, received({ chat: '5511977776666@s.whatsapp.net', message: { imageMessage: await encryptedImage('/ok', plain) } }));
      assert.deepEqual(Buffer.from(await m!.media!.download()), plain);
      assert.equal(r.network.reuploads, 0);
    });

    it('asks the phone to re-upload once when the link is gone, then downloads', async () => {
      const r = await connectedRig();
      const plain = randomBytes(3000);
      const image = await encryptedImage('/fresh', plain);
      r.network.reupload = async (message) => ({ ...message, message: { imageMessage: { ...message.message!.imageMessage, url: image.url } } });
      const m = await deliver(r, received({ chat: '5511977776666@s.whatsapp.net', message: { imageMessage: { ...image, url: `${server.url}/expired` } } }));
      assert.deepEqual(Buffer.from(await m!.media!.download()), plain);
      assert.equal(r.network.reuploads, 1);
    });

    it('asks a round video note (ptv) to be re-uploaded as the video it is', async () => {
      const r = await connectedRig();
      const plain = randomBytes(3000);
      const enc = await encryptedStream(plain, 'ptv');
      files.set('/ptv', await readFile(enc.encFilePath));
      await unlink(enc.encFilePath);
      const note = { url: `${server.url}/expired`, mediaKey: enc.mediaKey, fileSha256: enc.fileSha256, fileEncSha256: enc.fileEncSha256, fileLength: plain.length, mimetype: 'video/mp4', seconds: 3 };
      r.network.reupload = async (message) => ({ ...message, message: { videoMessage: { ...message.message!.videoMessage, url: `${server.url}/ptv` } } });
      const m = await deliver(r, received({ chat: '5511977776666@s.whatsapp.net', message: { ptvMessage: note } }));
      assert.equal(m?.type, 'video');
      assert.deepEqual(Buffer.from(await m!.media!.download()), plain);
      assert.equal(r.network.reuploads, 1);
    });

    it('fails when the media stays unavailable, without leaking the URL', async () => {
      const r = await connectedRig();
      const m = await deliver(r, received({ chat: '5511977776666@s.whatsapp.net', message: { imageMessage: { ...(await encryptedImage('/x', randomBytes(10))), url: `${server.url}/expired?token=SECRET` } } }));
      await assert.rejects(m!.media!.download(), (err: Error) => /media unavailable/.test(err.message) && !err.message.includes('SECRET'));
      assert.equal(r.network.reuploads, 1);
    });

    it("fetches media only from WhatsApp's media hosts by default: a sender's URL to anywhere else is never requested", async () => {
      const r = await connectedRig({ mediaUrlAllowed: undefined });
      const requested: string[] = [];
      const internal = await mediaServer((path) => void requested.push(path));
      try {
        const image = await encryptedImage('/elsewhere', randomBytes(10));
        r.network.reupload = async (message) => message; // the phone sends the same link again
        const m = await deliver(r, received({ chat: '5511977776666@s.whatsapp.net', message: { imageMessage: { ...image, url: `${internal.url}/elsewhere` } } }));
        await assert.rejects(m!.media!.download(), /not on a WhatsApp media host/);
        assert.deepEqual(requested, []);
      } finally {
        await internal.close();
      }
      assert.ok(isWhatsAppMediaUrl(new URL('https://mmg.whatsapp.net/v/t62/abc?ccb=1')));
      for (const url of ['http://mmg.whatsapp.net/x', 'https://mmg.whatsapp.net:8443/x', 'https://169.254.169.254/latest', 'https://whatsapp.net.evil.example/x', 'https://evilwhatsapp.net/x']) {
        assert.ok(!isWhatsAppMediaUrl(new URL(url)), url);
      }
    });

    it('gives up on a download that stalls', async () => {
      const r = await connectedRig({ mediaDownloadTimeoutMs: 100 });
      files.set('/stall', 'hang');
      const image = await encryptedImage('/later', randomBytes(10));
      const m = await deliver(r, received({ chat: '5511977776666@s.whatsapp.net', message: { imageMessage: { ...image, url: `${server.url}/stall` } } }));
      await assert.rejects(m!.media!.download(), /timed out/);
    });
  });
});

describe('baileys driver: presence and calls', () => {
  it('reports presence with the phone only for PN JIDs', async () => {
    const r = await connectedRig();
    r.sock().emit('presence.update', { id: '5511977776666@s.whatsapp.net', presences: { '5511977776666@s.whatsapp.net': { lastKnownPresence: 'composing' } } });
    r.sock().emit('presence.update', { id: '111122223333444@lid', presences: { '111122223333444@lid': { lastKnownPresence: 'available' } } });
    await until(() => r.listener.presences.length === 2, 'presences');
    assert.deepEqual(r.listener.presences, [
      { phone: '5511977776666', chatLid: null, presence: 'composing' },
      { phone: null, chatLid: '111122223333444@lid', presence: 'available' },
    ]);
  });

  it('subscribes to the presence of every contact of a private chat, once a socket; not to groups; group typing is not reported', async () => {
    const r = await connectedRig();
    const contact = '5511977776666@s.whatsapp.net';
    await deliver(r, received({ chat: contact, message: { conversation: 'hi' } }));
    await deliver(r, received({ chat: contact, message: { conversation: 'again' } }));
    await deliver(r, received({ chat: '120363025246125486@g.us', participant: '5511955554444@s.whatsapp.net', message: { conversation: 'in a group' } }));
    await r.driver.send(text(mid(), phoneTo()));
    r.network.groups.set('120363000000000002@g.us', group('120363000000000002@g.us', false, null));
    await r.driver.send(text(mid(), { kind: 'group', groupId: '120363000000000002' }));
    await until(() => r.network.presenceSubscriptions.length === 2, 'subscriptions');
    assert.deepEqual(r.network.presenceSubscriptions, [contact, '5511912345678@s.whatsapp.net']);

    // A subscription ends with its socket: the next one asks again.
    await r.sock().drop(DisconnectReason.connectionLost);
    await until(() => r.network.sockets.length === 3, 'reconnect');
    r.sock().open();
    await until(() => r.listener.state === 'connected', 'connected');
    await deliver(r, received({ chat: contact, message: { conversation: 'after the reconnect' } }));
    await until(() => r.network.presenceSubscriptions.length === 3, 'subscribed again');

    r.sock().emit('presence.update', { id: '120363025246125486@g.us', presences: { '5511955554444@s.whatsapp.net': { lastKnownPresence: 'composing' } } });
    r.sock().emit('presence.update', { id: contact, presences: { [contact]: { lastKnownPresence: 'composing' } } });
    await until(() => r.listener.presences.length === 1, 'presence');
    await settled();
    assert.deepEqual(r.listener.presences, [{ phone: '5511977776666', chatLid: null, presence: 'composing' }]);
  });

  it('rejects incoming calls when autoRejectCalls is on', async () => {
    const r = await connectedRig();
    const call = (id: string, status: 'offer' | 'terminate') => ({ chatId: '5511977776666@s.whatsapp.net', from: '111122223333444@lid', callerPn: '5511977776666@s.whatsapp.net', id, date: new Date(), status, offline: false });
    r.sock().emit('call', [call('CALL1', 'offer')]);
    await until(() => r.listener.calls.length === 1, 'call reported');
    assert.equal(r.network.rejectedCalls.length, 0);
    r.settings.autoRejectCalls = true;
    r.sock().emit('call', [call('CALL2', 'offer')]);
    r.sock().emit('call', [call('CALL2', 'terminate')]);
    await until(() => r.listener.calls.length === 2, 'second call');
    await settled();
    assert.deepEqual(r.network.rejectedCalls, [{ id: 'CALL2', from: '111122223333444@lid' }]);
    assert.deepEqual(r.listener.calls[1], { id: 'CALL2', from: '5511977776666@s.whatsapp.net' });
  });
});

// ── helpers ──────────────────────────────────────────────────────────────────

function phoneTo(): OutboundMessage['to'] {
  return { kind: 'phone', phone: '5511912345678' };
}

function mediaTypeOf(type: OutboundMessage['type']): 'image' | 'video' | 'audio' | 'document' | 'sticker' {
  return type as 'image' | 'video' | 'audio' | 'document' | 'sticker';
}

function pick(m: InboundMessage | undefined) {
  assert.ok(m, 'message reported');
  const { from, phone, chatLid, participant, fromMe, fromApi, name, type, text, isGroup } = m;
  return { from, phone, chatLid, participant, fromMe, fromApi, name, type, text, isGroup };
}

function group(id: string, announce: boolean, myRole: 'admin' | null): GroupMetadata {
  return {
    id,
    subject: 'g',
    owner: undefined,
    announce,
    participants: [
      { id: `${MY_LID}@lid`, phoneNumber: `${MY_PHONE}@s.whatsapp.net`, admin: myRole },
      { id: '222233334444555@lid', admin: 'superadmin' },
    ],
  };
}

async function collect(stream: AsyncIterable<Buffer>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return Buffer.concat(chunks);
}


describe('NETWORK_DRIVER=baileys (driverFactoryFor)', () => {
  it('loads the Baileys driver with the process logger, so LOG_LEVEL and the logger\'s fields apply to it', async () => {
    const bindings: Record<string, unknown>[] = [];
    const processLog = Object.assign(Object.create(log) as typeof log, {
      child: (b: Record<string, unknown>, o?: Record<string, unknown>) => (bindings.push(b), log.child(b, o)),
    });
    const factory = await driverFactoryFor({ networkDriver: 'baileys', sandboxReceiptDelayMs: 0 }, { db, log: processLog });
    factory({ instanceId: INSTANCE, auth: new MemoryAuthStore(), listener: new Listener(), isOwnSend: async () => false, settings: () => defaultSettings() });
    assert.ok(bindings.some((b) => b.driver === 'baileys' && b.instanceId === INSTANCE), 'the driver logs under the logger it was given');
  });
});

/** A local media host: serves what `lookup` returns for a path, 404 otherwise; 'hang' never answers. */
async function mediaServer(lookup: (path: string) => Buffer | 'hang' | undefined): Promise<{ url: string; close(): Promise<void> }> {
  const server: Server = createServer((req, res) => {
    const body = lookup(new URL(req.url!, 'http://x').pathname);
    if (body === 'hang') return void res.writeHead(200).write(Buffer.alloc(16));
    if (!body) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
