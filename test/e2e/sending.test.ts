// The send pipeline end to end over HTTP, on the sandbox network: embedded (PGlite + in-process
// bus) and the same process on PostgreSQL + NATS.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { startTestServer, type TestServer } from '../support/server.ts';
import { eventually } from '../support/http.ts';
import { NATS_URL, testNamespace } from '../support/services.ts';
import { mediaFixtures } from '../fixtures/media/index.ts';
import { createConnectedInstance, eventsOf, waitForEvent, waitForSendStatus, waitForState } from './support.ts';

const modes = [
  { name: 'embedded (PGlite, in-process bus)', opts: {} },
  { name: 'PostgreSQL + NATS', opts: { storage: 'postgres' as const, env: { NATS_URL, NATS_NAMESPACE: testNamespace() } } },
];

for (const mode of modes) {
  describe(`send pipeline — ${mode.name}`, function () {
    this.timeout(60_000);
    let t: TestServer;
    let inst: { id: string; apiToken: string };

    before(async () => {
      t = await startTestServer({ ...mode.opts, env: { ...(mode.opts.env ?? {}), SANDBOX_RECEIPT_DELAY_MS: '5' } });
      inst = await createConnectedInstance(t.admin);
    });
    after(async () => t?.stop());

    const send = (body: Record<string, unknown>, headers: Record<string, string> = {}, id = inst.id) =>
      t.client(inst.apiToken).post(`/api/instances/${id}/messages`, body, headers);

    it('emits connection.update events while pairing', async () => {
      const states = (await eventsOf(t.admin, inst.id, 'connection.update')).map((e) => e.data.state).reverse();
      assert.deepEqual(states.slice(-2), ['awaiting_scan', 'connected']);
      const connected = (await eventsOf(t.admin, inst.id, 'connection.update')).find((e) => e.data.state === 'connected');
      assert.equal(connected.data.previousState, 'awaiting_scan');
      assert.equal(connected.data.phone, '5511900000001');
    });

    it('accepts a text send with 202 and takes it to read with status events', async () => {
      const res = await send({ phone: '5511988887777', type: 'text', text: 'Hello from the tests' });
      assert.equal(res.status, 202);
      assert.deepEqual(Object.keys(res.body).sort(), ['id', 'messengerId', 'reused', 'status']);
      assert.equal(res.body.status, 'queued');
      assert.equal(res.body.reused, false);
      assert.match(res.body.messengerId, /^3EB0[0-9A-F]+$/);
      const item = await waitForSendStatus(t.admin, inst.id, res.body.id, ['read']);
      assert.equal(item.messengerId, res.body.messengerId);
      const statuses = (await eventsOf(t.admin, inst.id, 'message.status')).filter((e) => e.data.messageId === res.body.id).map((e) => e.data.status).reverse();
      assert.deepEqual(statuses, ['sent', 'delivered', 'read']);
      for (const e of await eventsOf(t.admin, inst.id, 'message.status')) {
        if (e.data.messageId === res.body.id) assert.equal(e.data.messengerId, res.body.messengerId);
      }
      const sent = await waitForEvent(t.admin, inst.id, (e) => e.type === 'message.sent' && e.data.messageId === res.body.id, 'message.sent');
      assert.deepEqual(sent.data, { messageId: res.body.id, messengerId: res.body.messengerId, phone: '5511988887777', type: 'text' });
      // The listing is newest first, also for events recorded in the same millisecond (message.sent
      // and its `sent` status are written together).
      const listed = ((await t.admin.get(`/api/instances/${inst.id}/events`)).body.data as any[]).filter((e) => e.data.messageId === res.body.id);
      assert.deepEqual(listed.map((e) => (e.type === 'message.status' ? e.data.status : e.type)).reverse(), ['message.sent', 'sent', 'delivered', 'read']);
      // The network echoes API sends as own messages.
      const echo = await eventually(async () => (await t.admin.get(`/api/instances/${inst.id}/incoming`)).body.data.find((m: any) => m.messageId === res.body.messengerId), 5000, 'echo');
      assert.equal(echo.fromMe, true);
      assert.equal(echo.fromApi, true);
    });

    it('sends every media type and a voice note', async () => {
      const cases = [
        { type: 'image', base64: mediaFixtures.png.base64(), mimetype: 'image/png', caption: 'A picture' },
        { type: 'video', base64: mediaFixtures.mp4.base64(), mimetype: 'video/mp4' },
        { type: 'audio', base64: mediaFixtures.mp3.base64(), mimetype: 'audio/mpeg' },
        { type: 'document', base64: mediaFixtures.pdf.base64(), mimetype: 'application/pdf', fileName: 'invoice.pdf' },
        { type: 'sticker', base64: mediaFixtures.sticker.base64(), mimetype: 'image/webp' },
      ];
      const messengerIds: Record<string, string> = {};
      for (const c of cases) {
        const res = await send({ phone: '5511988887777', ...c });
        assert.equal(res.status, 202, `${c.type}: ${JSON.stringify(res.body)}`);
        await waitForSendStatus(t.admin, inst.id, res.body.id, ['read']);
        messengerIds[c.type] = res.body.messengerId;
      }
      const echoOf = (messengerId: string) => eventually(async () => ((await t.admin.get(`/api/instances/${inst.id}/incoming`)).body.data as any[]).find((m) => m.messageId === messengerId));
      // Audio and video carry their playing time (the fixtures last one second); an image none.
      assert.equal((await echoOf(messengerIds.audio)).media.seconds, 1);
      assert.equal((await echoOf(messengerIds.video)).media.seconds, 1);
      assert.equal((await echoOf(messengerIds.image)).media.seconds, null);
      // A sticker sent as PNG goes out as a 512×512 WebP (WhatsApp shows no other).
      const fromPng = await send({ phone: '5511988887777', type: 'sticker', base64: mediaFixtures.png.base64(), mimetype: 'image/png' });
      assert.equal(fromPng.status, 202, JSON.stringify(fromPng.body));
      await waitForSendStatus(t.admin, inst.id, fromPng.body.id, ['read']);
      const sticker = (await echoOf(fromPng.body.messengerId)).media;
      assert.equal(sticker.mimetype, 'image/webp');
      const webp = Buffer.from(await (await fetch(sticker.url)).arrayBuffer());
      assert.deepEqual([webp.toString('latin1', 0, 4), webp.toString('latin1', 8, 12)], ['RIFF', 'WEBP']);
      const voice = await send({ phone: '5511988887777', type: 'audio', base64: mediaFixtures.wav.base64(), mimetype: 'audio/wav', ptt: true });
      assert.equal(voice.status, 202);
      await waitForSendStatus(t.admin, inst.id, voice.body.id, ['played']);
      // The echo of the voice note carries its length, worked out when it was converted.
      const echo = await echoOf(voice.body.messengerId);
      assert.equal(echo.media.voiceNote, true);
      assert.ok(echo.media.seconds >= 1, JSON.stringify(echo.media));
      // The queue item carries the waveform worked out at conversion, for the recipient's app.
      const item = await t.server.platform.db('send_items').where({ id: voice.body.id }).first();
      const waveform = Buffer.from((typeof item.payload === 'string' ? JSON.parse(item.payload) : item.payload).waveform, 'base64');
      assert.deepEqual([waveform.length, Math.max(...waveform)], [64, 100]);
    });

    it('gives each magic number its outcome', async () => {
      const failed = await send({ phone: '5511955550000', type: 'text', text: 'x' });
      const uncertain = await send({ phone: '5511955550001', type: 'text', text: 'x' });
      const neverRead = await send({ phone: '5511955550002', type: 'text', text: 'x' });
      const notOnNetwork = await send({ phone: '5511955550004', type: 'text', text: 'x' });
      assert.equal((await waitForSendStatus(t.admin, inst.id, failed.body.id, ['failed'])).status, 'failed');
      assert.equal((await waitForSendStatus(t.admin, inst.id, uncertain.body.id, ['uncertain'])).status, 'uncertain');
      const nn = await waitForSendStatus(t.admin, inst.id, notOnNetwork.body.id, ['failed']);
      assert.equal(nn.error.code, 'not_on_network');
      await waitForSendStatus(t.admin, inst.id, neverRead.body.id, ['delivered']);
      await waitForEvent(t.admin, inst.id, (e) => e.type === 'message.failed' && e.data.messageId === failed.body.id, 'message.failed');
      const u = await waitForEvent(t.admin, inst.id, (e) => e.type === 'message.uncertain' && e.data.messageId === uncertain.body.id, 'message.uncertain');
      assert.equal(typeof u.data.reason, 'string');
      await waitForEvent(t.admin, inst.id, (e) => e.type === 'message.failed' && e.data.messageId === notOnNetwork.body.id && e.data.error.code === 'not_on_network', 'not_on_network');
      // The session reconnects after the mid-send drop, and later sends still flow.
      await waitForState(t.admin, inst.id, 'connected');
      const after = await send({ phone: '5511988887777', type: 'text', text: 'after the drop' });
      await waitForSendStatus(t.admin, inst.id, after.body.id, ['read']);
      await new Promise((r) => setTimeout(r, 100));
      assert.equal((await t.admin.get(`/api/instances/${inst.id}/messages/${neverRead.body.id}`)).body.status, 'delivered', 'never read');
    });

    it('applies a settings change to the very next send (protectAnnouncementGroups)', async () => {
      await t.admin.put(`/api/instances/${inst.id}/settings`, { protectAnnouncementGroups: true });
      const res = await send({ phone: '1203630003@g.us', type: 'text', text: 'to an announcement group' });
      const item = await waitForSendStatus(t.admin, inst.id, res.body.id, ['failed', 'sent', 'delivered', 'read']);
      assert.equal(item.status, 'failed');
      assert.equal(item.error.code, 'announcement_group');
      await waitForEvent(t.admin, inst.id, (e) => e.type === 'message.failed' && e.data.messageId === res.body.id && e.data.error.code === 'announcement_group', 'announcement_group');
      await t.admin.put(`/api/instances/${inst.id}/settings`, { protectAnnouncementGroups: false });
    });

    it('reuses an operation by Idempotency-Key and refuses the key with other content', async () => {
      const key = `order-${Date.now()}`;
      const first = await send({ phone: '5511988887777', type: 'text', text: 'Once' }, { 'Idempotency-Key': key });
      const again = await send({ text: 'Once', type: 'text', phone: '5511988887777' }, { 'Idempotency-Key': key });
      assert.equal(again.status, 202);
      assert.equal(again.body.id, first.body.id);
      assert.equal(again.body.messengerId, first.body.messengerId);
      assert.equal(again.body.reused, true);
      // A reuse replays the acceptance, however far the send has gone since.
      await waitForSendStatus(t.admin, inst.id, first.body.id, ['read']);
      const later = await send({ phone: '5511988887777', type: 'text', text: 'Once' }, { 'Idempotency-Key': key });
      assert.deepEqual([later.status, later.body], [202, { ...first.body, reused: true }]);
      // The same content, said differently: an empty or null field is no field, blanks around the mimetype are not kept.
      const imageKey = `image-${Date.now()}`;
      const image = { phone: '5511988887777', type: 'image', base64: mediaFixtures.png.base64(), mimetype: 'image/png' };
      const firstImage = await send(image, { 'Idempotency-Key': imageKey });
      for (const same of [{ caption: '' }, { text: '' }, { fileName: '' }, { mimetype: ' IMAGE/png ' }, { ptt: false }, { caption: null, text: null, fileName: null, ptt: null }]) {
        const res = await send({ ...image, ...same }, { 'Idempotency-Key': imageKey });
        assert.deepEqual([res.status, res.body.id], [202, firstImage.body.id], JSON.stringify(same));
      }
      const conflict = await send({ phone: '5511988887777', type: 'text', text: 'Other' }, { 'Idempotency-Key': key });
      assert.equal(conflict.status, 409);
      assert.equal(conflict.body.code, 'idempotency_conflict');
      const parallelKey = `parallel-${Date.now()}`;
      const results = await Promise.all(Array.from({ length: 8 }, () => send({ phone: '5511988887777', type: 'text', text: 'Parallel' }, { 'Idempotency-Key': parallelKey })));
      assert.ok(results.every((r) => r.status === 202), JSON.stringify(results.map((r) => [r.status, r.body])));
      assert.equal(new Set(results.map((r) => r.body.id)).size, 1, 'one item for one key');
      const list = (await t.admin.get(`/api/instances/${inst.id}/messages`)).body.data;
      assert.equal(list.filter((m: any) => m.id === results[0].body.id).length, 1);
      assert.equal((await send({ phone: '5511988887777', type: 'text', text: 'x' }, { 'Idempotency-Key': 'k'.repeat(129) })).status, 400);
      const empty = await send({ phone: '5511988887777', type: 'text', text: 'x' }, { 'Idempotency-Key': '' });
      assert.deepEqual([empty.status, empty.body.errors?.[0]?.path], [400, 'Idempotency-Key'], 'an empty key is not read as no key');
      assert.equal((await send({ phone: '5511988887777', type: 'text', text: 'x' }, { 'Idempotency-Key': 'k'.repeat(128) })).status, 202);
      assert.equal((await send({ phone: '5511988887777', type: 'text', text: 'x' }, { 'Idempotency-Key': `order ${Date.now()} of customer 7` })).status, 202);
      // Two header lines would otherwise be joined into a third key ("a, b").
      const repeated = await postWithHeaderLines(`${t.url}/api/instances/${inst.id}/messages`, inst.apiToken, { phone: '5511988887777', type: 'text', text: 'x' }, ['Idempotency-Key', ['a', 'b']]);
      assert.deepEqual([repeated.status, repeated.body.errors?.[0]?.path], [400, 'Idempotency-Key']);
    });

    it('validates every field and queues nothing on error', async () => {
      const before = (await t.admin.get(`/api/instances/${inst.id}/messages`)).body.data.length;
      const bad: Array<[Record<string, unknown>, number]> = [
        [{ type: 'text', text: 'no phone' }, 400],
        [{ phone: '+5511988887777', type: 'text', text: 'x' }, 400],
        [{ phone: '1234567', type: 'text', text: 'x' }, 400],
        [{ phone: `${'1'.repeat(80)}@lid`, type: 'text', text: 'x' }, 400],
        [{ phone: '5511988887777', type: 'text', text: 'x', ...Object.fromEntries(Array.from({ length: 10_001 }, (_, i) => [`k${i}`, 0])) }, 400],
        [{ phone: '5511988887777', type: 'text', text: 'x', padding: Array(10_001).fill(0) }, 400],
        [{ phone: `${'1'.repeat(80)}-group`, type: 'text', text: 'x' }, 400],
        [{ phone: `${'1'.repeat(40)}-${'2'.repeat(40)}@g.us`, type: 'text', text: 'x' }, 400],
        [{ phone: '5511988887777', type: 'poll', text: 'x' }, 400],
        [{ phone: '5511988887777', type: 'text', text: null }, 400],
        [{ phone: '5511988887777', type: 'image', base64: null, mimetype: 'image/png' }, 400],
        [{ phone: '5511988887777', type: 'image', base64: mediaFixtures.png.base64(), mimetype: 'image/png', caption: 7 }, 400],
        [{ phone: '5511988887777', type: 'text' }, 400],
        [{ phone: '5511988887777', type: 'text', text: 'x'.repeat(16001) }, 400],
        [{ phone: '5511988887777', type: 'text', text: 'x', base64: mediaFixtures.png.base64() }, 400],
        [{ phone: '5511988887777', type: 'text', text: 'x', mimetype: 'image/png' }, 400],
        // Fields the type cannot carry would be dropped unsent.
        [{ phone: '5511988887777', type: 'text', text: 'x', caption: 'no' }, 400],
        [{ phone: '5511988887777', type: 'image', base64: mediaFixtures.png.base64(), mimetype: 'image/png', text: 'words go in caption' }, 400],
        [{ phone: '5511988887777', type: 'image', mimetype: 'image/png' }, 400],
        [{ phone: '5511988887777', type: 'image', base64: mediaFixtures.png.base64() }, 400],
        [{ phone: '5511988887777', type: 'image', base64: `data:image/png;base64,${mediaFixtures.png.base64()}`, mimetype: 'image/png' }, 400],
        [{ phone: '5511988887777', type: 'image', base64: mediaFixtures.png.base64(), mimetype: 'application/pdf' }, 400],
        [{ phone: '5511988887777', type: 'sticker', base64: mediaFixtures.png.base64(), mimetype: 'image/svg+xml' }, 400],
        [{ phone: '5511988887777', type: 'sticker', base64: Buffer.from('definitely not an image').toString('base64'), mimetype: 'image/png' }, 422],
        [{ phone: '5511988887777', type: 'audio', base64: mediaFixtures.mp3.base64(), mimetype: 'audio/mpeg', caption: 'no' }, 400],
        [{ phone: '5511988887777', type: 'audio', base64: Buffer.from('definitely not audio').toString('base64'), mimetype: 'audio/mpeg', ptt: true }, 422],
        [{ phone: '5511988887777', type: 'image', base64: mediaFixtures.png.base64(), mimetype: 'image/png', ptt: true }, 422],
      ];
      for (const [body, status] of bad) {
        const res = await send(body);
        assert.equal(res.status, status, `${JSON.stringify(body).slice(0, 120)} → ${res.status} ${JSON.stringify(res.body)}`);
        assert.match(res.headers.get('content-type') ?? '', /problem\+json/);
      }
      assert.equal((await send({ phone: '5511988887777', type: 'text', text: 'x'.repeat(16000) })).status, 202);
      for (const phone of ['123456789-group', '120363025246125888@g.us', '120363025246125888-1612345678@g.us', '99887766554433@lid']) {
        assert.equal((await send({ phone, type: 'text', text: 'forms' })).status, 202, phone);
      }
      // Blank fields are no content: a client that sends every field is not refused for them.
      assert.equal((await send({ phone: '5511988887777', type: 'sticker', base64: mediaFixtures.sticker.base64(), mimetype: 'image/webp', text: '', caption: '' })).status, 202);
      assert.equal((await send({ phone: '5511988887777', type: 'audio', base64: mediaFixtures.mp3.base64(), mimetype: 'audio/mpeg', caption: '' })).status, 202, 'an empty caption is none, on audio too');
      assert.equal((await send({ phone: '5511988887777', type: 'audio', base64: mediaFixtures.mp3.base64(), mimetype: 'audio/mpeg', caption: ' ' })).status, 400, 'blanks are a caption');
      // A caption is optional on every media type but audio (the specification): a sticker's shows nowhere.
      const captioned = await send({ phone: '5511988887777', type: 'sticker', base64: mediaFixtures.sticker.base64(), mimetype: 'image/webp', caption: 'not shown' });
      assert.equal(captioned.status, 202, JSON.stringify(captioned.body));
      await waitForSendStatus(t.admin, inst.id, captioned.body.id, ['read']);
      const stickerEcho = await eventually(async () => ((await t.admin.get(`/api/instances/${inst.id}/incoming`)).body.data as any[]).find((m) => m.messageId === captioned.body.messengerId), 5000, 'sticker echo');
      assert.equal(stickerEcho.text, null);
      assert.equal((await send({ phone: '5511988887777', type: 'text', text: 'every field', base64: '', mimetype: '', caption: '', fileName: '' })).status, 202);
      const afterCount = (await t.admin.get(`/api/instances/${inst.id}/messages`)).body.data.length;
      assert.equal(afterCount, Math.min(50, before + 9));
    });

    it('refuses NUL characters and unpaired surrogates with 400 or 404, never a 5xx', async () => {
      const before = (await t.admin.get(`/api/instances/${inst.id}/messages`)).body.data.length;
      const bad: Record<string, unknown>[] = [
        { phone: '5511988887777', type: 'text', text: 'a\u0000b' },
        { phone: '5511988887777', type: 'text', text: 'a\ud800b' },
        { phone: '5511988887777', type: 'image', base64: mediaFixtures.png.base64(), mimetype: 'image/png', caption: '\udc00' },
        { phone: '5511988887777', type: 'document', base64: mediaFixtures.pdf.base64(), mimetype: 'application/pdf', fileName: 'a\u0000.pdf' },
      ];
      for (const body of bad) {
        const res = await send(body);
        assert.equal(res.status, 400, `${JSON.stringify(body).slice(0, 120)} → ${res.status} ${JSON.stringify(res.body)}`);
        assert.equal(res.body.code, 'validation_failed');
      }
      assert.equal((await t.admin.get(`/api/instances/${inst.id}/messages`)).body.data.length, before, 'nothing queued');
      const inbound = await t.admin.post(`/sandbox/instances/${inst.id}/inbound`, { from: '5511977776666', type: 'text', text: 'a\u0000b' });
      assert.equal(inbound.status, 400);
      for (const path of [`messages/msg%00x`, `media/med%00x`]) {
        assert.equal((await t.client(inst.apiToken).get(`/api/instances/${inst.id}/${path}`)).status, 404, path);
      }
      assert.equal((await t.client(inst.apiToken).request('DELETE', `/api/instances/${inst.id}/messages/msg%00x`)).status, 404);
      assert.equal((await send({ phone: '5511988887777', type: 'text', text: 'emoji 😀 pairs are fine' })).status, 202);
    });

    it('refuses media over 32 MiB with 413 and accepts exactly 32 MiB', async function () {
      this.timeout(120_000);
      const exact = Buffer.alloc(32 * 1024 * 1024, 7);
      const ok = await send({ phone: '5511988887777', type: 'document', base64: exact.toString('base64'), mimetype: 'application/octet-stream', fileName: 'big.bin' });
      assert.equal(ok.status, 202, JSON.stringify(ok.body));
      const over = Buffer.alloc(32 * 1024 * 1024 + 1, 7);
      const tooBig = await send({ phone: '5511988887777', type: 'document', base64: over.toString('base64'), mimetype: 'application/octet-stream' });
      assert.equal(tooBig.status, 413);
      assert.match(tooBig.headers.get('content-type') ?? '', /problem\+json/);
      // 32 MiB of random bytes from an encoder that escapes "/" (PHP's json_encode does).
      const base64 = randomBytes(32 * 1024 * 1024).toString('base64').replace(/\//g, '\\/');
      const escaped = await t.client(inst.apiToken).post(`/api/instances/${inst.id}/messages`, `{"phone":"5511988887777","type":"document","mimetype":"application/octet-stream","base64":"${base64}"}`);
      assert.equal(escaped.status, 202, JSON.stringify(escaped.body));
    });

    it('records inbound text, group, LID, media and own messages', async () => {
      const sandbox = (op: string, body: unknown) => t.admin.post(`/sandbox/instances/${inst.id}/${op}`, body);
      const text = await sandbox('inbound', { from: '5511977776666', type: 'text', text: 'Hi there', name: 'Ana' });
      assert.equal(text.status, 200);
      const group = await sandbox('inbound', { from: '5511977776666', type: 'text', text: 'In the group', group: '120363025246125888@g.us' });
      const lid = await sandbox('inbound', { from: '5511977775555', type: 'text', text: 'Via LID', lid: '187654321987654@lid' });
      const image = await sandbox('inbound', { from: '5511977776666', type: 'image', mediaBase64: mediaFixtures.jpg.base64(), mimetype: 'image/jpeg', caption: 'Look' });
      const own = await sandbox('inbound', { from: '5511977776666', type: 'text', text: 'Typed on the phone', fromMe: true });
      const incoming = await eventually(async () => {
        const list = (await t.client(inst.apiToken).get(`/api/instances/${inst.id}/incoming`)).body.data as any[];
        return list.length >= 5 && list;
      });
      const by = (id: string) => incoming.find((m) => m.messageId === id);
      assert.deepEqual(
        { from: by(text.body.messageId).from, phone: by(text.body.messageId).phone, name: by(text.body.messageId).name, text: by(text.body.messageId).text, fromMe: by(text.body.messageId).fromMe, fromApi: by(text.body.messageId).fromApi },
        { from: '5511977776666@s.whatsapp.net', phone: '5511977776666', name: 'Ana', text: 'Hi there', fromMe: false, fromApi: false },
      );
      assert.equal(by(group.body.messageId).from, '120363025246125888@g.us');
      assert.equal(by(group.body.messageId).participant, '5511977776666@s.whatsapp.net');
      // The short form a send takes names the same group.
      const short = await sandbox('inbound', { from: '5511977776666', type: 'text', text: 'Short form', group: '120363025246125888-group' });
      assert.equal(short.status, 200, JSON.stringify(short.body));
      const shortRecord = await eventually(async () => ((await t.client(inst.apiToken).get(`/api/instances/${inst.id}/incoming`)).body.data as any[]).find((m) => m.messageId === short.body.messageId));
      assert.equal(shortRecord.from, '120363025246125888@g.us');
      const bad = await sandbox('inbound', { from: '5511977776666', type: 'text', text: 'x', group: '12-34-group' });
      assert.equal(bad.status, 400);
      assert.deepEqual(bad.body.errors, [{ path: 'group', message: 'must be a group: <digits>@g.us or <digits>-group' }]);
      assert.equal(by(lid.body.messageId).chatLid, '187654321987654@lid');
      const img = by(image.body.messageId);
      assert.equal(img.type, 'image');
      assert.equal(img.text, 'Look');
      assert.equal(img.media.mimetype, 'image/jpeg');
      assert.equal(img.media.downloadAvailable, true);
      const file = await fetch(img.media.url);
      assert.equal(file.status, 200, 'signed link works without a credential');
      assert.deepEqual(Buffer.from(await file.arrayBuffer()), mediaFixtures.jpg.bytes());
      assert.equal(by(own.body.messageId).fromMe, true);
      assert.equal(by(own.body.messageId).fromApi, false);
      const received = await waitForEvent(t.admin, inst.id, (e) => e.type === 'message.received' && e.data.messageId === text.body.messageId, 'message.received');
      for (const field of ['messageId', 'from', 'phone', 'chatLid', 'participant', 'fromMe', 'fromApi', 'name', 'type', 'text']) assert.ok(field in received.data, field);
    });

    it('cancels queued sends only', async () => {
      const paused = await createConnectedInstance(t.admin, '5511900000002');
      // Not connected: a dropped, logged-out session keeps sends queued.
      await t.admin.post(`/sandbox/instances/${paused.id}/drop`, { reason: 'logged_out' });
      await waitForState(t.admin, paused.id, 'logged_out');
      const res = await t.client(paused.apiToken).post(`/api/instances/${paused.id}/messages`, { phone: '5511988887777', type: 'text', text: 'wait' });
      assert.equal(res.status, 202);
      const cancelled = await t.client(paused.apiToken).delete(`/api/instances/${paused.id}/messages/${res.body.id}`);
      assert.equal(cancelled.status, 200);
      assert.equal(cancelled.body.status, 'cancelled');
      // The outcome reaches webhook consumers on both streams: message.failed and a `failed` status.
      const failed = (await eventsOf(t.admin, paused.id, 'message.failed')).filter((e) => e.data.messageId === res.body.id);
      assert.deepEqual(failed.map((e) => e.data.error.code), ['cancelled']);
      assert.deepEqual(cancelled.body.error, failed[0].data.error, 'the item says why, as its event does');
      assert.deepEqual((await t.admin.get(`/api/instances/${paused.id}/messages/${res.body.id}`)).body.error, failed[0].data.error);
      const statuses = (await eventsOf(t.admin, paused.id, 'message.status')).filter((e) => e.data.messageId === res.body.id);
      assert.deepEqual(statuses.map((e) => e.data), [{ messageId: res.body.id, messengerId: res.body.messengerId, status: 'failed' }]);
      const twice = await t.client(paused.apiToken).delete(`/api/instances/${paused.id}/messages/${res.body.id}`);
      assert.equal(twice.status, 409);
      assert.equal(twice.body.code, 'not_cancellable');
      assert.equal((await t.admin.delete(`/api/instances/${paused.id}/messages/msg_absent`)).status, 404);
    });

    it('refuses sends to a paused instance and, with disableOfflineQueue, to an offline one', async () => {
      const other = await createConnectedInstance(t.admin, '5511900000003');
      await t.admin.put(`/api/instances/${other.id}/settings`, { disableOfflineQueue: true });
      await t.admin.post(`/sandbox/instances/${other.id}/drop`, { reason: 'logged_out' });
      const loggedOut = await waitForState(t.admin, other.id, 'logged_out');
      assert.equal(loggedOut.phone, null, 'the record is unlinked');
      const logout = (await eventsOf(t.admin, other.id, 'connection.update')).find((e) => e.data.state === 'logged_out');
      assert.deepEqual(logout?.data, { state: 'logged_out', previousState: 'connected', phone: '5511900000003', reason: 'logged_out' }, 'the event names the phone that left');
      const offline = await t.admin.post(`/api/instances/${other.id}/messages`, { phone: '5511988887777', type: 'text', text: 'x' });
      assert.equal(offline.status, 409);
      assert.equal(offline.body.code, 'instance_offline');
      const disconnected = await t.admin.post(`/api/instances/${other.id}/disconnect`);
      assert.equal(disconnected.body.paused, true);
      assert.equal(disconnected.body.state, 'stopped');
      const paused = await t.admin.post(`/api/instances/${other.id}/messages`, { phone: '5511988887777', type: 'text', text: 'x' });
      assert.equal(paused.status, 409);
      assert.equal(paused.body.code, 'instance_paused');
      // A send that can never succeed is told why (400, 413, 422), not to retry once connected.
      const image = { phone: '5511988887777', type: 'image', base64: Buffer.from('png').toString('base64'), mimetype: 'image/png' };
      const hopeless: [Record<string, unknown>, number, string][] = [
        [{ ...image, mimetype: 'audio/mpeg' }, 400, 'validation_failed'],
        [{ ...image, ptt: true }, 422, 'unsupported_option'],
        [{ ...image, base64: 'not base64!' }, 400, 'invalid_base64'],
        [{ ...image, base64: Buffer.alloc(32 * 1024 * 1024 + 1).toString('base64') }, 413, 'media_too_large'],
      ];
      for (const [body, status, code] of hopeless) {
        const res = await t.admin.post(`/api/instances/${other.id}/messages`, body);
        assert.deepEqual([res.status, res.body.code], [status, code], JSON.stringify(body).slice(0, 80));
      }
      assert.equal((await t.admin.post(`/api/instances/${other.id}/messages`, image)).body.code, 'instance_paused');
    });

    it('disconnect keeps credentials; reset requires a new pairing', async () => {
      const x = await createConnectedInstance(t.admin, '5511900000004');
      await t.admin.post(`/api/instances/${x.id}/disconnect`);
      await waitForState(t.admin, x.id, 'stopped');
      const back = await t.admin.post(`/api/instances/${x.id}/connect`);
      assert.equal(back.body.paused, false);
      const connected = await waitForState(t.admin, x.id, 'connected');
      assert.equal(connected.phone, '5511900000004', 'no new scan needed');
      await t.admin.post(`/api/instances/${x.id}/reset`);
      const awaiting = await waitForState(t.admin, x.id, 'awaiting_scan');
      assert.ok(awaiting.qrCode);
      assert.match(awaiting.qrImage, /^data:image\/png;base64,/);
    });

    it('a reset of a disconnected instance unlinks it with a connection.update of its own', async () => {
      const x = await createConnectedInstance(t.admin, '5511900000006');
      await t.admin.post(`/api/instances/${x.id}/disconnect`);
      await waitForState(t.admin, x.id, 'stopped');
      const reset = await t.admin.post(`/api/instances/${x.id}/reset`);
      assert.equal(reset.status, 200, JSON.stringify(reset.body));
      assert.deepEqual([reset.body.state, reset.body.paused, reset.body.phone], ['stopped', true, null]);
      const events = (await t.admin.get(`/api/instances/${x.id}/events`)).body.data;
      const newest = events.find((e: any) => e.type === 'connection.update');
      // The event names the phone the reset unlinked; the record has none any more.
      assert.deepEqual(newest.data, { state: 'stopped', previousState: 'stopped', phone: '5511900000006', reason: 'reset' });
    });

    it('issues pairing codes once per interval, never when connected, and completes pairing', async () => {
      assert.equal((await t.admin.post(`/api/instances/${inst.id}/pairing-code`, { phone: '5511900000001' })).status, 409);
      const fresh = (await t.admin.post('/api/instances', { name: 'Pairing' })).body;
      const invalid = await t.admin.post(`/api/instances/${fresh.id}/pairing-code`, { phone: '+55 11' });
      assert.equal(invalid.status, 400);
      const unauthenticated = await t.client('no-such-key').post(`/api/instances/${fresh.id}/pairing-code`, { phone: '5511900000005' });
      assert.equal(unauthenticated.status, 401);
      for (const refusal of [invalid, unauthenticated]) assert.equal(refusal.headers.get('cache-control'), 'no-store', 'refused before the handler runs');
      const code = await t.admin.post(`/api/instances/${fresh.id}/pairing-code`, { phone: '5511900000005' });
      assert.equal(code.status, 200, JSON.stringify(code.body));
      assert.equal(code.headers.get('cache-control'), 'no-store');
      assert.equal(typeof code.body.code, 'string');
      assert.ok(Date.parse(code.body.expiresAt) > Date.now());
      const again = await t.admin.post(`/api/instances/${fresh.id}/pairing-code`, { phone: '5511900000005' });
      assert.equal(again.status, 429);
      assert.ok(Number(again.headers.get('retry-after')) >= 1);
      const rateHeaders = ['ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset'].map((h) => again.headers.get(h));
      assert.deepEqual(rateHeaders, ['1', '0', again.headers.get('retry-after')], 'the headers describe the pairing limit, not the per-address one');
      assert.equal(again.headers.get('cache-control'), 'no-store', 'a refusal of this route is not stored either');
      assert.match(again.body.detail, /one pairing code per minute/, 'the default interval, named');
      assert.equal((await t.admin.post(`/sandbox/instances/${fresh.id}/pair`, { code: code.body.code })).status, 200);
      await waitForState(t.admin, fresh.id, 'connected');
      const events = await t.admin.get(`/api/instances/${fresh.id}/events`);
      assert.ok(!events.text.includes(code.body.code), 'pairing codes never appear in events');
    });

    it('pairs a disconnected instance that kept its phone afresh: the old link is given up, the code links the new phone', async () => {
      const x = await createConnectedInstance(t.admin, '5511900000007');
      await t.admin.post(`/api/instances/${x.id}/disconnect`);
      await waitForState(t.admin, x.id, 'stopped');
      const code = await t.admin.post(`/api/instances/${x.id}/pairing-code`, { phone: '5511900000008' });
      assert.equal(code.status, 200, JSON.stringify(code.body));
      assert.equal(code.headers.get('cache-control'), 'no-store');
      const started = (await t.admin.get(`/api/instances/${x.id}`)).body;
      assert.deepEqual([started.paused, started.phone], [false, null], 'running again, without the old link');
      const unlinked = (await eventsOf(t.admin, x.id, 'connection.update')).find((e) => e.data.reason === 'reset');
      assert.equal(unlinked?.data.phone, '5511900000007', 'the event names the phone whose link was given up');
      assert.equal((await t.admin.post(`/sandbox/instances/${x.id}/pair`, { code: code.body.code })).status, 200);
      const paired = await waitForState(t.admin, x.id, 'connected');
      assert.equal(paired.phone, '5511900000008');
      // Rule 4: a connected instance is the one that gets 409.
      const again = await t.admin.post(`/api/instances/${x.id}/pairing-code`, { phone: '5511900000008' });
      assert.deepEqual([again.status, again.body.code], [409, 'already_connected']);
    });

    it('reconnects a connected instance after a restart, without a new scan, and loses no queued send', async () => {
      const res = await send({ phone: '5511988887777', type: 'text', text: 'before restart' });
      const unpaired = (await t.admin.post('/api/instances', { name: 'Never paired' })).body;
      const qrBefore = (await waitForState(t.admin, unpaired.id, 'awaiting_scan')).qrCode;
      await t.restart();
      const back = await waitForState(t.admin, inst.id, 'connected');
      assert.equal(back.phone, '5511900000001');
      // The restart is told as one: the new session's start, then connected again.
      const [reconnected, started] = await eventsOf(t.admin, inst.id, 'connection.update');
      assert.deepEqual([started.data.state, started.data.reason], ['starting', 'session_started']);
      assert.deepEqual([reconnected.data.previousState, reconnected.data.state], ['starting', 'connected']);
      const item = await waitForSendStatus(t.admin, inst.id, res.body.id, ['read', 'uncertain']);
      assert.ok(item);
      // A started instance that was never paired is back too, with a new QR code.
      await eventually(async () => {
        const got = (await t.admin.get(`/api/instances/${unpaired.id}`)).body;
        return got.state === 'awaiting_scan' && got.qrCode && got.qrCode !== qrBefore;
      }, 10_000, 'a new QR code after the restart');
    });
  });
}

describe('pairing nobody completes (PAIRING_TIMEOUT_MS)', function () {
  this.timeout(60_000);
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ env: { PAIRING_TIMEOUT_MS: '3000' } });
  });
  after(async () => t?.stop());

  async function givenUp(name: string): Promise<string> {
    const { id } = (await t.admin.post('/api/instances', { name })).body;
    await waitForState(t.admin, id, 'awaiting_scan');
    const record = await waitForState(t.admin, id, 'logged_out', 15_000);
    assert.deepEqual([record.qrCode, record.qrImage, record.paused], [null, null, false], 'no QR, and not paused');
    const event = await waitForEvent(t.admin, id, (e) => e.type === 'connection.update' && e.data.state === 'logged_out', 'its event');
    assert.deepEqual([event.data.previousState, event.data.reason], ['awaiting_scan', 'pairing_timeout']);
    const scan = await t.admin.post(`/sandbox/instances/${id}/scan`, { phone: '5511900000009' });
    assert.deepEqual([scan.status, scan.body.code], [409, 'not_awaiting_scan'], 'no QR to scan any more');
    return id;
  }

  it('stops showing QR codes (logged_out, reason pairing_timeout); a connect shows them again', async () => {
    const id = await givenUp('Nobody scans');
    assert.equal((await t.admin.post(`/api/instances/${id}/connect`)).status, 200);
    await waitForState(t.admin, id, 'awaiting_scan');
    assert.equal((await t.admin.post(`/sandbox/instances/${id}/scan`, { phone: '5511900000009' })).status, 200);
    await waitForState(t.admin, id, 'connected');
  });

  it('a pairing-code request after the time-out starts pairing again', async () => {
    const id = await givenUp('Nobody types the code');
    const code = await t.admin.post(`/api/instances/${id}/pairing-code`, { phone: '5511900000008' });
    assert.equal(code.status, 200, JSON.stringify(code.body));
    assert.equal((await t.admin.post(`/sandbox/instances/${id}/pair`, { code: code.body.code })).status, 200);
    await waitForState(t.admin, id, 'connected');
  });
});

