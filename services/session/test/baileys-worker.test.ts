// The Baileys driver inside the real session worker (PostgreSQL, in-process bus, media archive),
// with the stand-in socket as WhatsApp: what a client sees on the instance row, in the records
// and in the events — QR on the instance, credentials sealed in auth_state, sends with the reserved
// id through the queue, receipts, received media archived or reported unavailable, view-once media
// never archived, reset clearing the stored session, and a delete unlinking the device from the
// phone (embedded, and over the bus as in cluster mode).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { readFile, unlink } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import type { Knex } from 'knex';
import type { Problem } from '@switchboard/core';
import { DisconnectReason, encryptedStream, proto, type WAMessage } from '@whiskeysockets/baileys';
import type { LocalSessionRuntime } from '../src/local-runtime.ts';
import { RemoteSessionRuntime } from '../src/remote-runtime.ts';
import { serveSessionRpc } from '../src/rpc-server.ts';
import { createBaileysDriver } from '../src/drivers/baileys/index.ts';
import { StandInNetwork } from '../src/drivers/baileys/stand-in-socket.ts';
import { enqueueSend, eventsOf, instanceRow, itemStatus, openEnv, until, type Env } from './harness.ts';

const MY_PHONE = '5511900002222';
const PEER = '5511977776666';

