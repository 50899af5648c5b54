// The session worker and the local runtime against real PostgreSQL, with the in-process bus and
// with NATS JetStream, driving the sandbox network.
import assert from 'node:assert/strict';
import { enqueueOutbox, Problem, subjects, type InboundMessage } from '@switchboard/core';
import type { LocalSessionRuntime } from '../src/local-runtime.ts';
import { InboundRecorder } from '../src/inbound.ts';
import { applyReceipt, markSent } from '../src/send-items.ts';
import { enqueueSend, eventsOf, instanceRow, itemStatus, openEnv, until, type Env } from './harness.ts';

const OK = '5511912345678';
const TERMINAL = ['sent', 'delivered', 'read', 'played', 'failed', 'uncertain', 'cancelled', 'expired'];

for (const nats of [false, true]) {
  describe(`session worker (${nats ? 'NATS JetStream' : 'in-process bus'})`, function () {
    this.timeout(20_000);
    let env: Env;
    let runtime: LocalSessionRuntime;
    let instanceId: string;

    before(async () => {
      env = await openEnv({ nats });
    });
    after(async () => {
      await env?.close();
    });
    beforeEach(async () => {
      runtime = env.runtime();
      instanceId = await env.createInstance();
    });
    afterEach(async () => {
      await runtime.close();
    });

    async function connect(phone = '5511900001111'): Promise<void> {
      await runtime.start(instanceId);
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
      await runtime.call(instanceId, 'sandbox.scan', { phone });
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'connected');
    }

    async function waitStatus(id: string, status: string): Promise<void> {
      await until(async () => (await itemStatus(env.db, id)) === status, `item ${id} → ${status}`, 8000).catch(async (e) => { throw new Error(`${e.message} (is ${await itemStatus(env.db, id)})`); });
    }

    it('start → awaiting_scan with a QR; scan → connected with connection.update events', async () => {
      await runtime.start(instanceId);
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
      const waiting = await instanceRow(env.db, instanceId);
      assert.equal(waiting.paused, false);
      assert.ok(waiting.qr_code);
      await runtime.call(instanceId, 'sandbox.scan', { phone: '5511900001111' });
      const row = await instanceRow(env.db, instanceId);
      assert.deepEqual([row.state, row.phone, row.qr_code], ['connected', '5511900001111', null]);
      const updates = (await eventsOf(env.db, instanceId, 'connection.update')).map((e) => e.data);
      assert.deepEqual(
        updates.map((d) => [d.previousState, d.state]),
        [['stopped', 'starting'], ['starting', 'awaiting_scan'], ['awaiting_scan', 'connected']],
      );
      assert.equal(updates[2].phone, '5511900001111');
      assert.ok(!JSON.stringify(updates).includes(waiting.qr_code), 'the QR is not in events');
    });

    it('each magic destination has its outcome and event; the queue continues after a drop', async () => {
      await connect();
      const ok = await enqueueSend(env, instanceId, { phone: OK, text: 'ok' });
      const rejected = await enqueueSend(env, instanceId, { phone: '5511900000000' });
      const dropped = await enqueueSend(env, instanceId, { phone: '5511900000001' });
      const unread = await enqueueSend(env, instanceId, { phone: '5511900000002' });
      const absent = await enqueueSend(env, instanceId, { phone: '5511900000004' });
      await waitStatus(ok.id, 'read');
      await waitStatus(rejected.id, 'failed');
      await waitStatus(dropped.id, 'uncertain');
      await waitStatus(unread.id, 'delivered');
      await waitStatus(absent.id, 'failed');

      const byItem = async (id: string) => (await eventsOf(env.db, instanceId)).filter((e) => e.data.messageId === id);
      const sequence = (await byItem(ok.id)).map((e) => (e.type === 'message.status' ? `status:${e.data.status}` : e.type));
      // message.sent and the `sent` status are written together (same millisecond, either order).
      assert.deepEqual([...sequence.slice(0, 2)].sort(), ['message.sent', 'status:sent']);
      assert.deepEqual(sequence.slice(2), ['status:delivered', 'status:read']);
      const sent = (await byItem(ok.id)).find((e) => e.type === 'message.sent')!.data;
      assert.deepEqual(sent, { messageId: ok.id, messengerId: ok.messengerId, phone: OK, type: 'text' });
      // A failure ends the status stream with `failed` too, written with message.failed.
      const typesOf = async (id: string) => (await byItem(id)).map((e) => (e.type === 'message.status' ? `status:${e.data.status}` : e.type)).sort();
      assert.deepEqual(await typesOf(rejected.id), ['message.failed', 'status:failed']);
      assert.deepEqual(await typesOf(absent.id), ['message.failed', 'status:failed']);
      const failedAbsent = (await byItem(absent.id)).find((e) => e.type === 'message.failed')!;
      assert.equal(failedAbsent.data.error.code, 'not_on_network');
      const failedStatus = (await byItem(absent.id)).find((e) => e.type === 'message.status')!;
      assert.deepEqual(failedStatus.data, { messageId: absent.id, messengerId: absent.messengerId, status: 'failed' });
      // An uncertain outcome has no status: whether it left is unknown.
      const [uncertain, ...more] = await byItem(dropped.id);
      assert.equal(more.length, 0);
      assert.equal(uncertain.type, 'message.uncertain');
      assert.equal(uncertain.data.reason, 'connection_lost');
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(await itemStatus(env.db, unread.id), 'delivered', '0002 never read');
      const states = (await eventsOf(env.db, instanceId, 'connection.update')).map((e) => e.data.state);
      assert.deepEqual(states.slice(-2), ['reconnecting', 'connected'], 'the drop reconnects');
      const ledger = await env.db('sandbox_ledger').where({ instance_id: instanceId }).pluck('messenger_id');
      assert.deepEqual(ledger.sort(), [ok.messengerId, dropped.messengerId, unread.messengerId].sort());
      // The echo of an API send is recorded as own and from the API.
      await until(async () => !!(await env.db('incoming').where({ instance_id: instanceId, message_id: ok.messengerId }).first()), 'echo');
      const echo = await env.db('incoming').where({ instance_id: instanceId, message_id: ok.messengerId }).first();
      assert.deepEqual([echo.from_me, echo.from_api, echo.text], [true, true, 'ok']);
    });

    it('a receipt that skips a step records the steps it implies, so the status stream has no gap', async () => {
      await connect();
      const item = await enqueueSend(env, instanceId, { phone: '5511900000002' }); // the network delivers, nobody reads
      await waitStatus(item.id, 'delivered');
      assert.equal(await env.db.transaction((trx) => applyReceipt(trx, instanceId, item.messengerId, 'played')), true);
      // Events of one transaction share their millisecond, so the listing does not order them.
      const statuses = (await eventsOf(env.db, instanceId, 'message.status')).filter((e) => e.data.messageId === item.id).map((e) => e.data.status);
      assert.deepEqual(statuses.sort(), ['delivered', 'played', 'read', 'sent']);
    });

    it('receipts only move forward; failed is terminal', async () => {
      await connect();
      const a = await enqueueSend(env, instanceId, { phone: OK });
      await waitStatus(a.id, 'read');
      const before = (await eventsOf(env.db, instanceId, 'message.status')).length;
      assert.equal(await env.db.transaction((trx) => applyReceipt(trx, instanceId, a.messengerId, 'delivered')), false);
      assert.equal(await env.db.transaction((trx) => applyReceipt(trx, instanceId, a.messengerId, 'sent')), false);
      assert.equal(await env.db.transaction((trx) => applyReceipt(trx, instanceId, a.messengerId, 'played')), true);
      assert.equal(await itemStatus(env.db, a.id), 'played');
      assert.equal((await eventsOf(env.db, instanceId, 'message.status')).length, before + 1);
      const f = await enqueueSend(env, instanceId, { phone: '5511900000000' });
      await waitStatus(f.id, 'failed');
      assert.equal(await env.db.transaction((trx) => applyReceipt(trx, instanceId, f.messengerId, 'read')), false);
      assert.equal(await itemStatus(env.db, f.id), 'failed');
      // After the network took a message, a failure receipt (one a restarted driver no longer
      // knows to ignore) would move it back: it changes nothing.
      const taken = await enqueueSend(env, instanceId, { phone: '5511900000002' });
      await waitStatus(taken.id, 'delivered');
      assert.equal(await env.db.transaction((trx) => applyReceipt(trx, instanceId, taken.messengerId, 'failed')), false);
      assert.equal(await itemStatus(env.db, taken.id), 'delivered');
      // Before it did, a failure the network reports is an outcome on both streams, like a refused send.
      const late = await enqueueSend(env, instanceId, { phone: '5511900000001' });
      await waitStatus(late.id, 'uncertain');
      assert.equal(await env.db.transaction((trx) => applyReceipt(trx, instanceId, late.messengerId, 'failed')), true);
      const events = (await eventsOf(env.db, instanceId)).filter((e) => e.data.messageId === late.id && (e.type === 'message.failed' || e.data.status === 'failed'));
      assert.deepEqual(events.map((e) => e.type).sort(), ['message.failed', 'message.status']);
      assert.equal(events.find((e) => e.type === 'message.failed')!.data.error.code, 'network_failed');
    });

    it('records a send the network took as sent once: also when a new owner gave up on it, never when it failed', async () => {
      const markSentNow = async (id: string) => {
        const item = await env.db('send_items').where({ id }).first();
        await env.db.transaction((trx) => markSent(trx, item));
      };
      const outcomes = async (id: string) => (await eventsOf(env.db, instanceId)).filter((e) => e.data.messageId === id).map((e) => (e.type === 'message.status' ? `status:${e.data.status}` : e.type));
      // The owner that took over marked it uncertain while the old one's send was leaving.
      const gaveUp = await enqueueSend(env, instanceId, { phone: OK, status: 'uncertain', publish: false });
      await markSentNow(gaveUp.id);
      assert.equal(await itemStatus(env.db, gaveUp.id), 'sent');
      assert.equal(await env.db.transaction((trx) => applyReceipt(trx, instanceId, gaveUp.messengerId, 'sent')), false, 'the sent receipt adds nothing');
      assert.deepEqual(await outcomes(gaveUp.id), ['message.sent', 'status:sent']);
      // A receipt that came first moved it further: the status stays, only message.sent is due.
      const ahead = await enqueueSend(env, instanceId, { phone: OK, status: 'delivered', publish: false });
      await markSentNow(ahead.id);
      assert.equal(await itemStatus(env.db, ahead.id), 'delivered');
      assert.deepEqual(await outcomes(ahead.id), ['message.sent']);
      const failed = await enqueueSend(env, instanceId, { phone: OK, status: 'failed', publish: false });
      await markSentNow(failed.id);
      assert.equal(await itemStatus(env.db, failed.id), 'failed');
      assert.deepEqual(await outcomes(failed.id), []);
    });

    it('sends a media send once its store answers again; fails it only when its file is gone', async () => {
      const stored = await env.media.store({ instanceId, direction: 'outbound', mimetype: 'image/png', bytes: Buffer.from('PNGDATA') });
      let outages = 2; // the store times out twice (NATS restarting, say), then answers
      const reads: string[] = [];
      await runtime.close();
      runtime = env.runtime({
        media: {
          ...env.media,
          read: async (mediaId) => {
            reads.push(mediaId);
            if (outages-- > 0) throw new Problem(504, 'media_timeout', 'The media store did not answer in time; try again.');
            return env.media.read(mediaId);
          },
        },
      });
      await connect();
      const image = await enqueueSend(env, instanceId, { phone: OK, type: 'image', payload: { mimetype: 'image/png', mediaId: stored.id } });
      await waitStatus(image.id, 'read');
      assert.equal(reads.length, 3, 'read again after each outage');
      const gone = await enqueueSend(env, instanceId, { phone: OK, type: 'image', payload: { mimetype: 'image/png', mediaId: 'med_gone' } });
      await waitStatus(gone.id, 'failed');
      const failure = (await eventsOf(env.db, instanceId, 'message.failed')).find((e) => e.data.messageId === gone.id);
      assert.equal(failure?.data.error.code, 'media_unavailable');
    });

    it('expires, and never sends, an item whose time ran out while its media was read', async () => {
      const stored = await env.media.store({ instanceId, direction: 'outbound', mimetype: 'image/png', bytes: Buffer.from('PNGDATA') });
      await runtime.close();
      runtime = env.runtime({ media: { ...env.media, read: async (mediaId) => (await new Promise((r) => setTimeout(r, 1500)), env.media.read(mediaId)) } });
      await connect();
      const late = await enqueueSend(env, instanceId, { phone: OK, type: 'image', payload: { mimetype: 'image/png', mediaId: stored.id }, expiresAt: new Date(Date.now() + 1000) });
      await until(async () => TERMINAL.includes(await itemStatus(env.db, late.id)), 'an outcome', 20_000);
      assert.equal(await itemStatus(env.db, late.id), 'expired');
      assert.equal((await env.db('sandbox_ledger').where({ messenger_id: late.messengerId })).length, 0, 'never sent');
      const failure = (await eventsOf(env.db, instanceId, 'message.failed')).find((e) => e.data.messageId === late.id);
      assert.equal(failure?.data.error.code, 'expired');
    });

    it('expired and cancelled items are never sent', async () => {
      await connect();
      const late = await enqueueSend(env, instanceId, { phone: OK, expiresAt: new Date(Date.now() - 1000) });
      const cancelled = await enqueueSend(env, instanceId, { phone: OK, status: 'cancelled' });
      const marker = await enqueueSend(env, instanceId, { phone: OK });
      await waitStatus(marker.id, 'sent').catch(() => undefined);
      await until(async () => (await itemStatus(env.db, marker.id)) !== 'queued' && (await itemStatus(env.db, marker.id)) !== 'sending', 'marker sent');
      assert.equal(await itemStatus(env.db, late.id), 'expired');
      assert.equal(await itemStatus(env.db, cancelled.id), 'cancelled');
      const failed = (await eventsOf(env.db, instanceId, 'message.failed')).find((e) => e.data.messageId === late.id)!;
      assert.equal(failed.data.error.code, 'expired');
      const lateStatus = (await eventsOf(env.db, instanceId, 'message.status')).filter((e) => e.data.messageId === late.id).map((e) => e.data.status);
      assert.deepEqual(lateStatus, ['failed']);
      const ledger = await env.db('sandbox_ledger').where({ instance_id: instanceId }).pluck('messenger_id');
      assert.deepEqual(ledger, [marker.messengerId]);
    });

    it('a restart turns `sending` into uncertain, never resends it, and sends queued items the bus lost', async () => {
      await connect();
      await runtime.close(); // process gone; credentials kept, paused still false
      const interrupted = await enqueueSend(env, instanceId, { phone: OK, status: 'sending', publish: false });
      const lost = await enqueueSend(env, instanceId, { phone: OK, publish: false }); // no command on the bus
      // A stale command for the interrupted item, as a redelivery would bring it.
      await env.db.transaction((trx) => enqueueOutbox(trx, { subject: subjects.command(instanceId), msgId: `${interrupted.id}-again`, payload: JSON.stringify({ id: interrupted.id }) }));
      runtime = env.runtime();
      await runtime.resume(instanceId);
      await waitStatus(lost.id, 'read');
      assert.equal(await itemStatus(env.db, interrupted.id), 'uncertain');
      const uncertain = (await eventsOf(env.db, instanceId, 'message.uncertain')).find((e) => e.data.messageId === interrupted.id)!;
      assert.equal(uncertain.data.reason, 'session_restarted');
      // The item says why, as an item made uncertain by a dropped connection does.
      const row = await env.db('send_items').where({ id: interrupted.id }).first('error');
      assert.equal((typeof row.error === 'string' ? JSON.parse(row.error) : row.error)?.code, 'session_restarted');
      const ledger = await env.db('sandbox_ledger').where({ instance_id: instanceId }).pluck('messenger_id');
      assert.ok(!ledger.includes(interrupted.messengerId));
      const states = (await eventsOf(env.db, instanceId, 'connection.update')).map((e) => e.data.state);
      assert.ok(!states.slice(3).includes('awaiting_scan'), 'reconnected without a new scan');
    });

    it('sends wait while the connection is down and go out after it reconnects', async () => {
      await connect();
      await runtime.call(instanceId, 'sandbox.drop', { reason: 'connection_lost' });
      const item = await enqueueSend(env, instanceId, { phone: OK });
      await waitStatus(item.id, 'read');
      const states = (await eventsOf(env.db, instanceId, 'connection.update')).map((e) => e.data);
      const drop = states.find((s) => s.state === 'reconnecting')!;
      assert.deepEqual([drop.previousState, drop.reason], ['connected', 'connection_lost']);
    });

    it('an item queued longer than the commands stream keeps commands (SEND_EXPIRY_MS over a day) goes out on reconnect', async () => {
      await connect();
      // Queued 26 h ago and still valid: the stream dropped its command after 25 h. Written before
      // the drop, so the look at reconnect cannot run before it is there.
      const old = await enqueueSend(env, instanceId, { phone: OK, publish: false, expiresAt: new Date(Date.now() + 22 * 3_600_000) });
      await env.db('send_items').where({ id: old.id }).update({ created_at: env.db.raw(`now() - interval '26 hours'`) });
      await runtime.call(instanceId, 'sandbox.drop', { reason: 'connection_lost' });
      await waitStatus(old.id, 'read');
    });

    it('a connected session also finds such items later (the look at connect failed, or missed one)', async () => {
      await runtime.close();
      runtime = env.runtime({ oldItemsCheckMs: 100 });
      await connect();
      // Consuming has started, so the look at connect is over: only the periodic one can find it.
      await waitStatus((await enqueueSend(env, instanceId, { phone: OK })).id, 'read');
      const old = await enqueueSend(env, instanceId, { phone: OK, publish: false, expiresAt: new Date(Date.now() + 22 * 3_600_000) });
      await env.db('send_items').where({ id: old.id }).update({ created_at: env.db.raw(`now() - interval '26 hours'`) });
      await waitStatus(old.id, 'read');
    });

    it('records inbound text, group, LID, fromMe and media messages with their events', async () => {
      await connect();
      const call = (body: Record<string, unknown>) => runtime.call(instanceId, 'sandbox.inbound', body);
      const text = await call({ from: '5511977776666', type: 'text', text: 'hi', name: 'Ana' });
      const group = await call({ from: '5511977776666', type: 'text', text: 'g', group: '120363111@g.us' });
      const lid = await call({ from: '5511977776666', type: 'text', text: 'l', lid: '998877@lid' });
      const mine = await call({ from: '5511977776666', type: 'text', text: 'from my phone', fromMe: true });
      const image = await call({ from: '5511977776666', type: 'image', mediaBase64: Buffer.from('PNGDATA').toString('base64'), mimetype: 'image/png', caption: 'pic' });
      const gone = await call({ from: '5511977776666', type: 'document', mediaUnavailable: true, fileName: 'a.pdf' });
      const once = await call({ from: '5511977776666', type: 'image', mediaBase64: 'AAAA', viewOnce: true });
      const received = await eventsOf(env.db, instanceId, 'message.received');
      const data = (r: Record<string, unknown>) => received.find((e) => e.data.messageId === r.messageId)!.data;
      assert.deepEqual(data(text), {
        messageId: text.messageId, from: '5511977776666@s.whatsapp.net', phone: '5511977776666', chatLid: null, participant: null,
        fromMe: false, fromApi: false, name: 'Ana', type: 'text', text: 'hi',
      });
      assert.deepEqual([data(group).from, data(group).participant], ['120363111@g.us', '5511977776666@s.whatsapp.net']);
      assert.deepEqual([data(lid).chatLid, data(lid).phone], ['998877@lid', '5511977776666']);
      assert.deepEqual([data(mine).fromMe, data(mine).fromApi], [true, false]);
      const img = data(image).media;
      assert.equal(img.downloadAvailable, true);
      assert.match(img.url, /^https:\/\/sb\.example\.test\/api\/instances\/.+\/media\/.+\?expires=\d+&signature=[0-9a-f]{64}$/);
      const mediaId = decodeURIComponent(new URL(img.url).pathname.split('/').pop()!);
      assert.equal(Buffer.from(await env.media.read(mediaId)).toString(), 'PNGDATA');
      assert.equal(data(image).text, 'pic');
      assert.deepEqual([data(gone).media.url, data(gone).media.downloadAvailable, typeof data(gone).media.error], [null, false, 'string']);
      assert.deepEqual([data(once).media.url, data(once).media.downloadAvailable], [null, false]);
      const stored = await env.db('media').where({ instance_id: instanceId }).count({ n: '*' }).first();
      assert.equal(Number(stored!.n), 1, 'only the normal image is archived');
      assert.equal((await env.db('incoming').where({ instance_id: instanceId }).count({ n: '*' }).first())!.n, '7');
    });

    const inboundRecorder = () => new InboundRecorder({ db: env.db, instanceId, media: env.media, downloadTimeoutMs: 1000, log: env.log, isOwnSend: async () => false });
    const textFrom = (messageId: string, text = 'x'): InboundMessage => ({ messageId, from: '1@s.whatsapp.net', phone: '1', chatLid: null, participant: null, fromMe: false, name: null, type: 'text' as const, text, isGroup: false });

    it('a redelivered inbound message is recorded once', async () => {
      const recorder = inboundRecorder();
      const msg = textFrom('DUP1');
      assert.equal(await recorder.record(msg), true);
      assert.equal(await recorder.record(msg), false);
      assert.equal((await eventsOf(env.db, instanceId, 'message.received')).length, 1);
    });

    it('records messages handed over together in a statement per batch, in the order given, each once', async () => {
      const recorder = inboundRecorder();
      const inserts: string[] = [];
      const onQuery = (q: { sql: string }) => /insert into "incoming"/i.test(q.sql) && inserts.push(q.sql);
      env.db.on('query', onQuery);
      try {
        // A burst: 40 texts, a copy of the 10th, and a document whose download takes a while in
        // the middle (it must not let the messages after it overtake it).
        const slowMedia = { mimetype: 'application/pdf', fileName: 'slow.pdf', download: () => new Promise<Uint8Array>((r) => setTimeout(() => r(new Uint8Array([7])), 30)) };
        const burst: InboundMessage[] = Array.from({ length: 40 }, (_, i) => textFrom(`BURST${String(i).padStart(2, '0')}`, `m${i}`));
        burst.splice(20, 0, { ...textFrom('BURSTDOC'), type: 'document', text: null, media: slowMedia });
        burst.push(textFrom('BURST10', 'copy'));
        const results = await Promise.all(burst.map((m) => recorder.record(m)));
        assert.deepEqual(results, [...burst.slice(0, -1).map(() => true), false]);
      } finally {
        env.db.off('query', onQuery);
      }
      assert.ok(inserts.length <= 4, `${inserts.length} statements for 42 messages`);
      const rows = await env.db('incoming').where({ instance_id: instanceId }).where('message_id', 'like', 'BURST%').orderBy('id').select('message_id', 'text');
      const expected = [...Array.from({ length: 20 }, (_, i) => `BURST${String(i).padStart(2, '0')}`), 'BURSTDOC', ...Array.from({ length: 20 }, (_, i) => `BURST${i + 20}`)];
      assert.deepEqual(rows.map((r) => r.message_id), expected, 'ids follow the order of arrival');
      assert.equal(rows.find((r) => r.message_id === 'BURST10')!.text, 'm10', 'the first copy is the one recorded');
      // Events and their announcements in the same order, one per message.
      const events = (await eventsOf(env.db, instanceId, 'message.received')).filter((e) => String(e.data.messageId).startsWith('BURST'));
      assert.deepEqual(events.map((e) => e.data.messageId), expected);
      // Announced in that order too, where the relay has not yet taken the rows.
      const ids = events.map((e) => (e as unknown as { id: string }).id);
      const announced: string[] = await env.db('outbox').whereIn('msg_id', ids).orderBy('seq').pluck('msg_id');
      assert.deepEqual(announced, ids.filter((id) => announced.includes(id)));
    });

    it('sandbox messages that arrive while the session is busy are handed over together: a few statements for a burst', async () => {
      await connect();
      const inserts: string[] = [];
      const onQuery = (q: { sql: string }) => /insert into "incoming"/i.test(q.sql) && inserts.push(q.sql);
      env.db.on('query', onQuery);
      let answers: Record<string, unknown>[];
      try {
        answers = await Promise.all(Array.from({ length: 30 }, (_, i) => runtime.call(instanceId, 'sandbox.inbound', { from: '5511977776666', type: 'text', text: `burst ${i}` })));
      } finally {
        env.db.off('query', onQuery);
      }
      assert.ok(inserts.length <= 5, `${inserts.length} statements for 30 messages`);
      const recorded = (await eventsOf(env.db, instanceId, 'message.received')).map((e) => e.data.messageId);
      for (const a of answers) assert.ok(recorded.includes(a.messageId), 'every answered message is recorded');
    });

    it('sandbox messages skip the instance lane but not a stop queued before them: those after it are refused with a 409', async () => {
      await connect();
      const send = (i: number) => runtime.call(instanceId, 'sandbox.inbound', { from: '5511977776666', type: 'text', text: `race ${i}` });
      const before = Array.from({ length: 10 }, (_, i) => send(i));
      const stopped = runtime.stop(instanceId);
      const after = Array.from({ length: 10 }, (_, i) => send(10 + i));
      const [answered, refused] = await Promise.all([Promise.allSettled(before), Promise.allSettled(after)]);
      await stopped;
      const recorded = (await eventsOf(env.db, instanceId, 'message.received')).map((e) => e.data.messageId);
      for (const r of answered) assert.ok(r.status === 'fulfilled' && recorded.includes(r.value.messageId), 'a message that came before the stop is recorded');
      for (const r of refused) assert.ok(r.status === 'rejected' && r.reason instanceof Problem && r.reason.status === 409, 'a message after the stop is refused');
      assert.equal((await instanceRow(env.db, instanceId)).state, 'stopped');
    });

    it('a message the database refuses fails alone, not the messages handed over with it', async () => {
      const recorder = inboundRecorder();
      // The first goes out alone; the other four wait for it and go together, the refused one with them.
      const batch = ['ISO0', 'ISO1', 'ISO2', 'ISO3', 'ISO4'].map((id) => (id === 'ISO2' ? { ...textFrom(id), phone: '9'.repeat(40) } : textFrom(id)));
      const results = await Promise.allSettled(batch.map((m) => recorder.record(m)));
      assert.deepEqual(results.map((r) => r.status), ['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
      const recorded = await env.db('incoming').where({ instance_id: instanceId }).where('message_id', 'like', 'ISO%').orderBy('id').pluck('message_id');
      assert.deepEqual(recorded, ['ISO0', 'ISO1', 'ISO3', 'ISO4']);
    });

    it('records a message whose text, name or file name PostgreSQL cannot store, cleaned', async () => {
      const recorder = inboundRecorder();
      const base = { from: '1@s.whatsapp.net', phone: '1', chatLid: null, participant: null, fromMe: false, isGroup: false };
      assert.equal(await recorder.record({ ...base, messageId: 'NUL1', name: 'Bo\u0000b', type: 'text', text: 'a\u0000b\ud800c' }), true);
      const media = { mimetype: 'application/pdf', fileName: 'r\u0000.pdf', download: async () => new Uint8Array([1, 2, 3]) };
      assert.equal(await recorder.record({ ...base, messageId: 'NUL2', name: null, type: 'document', text: null, media }), true);
      const rows = await env.db('incoming').where({ instance_id: instanceId }).whereIn('message_id', ['NUL1', 'NUL2']).orderBy('message_id');
      assert.deepEqual([rows[0].name, rows[0].text], ['Bob', 'ab\ufffdc']);
      const stored = typeof rows[1].media === 'string' ? JSON.parse(rows[1].media) : rows[1].media;
      assert.equal(stored.fileName, 'r.pdf');
      assert.equal((await eventsOf(env.db, instanceId, 'message.received')).length, 2);
    });

    it('presence becomes chat.presence', async () => {
      await connect();
      await runtime.call(instanceId, 'sandbox.presence', { from: '5511977776666', presence: 'composing' });
      const [p] = await eventsOf(env.db, instanceId, 'chat.presence');
      assert.deepEqual(p.data, { phone: '5511977776666', chatLid: null, presence: 'composing' });
    });

    it('stop pauses and keeps credentials; start reconnects without a scan; reset pairs again', async () => {
      await connect();
      await runtime.stop(instanceId);
      let row = await instanceRow(env.db, instanceId);
      assert.deepEqual([row.paused, row.state], [true, 'stopped']);
      await assert.rejects(runtime.call(instanceId, 'sandbox.scan', { phone: '5511900001111' }), (e: any) => e.status === 409 && e.code === 'instance_not_running');
      await runtime.start(instanceId);
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'connected again');
      await runtime.reset(instanceId);
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan after reset');
      row = await instanceRow(env.db, instanceId);
      assert.equal(row.phone, null);
      // Clients can tell the reset they asked for from the phone unlinking the device.
      const loggedOut = (await eventsOf(env.db, instanceId, 'connection.update')).filter((e) => e.data.state === 'logged_out');
      assert.deepEqual(
        loggedOut.map((e) => [e.data.previousState, e.data.reason]),
        [['connected', 'reset']],
      );
      assert.equal(Number((await env.db('auth_state').where({ instance_id: instanceId }).count({ n: '*' }).first())!.n), 0);
      const { code } = (await runtime.call(instanceId, 'pairing-code', { phone: '5511922223333' })) as { code: string };
      await runtime.call(instanceId, 'sandbox.pair', { code });
      row = await instanceRow(env.db, instanceId);
      assert.deepEqual([row.state, row.phone], ['connected', '5511922223333']);
      await assert.rejects(runtime.call(instanceId, 'pairing-code', { phone: '5511922223333' }), (e: any) => e.status === 409);
    });

    it('a pause the session never heard of (its stop request lost) holds: nothing is sent, the session stops', async () => {
      await connect();
      // The gateway paused the instance and answered; its stop request did not reach the session.
      await env.db('instances').where({ id: instanceId }).update({ paused: true });
      const held = await enqueueSend(env, instanceId, { phone: OK, text: 'after the pause' });
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'stopped', 'the session stopping itself');
      assert.equal(runtime.worker(instanceId), undefined);
      assert.equal(await itemStatus(env.db, held.id), 'queued');
      // The command was handed back, not dropped: a start sends the item.
      await runtime.start(instanceId);
      await waitStatus(held.id, 'read');
    });

    it('concurrent starts and stops end in the run state of the last one called', async () => {
      await connect();
      for (const last of ['stop', 'start'] as const) {
        // Alternating calls, all in flight at once; the last one called is `last`.
        const calls = Array.from({ length: 9 }, (_, i) => ((i % 2 === 0) === (last === 'stop') ? runtime.stop(instanceId) : runtime.start(instanceId)));
        await Promise.all(calls);
        const row = await instanceRow(env.db, instanceId);
        assert.equal(row.paused, last === 'stop', `paused after a final ${last}`);
        assert.equal(Boolean(runtime.worker(instanceId)), last === 'start', `a worker runs after a final ${last}`);
        if (last === 'stop') assert.equal(row.state, 'stopped');
        else await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'reconnected with its kept credentials');
      }
    });

    it('starts a new instance at its creation, unless a delete ran first', async () => {
      const created = await env.createInstance({ paused: false }); // as the gateway creates it
      await runtime.created(created);
      assert.ok(runtime.worker(created), 'a session for the new instance');
      await until(async () => (await instanceRow(env.db, created)).state === 'awaiting_scan', 'awaiting_scan');
      const deleted = await env.createInstance({ paused: false });
      await env.db('instances').where({ id: deleted }).delete();
      await runtime.created(deleted);
      assert.equal(runtime.worker(deleted), undefined, 'no session for an instance that no longer exists');
    });

    it('a reset called after a scan wins, even while the scan is still saving its credentials', async () => {
      await runtime.start(instanceId);
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
      // An uncommitted row with the same key makes the scan's credential write wait for it.
      const blocker = await env.db.transaction();
      let scanning: Promise<unknown> = Promise.resolve();
      let resetting: Promise<unknown> = Promise.resolve();
      try {
        await blocker('auth_state').insert({ instance_id: instanceId, category: 'sandbox', key_id: 'creds', value_sealed: 'x' });
        scanning = runtime.call(instanceId, 'sandbox.scan', { phone: '5511900002222' });
        resetting = runtime.reset(instanceId);
        await until(async () => Boolean(await env.db('pg_stat_activity').whereRaw('datname = current_database()').where({ wait_event_type: 'Lock' }).where('query', 'like', '%auth_state%').first()), 'the scan waits to save its credentials');
        await Promise.race([resetting, new Promise((r) => setTimeout(r, 300))]); // a reset that does not wait for the scan ends here
      } finally {
        await blocker.rollback();
      }
      await Promise.allSettled([scanning, resetting]);
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan after the reset');
      const saved = await env.db('auth_state').where({ instance_id: instanceId }).count({ n: '*' }).first();
      assert.equal(Number(saved!.n), 0, 'no credentials survive the reset');
    });

    it('a delete or stop served while the server resumes its instances is not undone by the resume', async () => {
      const ids: string[] = [];
      for (let i = 0; i < 12; i++) ids.push(await env.createInstance({ paused: false }));
      const [deletedId, stoppedId] = ids.slice(-2);
      const resuming = runtime.resumeAll();
      await until(async () => Boolean(runtime.worker(ids[0])), 'the resume under way');
      assert.equal(await runtime.remove(deletedId, async () => Number(await env.db('instances').where({ id: deletedId }).delete()) > 0), true);
      await runtime.stop(stoppedId);
      await resuming;
      assert.equal(runtime.worker(deletedId), undefined, 'no session for the deleted instance');
      assert.equal(runtime.worker(stoppedId), undefined, 'no session for the stopped instance');
      assert.equal((await instanceRow(env.db, stoppedId)).paused, true);
    });

    it('recordRestart: what a restart means for each instance is recorded before the API serves', async () => {
      await connect(); // held by this runtime's session: another server's, to the one restarting
      const stale = await env.createInstance({ paused: false, state: 'connected', phone: '5511900003333' });
      const pausedStale = await env.createInstance({ paused: true, state: 'connected', phone: '5511900004444' });
      const restarting = env.runtime();
      await restarting.recordRestart();
      assert.equal((await instanceRow(env.db, stale)).state, 'starting', 'not the state the last process left');
      assert.equal((await instanceRow(env.db, pausedStale)).state, 'stopped');
      assert.equal((await instanceRow(env.db, instanceId)).state, 'connected', 'a session that runs keeps its state');
      const [update] = await eventsOf(env.db, stale, 'connection.update');
      assert.deepEqual(update.data, { state: 'starting', previousState: 'connected', phone: '5511900003333', reason: 'session_started' });
      // The session that starts next records no second event for the same state.
      await restarting.resumeAll();
      await until(async () => (await instanceRow(env.db, stale)).state === 'awaiting_scan', 'the resumed session waits for a scan');
      const states = (await eventsOf(env.db, stale, 'connection.update')).map((e) => e.data.state);
      assert.deepEqual(states.slice(0, 2), ['starting', 'awaiting_scan']);
      await restarting.close();
    });

    it('a start accepted just before the runtime closes starts no session', async () => {
      const other = env.runtime();
      const starting = other.start(instanceId);
      await other.close();
      await starting;
      assert.equal(other.worker(instanceId), undefined);
    });

    it('a second runtime waits for the owner lock instead of connecting twice', async () => {
      await connect();
      const other = env.runtime();
      await other.resume(instanceId);
      await new Promise((r) => setTimeout(r, 150));
      assert.equal(other.worker(instanceId)!.isOwner, false);
      await runtime.close();
      await until(() => other.worker(instanceId)!.isOwner, 'the second takes over');
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'connected by the second');
      await other.close();
    });

    it('all items end terminal', async () => {
      await connect();
      const ids: string[] = [];
      for (let i = 0; i < 20; i++) ids.push((await enqueueSend(env, instanceId, { phone: `55119000${String(i).padStart(5, '0')}` })).id);
      await until(async () => {
        const rows = await env.db('send_items').whereIn('id', ids).pluck('status');
        return rows.every((s: string) => TERMINAL.includes(s));
      }, 'all terminal', 10_000);
    });
  });
}