for (const storage of ['postgres', 'pglite'] as const) {
  describe(`send queue limit (${storage})`, function () {
    this.timeout(120_000);
    let t: TestServer;
    before(async () => {
      t = await startTestServer({ storage });
    });
    after(async () => t?.stop());

    it('answers 429 queue_full beyond 1000 queued sends, exactly under concurrency, and frees a slot per item leaving the queue', async () => {
      const inst = (await t.admin.post('/api/instances', { name: 'Never connected' })).body;
      const body = { phone: '5511988887777', type: 'text', text: 'queued' };
      const send = () => t.admin.post(`/api/instances/${inst.id}/messages`, body);
      for (let i = 0; i < 990; i += 55) {
        const batch = await Promise.all(Array.from({ length: Math.min(55, 990 - i) }, send));
        assert.ok(batch.every((r) => r.status === 202), JSON.stringify(batch.find((r) => r.status !== 202)?.body));
      }
      // 30 at once for the last 10 slots: exactly 10 get in.
      const edge = await Promise.all(Array.from({ length: 30 }, send));
      assert.equal(edge.filter((r) => r.status === 202).length, 10);
      const refused = edge.filter((r) => r.status === 429);
      assert.equal(refused.length, 20);
      assert.equal(refused[0].body.code, 'queue_full');
      assert.ok(Number(refused[0].headers.get('retry-after')) > 0);

      // Cancelling one queued item frees exactly one slot.
      const queued = edge.find((r) => r.status === 202)!.body.id;
      assert.equal((await t.admin.delete(`/api/instances/${inst.id}/messages/${queued}`)).status, 200);
      assert.equal((await send()).status, 202);
      assert.equal((await send()).status, 429);
    });

    it('a reused Idempotency-Key takes no queue slot, is answered while paused, and is free again after 24 h', async () => {
      const inst = (await t.admin.post('/api/instances', { name: 'Keys' })).body;
      const db = t.server.platform.db;
      const queued = async () => (await db('instances').where({ id: inst.id }).first('queued_count')).queued_count;
      const send = (text: string, key: string) => t.admin.post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'text', text }, { 'Idempotency-Key': key });
      const first = await send('Once', 'key-1');
      assert.equal(first.status, 202);
      assert.equal((await send('Once', 'key-1')).body.reused, true);
      assert.equal(await queued(), 1, 'the retry took no slot');

      assert.equal((await t.admin.post(`/api/instances/${inst.id}/disconnect`)).status, 200);
      const retried = await send('Once', 'key-1');
      assert.deepEqual([retried.status, retried.body.id, retried.body.reused], [202, first.body.id, true]);
      assert.equal((await send('New', 'key-2')).body.code, 'instance_paused');
      assert.equal((await t.admin.post(`/api/instances/${inst.id}/connect`)).status, 200);

      await db('send_items').where({ id: first.body.id }).update({ created_at: new Date(Date.now() - 25 * 3600_000) });
      const fresh = await send('Other content', 'key-1');
      assert.equal(fresh.status, 202);
      assert.equal(fresh.body.reused, false);
      assert.notEqual(fresh.body.id, first.body.id);
    });
  });
}