describe('baileys driver in the session worker', function () {
  this.timeout(20_000);
  let env: Env;
  let network: StandInNetwork;
  let runtime: LocalSessionRuntime;
  let instanceId: string;
  let media: { url: string; files: Map<string, Buffer>; close(): Promise<void> };

  before(async () => {
    env = await openEnv();
    media = await mediaServer();
  });
  after(async () => {
    await media?.close();
    await env?.close();
  });
  beforeEach(async () => {
    network = new StandInNetwork(env.log, { receiptDelayMs: 5 });
    const driverFactory = createBaileysDriver({ db: env.db, log: env.log, socketFactory: network.factory, backoff: { baseMs: 5, maxMs: 20, jitter: 0.2 }, mediaDownloadTimeoutMs: 2_000, mediaUrlAllowed: (url) => url.hostname === '127.0.0.1' });
    runtime = env.runtime({ driverFactory });
    instanceId = await env.createInstance();
  });
  afterEach(async () => runtime.close());

  const row = () => instanceRow(env.db, instanceId);

  const connect = () => pairAndConnect(env, runtime, network, instanceId);

  it('shows the QR on the instance, connects as the phone and keeps credentials sealed; reset clears them', async () => {
    await runtime.start(instanceId);
    await until(() => network.sockets.length === 1, 'socket');
    const qr = network.current.showQr();
    await until(async () => (await row()).qr_code === qr, 'QR on the instance');
    assert.equal((await row()).state, 'awaiting_scan');

    network.current.completePairing(MY_PHONE);
    await until(() => network.sockets.length === 2, 'restart after pairing');
    network.current.open();
    await until(async () => (await row()).state === 'connected', 'connected');
    assert.deepEqual([(await row()).phone, (await row()).qr_code], [MY_PHONE, null]);

    const sealed = await env.db('auth_state').where({ instance_id: instanceId, category: 'creds' }).first();
    assert.ok(sealed, 'credentials stored in auth_state');
    assert.ok(!Buffer.from(sealed.value_sealed, 'base64').toString('latin1').includes(MY_PHONE), 'sealed at rest');
    assert.ok(env.crypto.open(sealed.value_sealed).includes(MY_PHONE), 'opened with ENCRYPTION_KEY');

    await runtime.reset(instanceId);
    await until(async () => (await row()).state === 'logged_out' || (await row()).state === 'starting', 'reset recorded');
    assert.deepEqual(network.logouts, [`${MY_PHONE}:12@s.whatsapp.net`], 'the device was unlinked');
    const left = await env.db('auth_state').where({ instance_id: instanceId });
    assert.ok(!left.some((r) => r.category === 'creds' && env.crypto.open(r.value_sealed).includes(MY_PHONE)), 'old credentials gone');
  });

  it('deleting a connected instance unlinks the device from the phone, then forgets its credentials and records', async () => {
    await connect();
    const removed = await runtime.remove(instanceId, async () => Number(await env.db('instances').where({ id: instanceId }).delete()) > 0);
    assert.equal(removed, true);
    assert.deepEqual(network.logouts, [`${MY_PHONE}:12@s.whatsapp.net`], 'the phone no longer lists the device');
    assert.equal(await env.db('instances').where({ id: instanceId }).first(), undefined);
    assert.deepEqual(await env.db('auth_state').where({ instance_id: instanceId }), []);
    assert.equal(runtime.worker(instanceId), undefined);
  });

  it('deleting a paused instance asks nothing of the network', async () => {
    await connect();
    await runtime.stop(instanceId);
    assert.equal(await runtime.remove(instanceId, async () => Number(await env.db('instances').where({ id: instanceId }).delete()) > 0), true);
    assert.deepEqual(network.logouts, []);
  });

  it('sends a queued text with the reserved id; receipts move the item to read; the echo is fromApi', async () => {
    await connect();
    const send = await enqueueSend(env, instanceId, { phone: PEER, text: 'hello from the queue' });
    await until(() => network.relayed.length === 1, 'relayed');
    assert.deepEqual([network.relayed[0]!.messageId, network.relayed[0]!.jid], [send.messengerId, `${PEER}@s.whatsapp.net`]);
    await until(async () => (await itemStatus(env.db, send.id)) === 'sent', 'sent');
    const S = proto.WebMessageInfo.Status;
    for (const status of [S.DELIVERY_ACK, S.READ]) {
      network.current.emit('messages.update', [{ key: { remoteJid: `${PEER}@s.whatsapp.net`, fromMe: true, id: send.messengerId }, update: { status } }]);
    }
    await until(async () => (await itemStatus(env.db, send.id)) === 'read', 'read');
    const statuses = (await eventsOf(env.db, instanceId, 'message.status')).map((e) => e.data.status);
    assert.deepEqual(statuses, ['sent', 'delivered', 'read']);
    const echo = await env.db('incoming').where({ instance_id: instanceId, message_id: send.messengerId }).first();
    assert.deepEqual([echo?.from_me, echo?.from_api], [true, true]);
  });

  it('sends a queued voice note with the length and waveform the gateway worked out', async () => {
    await connect();
    const audio = randomBytes(600);
    const waveform = Uint8Array.from({ length: 64 }, (_, i) => 100 - i);
    const { id: mediaId } = await env.media.store({ instanceId, direction: 'outbound', mimetype: 'audio/ogg; codecs=opus', fileName: null, seconds: 4, voiceNote: true, bytes: audio });
    const payload = { mimetype: 'audio/ogg; codecs=opus', ptt: true, seconds: 4, waveform: Buffer.from(waveform).toString('base64'), mediaId };
    const send = await enqueueSend(env, instanceId, { phone: PEER, type: 'audio', payload });
    await until(() => network.relayed.some((r) => r.messageId === send.messengerId), 'relayed');
    const note = network.relayed.find((r) => r.messageId === send.messengerId)!.message.audioMessage!;
    assert.deepEqual([note.ptt, note.seconds, Buffer.from(note.waveform!)], [true, 4, Buffer.from(waveform)]);
  });

  it('fails a send the server refuses after it left the socket (an error acknowledgement)', async () => {
    await connect();
    const send = await enqueueSend(env, instanceId, { phone: PEER, text: 'refused by the server' });
    await until(async () => (await itemStatus(env.db, send.id)) === 'sent', 'sent');
    network.current.emit('messages.update', [{ key: { remoteJid: `${PEER}@s.whatsapp.net`, fromMe: true, id: send.messengerId }, update: { status: proto.WebMessageInfo.Status.ERROR, messageStubParameters: ['463'] } }]);
    await until(async () => (await itemStatus(env.db, send.id)) === 'failed', 'failed');
    const outcome = (await eventsOf(env.db, instanceId)).filter((e) => e.data.messageId === send.id).map((e) => (e.type === 'message.status' ? `status:${e.data.status}` : e.type));
    assert.deepEqual(outcome.sort(), ['message.failed', 'message.sent', 'status:failed', 'status:sent']); // one transaction's events share their millisecond
  });

  it('archives received media, reports unavailable media with url null and an error, never archives view-once', async () => {
    await connect();
    const plain = randomBytes(2_000);
    const image = await encryptedImage(media, '/ok', plain);
    const ok = inbound({ imageMessage: { ...image, caption: 'a photo' } });
    const gone = inbound({ imageMessage: { ...image, url: `${media.url}/expired` } });
    const once = inbound({ viewOnceMessageV2: { message: { imageMessage: { ...image, viewOnce: true } } } });
    network.current.emit('messages.upsert', { messages: [ok, gone, once], type: 'notify' });
    await until(async () => (await eventsOf(env.db, instanceId, 'message.received')).length === 3, 'three received events', 10_000);

    const received = await eventsOf(env.db, instanceId, 'message.received');
    const data = (m: WAMessage) => received.find((e) => e.data.messageId === m.key.id)!.data;
    assert.deepEqual([data(ok).phone, data(ok).type, data(ok).text, data(ok).media.downloadAvailable], [PEER, 'image', 'a photo', true]);
    const mediaId = decodeURIComponent(new URL(data(ok).media.url).pathname.split('/').pop()!);
    assert.deepEqual(Buffer.from(await env.media.read(mediaId)), plain);

    assert.deepEqual([data(gone).media.url, data(gone).media.downloadAvailable], [null, false]);
    assert.match(data(gone).media.error, /media unavailable/);
    assert.equal(network.reuploads, 1, 'one re-upload request, for the expired link only');

    assert.deepEqual([data(once).media.url, data(once).media.downloadAvailable], [null, false]);
    const archived = await env.db('media').where({ instance_id: instanceId }).count({ n: '*' }).first();
    assert.equal(Number(archived!.n), 1, 'only the ordinary image is archived');
  });

  it('archives a shared contact as its vCard file, served like any received document', async () => {
    await connect();
    const vcard = 'BEGIN:VCARD\nVERSION:3.0\nFN:Ana\nTEL;type=CELL;waid=5511955554444:+55 11 95555-4444\nEND:VCARD';
    // The sender names the file: a path separator or a right-to-left override (showing `fdp.vcf`
    // for `fcv.pdf`) does not reach whoever saves it by that name.
    const card = inbound({ contactMessage: { displayName: 'Ana/\u202Efdp', vcard } });
    network.current.emit('messages.upsert', { messages: [card], type: 'notify' });
    await until(async () => (await eventsOf(env.db, instanceId, 'message.received')).some((e) => e.data.messageId === card.key.id), 'received', 10_000);
    const data = (await eventsOf(env.db, instanceId, 'message.received')).find((e) => e.data.messageId === card.key.id)!.data;
    assert.deepEqual([data.type, data.media.mimetype, data.media.fileName, data.media.downloadAvailable], ['document', 'text/vcard', 'Ana_fdp.vcf', true]);
    const mediaId = decodeURIComponent(new URL(data.media.url).pathname.split('/').pop()!);
    assert.equal(Buffer.from(await env.media.read(mediaId)).toString(), `${vcard}\r\n`);
  });
});

describe('baileys driver: received messages and receipts under faults (the network sends none again)', function () {
  this.timeout(20_000);
  let env: Env;
  before(async () => (env = await openEnv()));
  after(() => env?.close());

  const mediaOnLoopback = { mediaDownloadTimeoutMs: 5_000, mediaUrlAllowed: (url: URL) => url.hostname === '127.0.0.1' };

  /** A session paired and connected on a stand-in network; the test closes its runtime. */
  async function connectedSession(): Promise<{ network: StandInNetwork; runtime: LocalSessionRuntime; instanceId: string }> {
    const network = new StandInNetwork(env.log, { receiptDelayMs: 5 });
    const driverFactory = createBaileysDriver({ db: env.db, log: env.log, socketFactory: network.factory, backoff: { baseMs: 5, maxMs: 20, jitter: 0.2 }, ...mediaOnLoopback });
    const runtime = env.runtime({ driverFactory });
    const instanceId = await env.createInstance();
    await pairAndConnect(env, runtime, network, instanceId);
    return { network, runtime, instanceId };
  }

  /** Runs `trigger` while `lock` holds what its write needs, then ends the connection of the
   *  statement that waits for it, as a database restart or failover does. The terminate waits
   *  for that backend to exit (its second argument), so the connection's end has reached the pool
   *  before the test goes on: else the pool could hand the dying connection, its statement's
   *  error already answered, to the test's next query (seen once: "Connection terminated"). */
  async function duringDatabaseRestart(lock: (holder: Knex.Transaction) => Promise<unknown>, trigger: () => Promise<unknown> | void): Promise<void> {
    const holder = await env.db.transaction();
    try {
      await lock(holder);
      await trigger();
      await until(async () => (await env.db.raw(`select pg_terminate_backend(pid, 5000) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`)).rows.length > 0, 'the write waits');
    } finally {
      await holder.rollback();
    }
  }
  const lockTable = (table: string) => (holder: Knex.Transaction) => holder.raw(`lock table ${table} in access exclusive mode`);

  it('records a message the database could not take for a moment (a restart ended its connection)', async () => {
    const { network, runtime, instanceId } = await connectedSession();
    try {
      const message = inbound({ conversation: 'hello during a database restart' });
      await duringDatabaseRestart(lockTable('incoming'), () => network.current.emit('messages.upsert', { messages: [message], type: 'notify' }));
      await until(async () => (await env.db('incoming').where({ instance_id: instanceId, message_id: message.key.id })).length === 1, 'recorded once the database answers', 10_000);
    } finally {
      await runtime.close();
    }
  });

  it('records a receipt the database could not take for a moment: the network sends none again', async () => {
    const { network, runtime, instanceId } = await connectedSession();
    try {
      const send = await enqueueSend(env, instanceId, { phone: PEER, text: 'delivered during a database restart' });
      await until(async () => (await itemStatus(env.db, send.id)) === 'sent', 'sent');
      const delivered = { key: { remoteJid: `${PEER}@s.whatsapp.net`, fromMe: true, id: send.messengerId }, update: { status: proto.WebMessageInfo.Status.DELIVERY_ACK } };
      await duringDatabaseRestart((holder) => holder('send_items').where({ id: send.id }).forUpdate().first(), () => network.current.emit('messages.update', [delivered]));
      await until(async () => (await itemStatus(env.db, send.id)) === 'delivered', 'recorded once the database answers', 10_000);
      const statuses = (await eventsOf(env.db, instanceId, 'message.status')).map((e) => e.data.status);
      assert.deepEqual(statuses, ['sent', 'delivered']);
    } finally {
      await runtime.close();
    }
  });

  it('records a connection the database could not take for a moment, and sends meanwhile', async () => {
    const { network, runtime, instanceId } = await connectedSession();
    try {
      const sockets = network.sockets.length;
      await network.current.drop(DisconnectReason.connectionLost);
      await until(() => network.sockets.length === sockets + 1, 'a new socket');
      await until(async () => (await instanceRow(env.db, instanceId)).state !== 'connected', 'the drop is recorded');
      await duringDatabaseRestart(lockTable('instances'), () => network.current.open());
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'connected is recorded once the database answers', 10_000);
      const send = await enqueueSend(env, instanceId, { phone: PEER, text: 'after the reconnect' });
      await until(async () => (await itemStatus(env.db, send.id)) === 'sent', 'the queue is consumed', 10_000);
    } finally {
      await runtime.close();
    }
  });

  it('records the echo of an own send that the database could not take for a moment', async () => {
    const { network, runtime, instanceId } = await connectedSession();
    try {
      let send: Awaited<ReturnType<typeof enqueueSend>> | undefined;
      await duringDatabaseRestart(lockTable('incoming'), async () => {
        send = await enqueueSend(env, instanceId, { phone: PEER, text: 'echoed during a database restart' });
        await until(() => network.relayed.length === 1, 'relayed');
      });
      await until(async () => (await env.db('incoming').where({ instance_id: instanceId, message_id: send!.messengerId, from_api: true })).length === 1, 'the echo is recorded once the database answers', 10_000);
    } finally {
      await runtime.close();
    }
  });

  it('keeps the file of a received message whose media row the database could not take for a moment', async () => {
    const files = await mediaServer();
    const { network, runtime, instanceId } = await connectedSession();
    try {
      const plain = randomBytes(2_000);
      const photo = inbound({ imageMessage: { ...(await encryptedImage(files, '/photo', plain)), caption: 'during a restart' } });
      await duringDatabaseRestart(lockTable('media'), () => network.current.emit('messages.upsert', { messages: [photo], type: 'notify' }));
      const receivedEvent = async () => (await eventsOf(env.db, instanceId, 'message.received')).find((e) => e.data.messageId === photo.key.id);
      await until(async () => (await receivedEvent()) !== undefined, 'recorded once the database answers', 10_000);
      const received = (await receivedEvent())!;
      assert.deepEqual([received.data.media.downloadAvailable, received.data.media.error], [true, undefined]);
      const mediaId = decodeURIComponent(new URL(received.data.media.url).pathname.split('/').pop()!);
      assert.deepEqual(Buffer.from(await env.media.read(mediaId)), plain);
    } finally {
      await runtime.close();
      await files.close();
    }
  });

  /** The session's socket drops; resolves with the next socket once it is back ("open") but
   *  still holding what the server hands over from offline, as Baileys does. */
  async function reconnectedHoldingEvents(network: StandInNetwork, instanceId: string): Promise<StandInNetwork['current']> {
    const sockets = network.sockets.length;
    await network.current.drop(DisconnectReason.connectionLost);
    await until(() => network.sockets.length === sockets + 1, 'a new socket');
    const socket = network.current;
    await new Promise((resolve) => setTimeout(resolve, 20)); // its first tick: logged in, it buffers
    socket.emit('connection.update', { connection: 'open' }); // CB:success; the offline hand-over follows
    await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'connected again');
    return socket;
  }

  it('records what Baileys held back from an offline hand-over when the socket drops, or the session stops, before it ends', async () => {
    const { network, runtime, instanceId } = await connectedSession();
    const recorded = async (m: WAMessage) => (await env.db('incoming').where({ instance_id: instanceId, message_id: m.key.id })).length === 1;
    try {
      const send = await enqueueSend(env, instanceId, { phone: PEER, text: 'read while we were away' });
      await until(async () => (await itemStatus(env.db, send.id)) === 'sent', 'sent');

      const dropped = await reconnectedHoldingEvents(network, instanceId);
      const whileAway = inbound({ conversation: 'sent while the session was offline' });
      dropped.emit('messages.upsert', { messages: [whileAway], type: 'append' }); // acknowledged, held
      dropped.emit('messages.update', [{ key: { remoteJid: `${PEER}@s.whatsapp.net`, fromMe: true, id: send.messengerId }, update: { status: proto.WebMessageInfo.Status.READ } }]);
      await dropped.drop(DisconnectReason.connectionLost); // before the hand-over ended
      await until(() => recorded(whileAway), 'the held message is recorded', 10_000);
      await until(async () => (await itemStatus(env.db, send.id)) === 'read', 'the held receipt is recorded');

      const stopped = await reconnectedHoldingEvents(network, instanceId);
      const beforeStop = inbound({ conversation: 'handed over just before a disconnect' });
      stopped.emit('messages.upsert', { messages: [beforeStop], type: 'append' });
      await runtime.stop(instanceId); // POST …/disconnect, a SIGTERM or a lost owner lock
      assert.ok(await recorded(beforeStop), 'recorded before the stop finished');
    } finally {
      await runtime.close();
    }
  });

  it('records them all: the network acknowledged them and sends none again', async () => {
    // A media host that answers after 1.5 s (a slow CDN): the photo's download holds the queue.
    const slow = createServer((_req, res) => void setTimeout(() => res.writeHead(404).end(), 1500));
    await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve));
    const { network, runtime, instanceId } = await connectedSession();
    try {
      const photo = inbound({ imageMessage: { url: `http://127.0.0.1:${(slow.address() as AddressInfo).port}/photo`, mediaKey: randomBytes(32), mimetype: 'image/jpeg' } });
      const next = inbound({ conversation: 'sent right after the photo' });
      network.current.emit('messages.upsert', { messages: [photo], type: 'notify' });
      network.current.emit('messages.upsert', { messages: [next], type: 'notify' });
      await new Promise((resolve) => setTimeout(resolve, 200));
      await runtime.stop(instanceId); // POST …/disconnect while the photo still downloads
      const recorded = (await env.db('incoming').where({ instance_id: instanceId }).pluck('message_id')) as string[];
      assert.deepEqual(recorded.sort(), [photo.key.id, next.key.id].sort());
    } finally {
      await runtime.close();
      slow.closeAllConnections();
      slow.close();
    }
  });
});