describe('send expiry', function () {
  this.timeout(60_000);
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ storage: 'postgres', env: { SEND_EXPIRY_MS: '1500' } });
  });
  after(async () => t?.stop());

  it('expires queued sends after SEND_EXPIRY_MS with a message.failed event, even offline', async () => {
    const inst = (await t.admin.post('/api/instances', { name: 'Offline' })).body;
    const res = await t.admin.post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'text', text: 'too late' });
    const item = await waitForSendStatus(t.admin, inst.id, res.body.id, ['expired'], 15_000);
    assert.equal(item.status, 'expired');
    const failed = await waitForEvent(t.admin, inst.id, (e) => e.type === 'message.failed' && e.data.messageId === res.body.id, 'expired event');
    assert.equal(failed.data.error.code, 'expired');
  });

  it('refuses to cancel an item past its time that the sweeper has not reached yet: it is expired', async () => {
    const inst = (await t.admin.post('/api/instances', { name: 'Offline' })).body;
    const res = await t.admin.post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'text', text: 'too late' });
    // Due this very moment: the DELETE below comes before any sweep (the rule is the same if one wins).
    const db = t.server.platform.db;
    await db('send_items').where({ id: res.body.id }).update({ expires_at: new Date(Date.now() - 1) });
    const refused = await t.admin.delete(`/api/instances/${inst.id}/messages/${res.body.id}`);
    assert.equal(refused.status, 409, JSON.stringify(refused.body));
    assert.equal(refused.body.code, 'not_cancellable');
    assert.match(refused.body.detail, /expired/);
    const item = (await t.admin.get(`/api/instances/${inst.id}/messages/${res.body.id}`)).body;
    assert.equal(item.status, 'expired');
    assert.equal(item.error.code, 'expired');
    const failed = (await eventsOf(t.admin, inst.id, 'message.failed')).filter((e) => e.data.messageId === res.body.id);
    assert.deepEqual(failed.map((e) => e.data.error.code), ['expired'], 'expired once, whoever got there first');
  });
});