describe('baileys driver through the gateway in cluster mode', function () {
  this.timeout(20_000);
  let env: Env;
  before(async () => (env = await openEnv({ nats: true })));
  after(() => env?.close());

  it('waits for the session\'s own answer (pairing_not_ready), and no code is asked of WhatsApp after it', async () => {
    const network = new StandInNetwork(env.log, { receiptDelayMs: 5 });
    const driverFactory = createBaileysDriver({ db: env.db, log: env.log, socketFactory: network.factory, backoff: { baseMs: 5, maxMs: 20, jitter: 0.2 }, pairingReadyTimeoutMs: 1_000 });
    const session = env.runtime({ driverFactory });
    const instanceId = await env.createInstance({ paused: false });
    const rpc = await serveSessionRpc(env.bus, instanceId, session);
    // Other requests keep their short limit; a pairing code gets the session's whole wait.
    const gateway = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 300 });
    try {
      await gateway.start(instanceId);
      await until(() => network.sockets.length === 1, 'socket'); // WhatsApp shows no QR: not ready to pair
      const refused = await gateway.call(instanceId, 'pairing-code', { phone: '5511900004444' }).then(() => assert.fail('resolved'), (e: unknown) => e as Problem);
      assert.deepEqual([refused.status, refused.code], [503, 'pairing_not_ready']);
      network.current.showQr(); // ready after all
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.deepEqual(network.pairingRequests, [], 'no code was asked for nobody');
    } finally {
      await rpc.stop();
      await session.close();
    }
  });

  it('the session process unlinks the device from the phone and stops before the gateway deletes the records', async () => {
    const network = new StandInNetwork(env.log, { receiptDelayMs: 5 });
    const driverFactory = createBaileysDriver({ db: env.db, log: env.log, socketFactory: network.factory, backoff: { baseMs: 5, maxMs: 20, jitter: 0.2 } });
    const instanceId = await env.createInstance();
    const host = env.runtime({ driverFactory });
    const rpc = await serveSessionRpc(env.bus, instanceId, host);
    const gateway = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 5000 });
    try {
      await pairAndConnect(env, host, network, instanceId);

      let sessionRunningAtDelete: boolean | undefined;
      const removed = await gateway.remove(instanceId, async () => {
        sessionRunningAtDelete = host.worker(instanceId) !== undefined;
        return Number(await env.db('instances').where({ id: instanceId }).delete()) > 0;
      });
      assert.equal(removed, true);
      assert.deepEqual(network.logouts, [`${MY_PHONE}:12@s.whatsapp.net`], 'the phone no longer lists the device');
      assert.equal(sessionRunningAtDelete, false, 'the session stopped before its records went');
      assert.deepEqual(await env.db('auth_state').where({ instance_id: instanceId }), []);
    } finally {
      await rpc.stop();
      await host.close();
    }
  });
});

/** start → QR → scan (515 restart) → login; returns the QR. */
async function pairAndConnect(env: Env, runtime: LocalSessionRuntime, network: StandInNetwork, instanceId: string): Promise<string> {
  const row = () => instanceRow(env.db, instanceId);
  await runtime.start(instanceId);
  await until(() => network.sockets.length === 1, 'socket');
  const qr = network.current.showQr();
  await until(async () => (await row()).state === 'awaiting_scan', 'awaiting_scan');
  network.current.completePairing(MY_PHONE);
  await until(() => network.sockets.length === 2, 'restart after pairing');
  network.current.open();
  await until(async () => (await row()).state === 'connected', 'connected');
  return qr;
}

function inbound(message: Record<string, unknown>): WAMessage {
  return {
    key: { remoteJid: `${PEER}@s.whatsapp.net`, remoteJidAlt: '111122223333444@lid', fromMe: false, id: `3A${randomBytes(9).toString('hex').toUpperCase()}` },
    message: proto.Message.fromObject(message),
    pushName: 'Ana',
    messageTimestamp: Math.floor(Date.now() / 1000),
  };
}

async function encryptedImage(server: { url: string; files: Map<string, Buffer> }, path: string, plain: Buffer): Promise<proto.Message.IImageMessage> {
  const enc = await encryptedStream(plain, 'image');
  server.files.set(path, await readFile(enc.encFilePath));
  await unlink(enc.encFilePath);
  return { url: `${server.url}${path}`, mediaKey: enc.mediaKey, fileSha256: enc.fileSha256, fileEncSha256: enc.fileEncSha256, fileLength: plain.length, mimetype: 'image/jpeg' };
}

/** A local media host: serves the files it holds, 404 for anything else. */
async function mediaServer(): Promise<{ url: string; files: Map<string, Buffer>; close(): Promise<void> }> {
  const files = new Map<string, Buffer>();
  const server: Server = createServer((req, res) => {
    const body = files.get(new URL(req.url!, 'http://x').pathname);
    if (!body) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    files,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