/** A POST whose header is sent as several lines (fetch would join them into one). */
function postWithHeaderLines(url: string, token: string, body: unknown, [name, values]: [string, string[]]): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', [name]: values } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

describe('send order across a restart (the embedded server on PostgreSQL, in-process bus)', function () {
  this.timeout(120_000);
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ storage: 'postgres' });
  });
  after(async () => t?.stop());

  it('sends the sends queued before a restart ahead of those accepted while the sessions come back', async () => {
    // Sessions come back one after another: twenty unpaired instances first keep the last one
    // waiting while the API already takes sends for it.
    for (let i = 0; i < 40; i++) await t.admin.post('/api/instances', { name: `Waiting ${i}` });
    const inst = (await t.admin.post('/api/instances', { name: 'Last to resume' })).body;
    const send = (text: string) => t.client(inst.apiToken).post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'text', text });
    const older = await send('queued before the restart');
    assert.equal(older.status, 202);
    const restarting = t.restart();
    // The in-process bus lost every command: the first send the new process takes must still go second.
    const newer = await eventually(async () => {
      const res = await send('accepted during the restart').catch(() => undefined);
      return res?.status === 202 ? res : undefined;
    }, 60_000, 'a send accepted while the sessions come back', 2);
    await restarting;
    await waitForState(t.admin, inst.id, 'awaiting_scan');
    assert.equal((await t.admin.post(`/sandbox/instances/${inst.id}/scan`, { phone: '5511900000002' })).status, 200);
    for (const id of [older.body.id, newer.body.id]) await waitForSendStatus(t.admin, inst.id, id, ['sent', 'delivered', 'read']);
    const sent = (await eventsOf(t.admin, inst.id, 'message.sent')).reverse().map((e) => e.data.messageId);
    assert.deepEqual(sent, [older.body.id, newer.body.id]);
  });
});

describe('an instance paused by a process killed before it stopped the session (embedded)', function () {
  this.timeout(60_000);
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
  });
  after(async () => t?.stop());

  it('is recorded stopped at the next start, with its connection.update', async () => {
    const inst = await createConnectedInstance(t.admin, '5511900000003', { name: 'Paused, then killed' });
    // What a kill -9 right after the disconnect's first write leaves: paused, yet still `connected`.
    await t.server.platform.db('instances').where({ id: inst.id }).update({ paused: true });
    await t.restart();
    const back = (await t.admin.get(`/api/instances/${inst.id}`)).body;
    assert.deepEqual([back.state, back.connected, back.paused], ['stopped', false, true]);
    const [last] = await eventsOf(t.admin, inst.id, 'connection.update');
    assert.deepEqual([last.data.previousState, last.data.state, last.data.reason], ['connected', 'stopped', 'paused']);
  });
});
