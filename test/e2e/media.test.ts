// Media end to end: every type round-trips through the sandbox byte for byte, downloads carry the
// right headers, signed links expire and refuse tampering, and retention removes old files.
import assert from 'node:assert/strict';
import { MediaNotFoundError } from '@switchboard/core';
import { startTestServer, type TestServer } from '../support/server.ts';
import { eventually } from '../support/http.ts';
import { mediaFixtures } from '../fixtures/media/index.ts';
import { createConnectedInstance, waitForSendStatus } from './support.ts';

describe('media end to end', function () {
  this.timeout(60_000);
  let t: TestServer;
  let inst: { id: string; apiToken: string };

  before(async () => {
    t = await startTestServer({ env: { MEDIA_LINK_TTL_SECONDS: '2', SANDBOX_RECEIPT_DELAY_MS: '5' } });
    inst = await createConnectedInstance(t.admin, '5511900000020');
  });
  after(async () => t?.stop());

  /** The network echoes an API send as an own message; its media is what the network received. */
  async function echoedMedia(messengerId: string) {
    const echo = await eventually(async () => {
      const list = (await t.admin.get(`/api/instances/${inst.id}/incoming`)).body.data as any[];
      return list.find((m) => m.messageId === messengerId);
    }, 10_000, `echo of ${messengerId}`);
    return echo.media;
  }

  it('round-trips every media type byte for byte', async () => {
    const cases = [
      { fixture: mediaFixtures.jpg, type: 'image' },
      { fixture: mediaFixtures.mp4, type: 'video' },
      { fixture: mediaFixtures.mp3, type: 'audio' },
      { fixture: mediaFixtures.pdf, type: 'document', fileName: 'contract.pdf' },
      { fixture: mediaFixtures.sticker, type: 'sticker' },
    ];
    for (const c of cases) {
      const res = await t.client(inst.apiToken).post(`/api/instances/${inst.id}/messages`, {
        phone: '5511988887777',
        type: c.type,
        base64: c.fixture.base64(),
        mimetype: c.fixture.mimetype,
        ...(c.fileName ? { fileName: c.fileName } : {}),
      });
      assert.equal(res.status, 202, JSON.stringify(res.body));
      await waitForSendStatus(t.admin, inst.id, res.body.id, ['read']);
      const media = await echoedMedia(res.body.messengerId);
      const file = await fetch(media.url);
      assert.equal(file.status, 200);
      assert.deepEqual(Buffer.from(await file.arrayBuffer()), c.fixture.bytes(), `${c.type} bytes`);
      assert.equal(file.headers.get('content-type'), c.fixture.mimetype);
      assert.equal(file.headers.get('content-length'), String(c.fixture.bytes().length));
      if (c.fileName) assert.match(file.headers.get('content-disposition') ?? '', /filename="contract\.pdf"/);
    }
  });

  it('converts ptt audio to an Ogg Opus voice note', async () => {
    const res = await t.admin.post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'audio', base64: mediaFixtures.wav.base64(), mimetype: 'audio/wav', ptt: true });
    assert.equal(res.status, 202);
    await waitForSendStatus(t.admin, inst.id, res.body.id, ['played']);
    const media = await echoedMedia(res.body.messengerId);
    assert.equal(media.voiceNote, true);
    const bytes = Buffer.from(await (await fetch(media.url)).arrayBuffer());
    assert.equal(bytes.subarray(0, 4).toString('latin1'), 'OggS');
    assert.ok(bytes.includes(Buffer.from('OpusHead')), 'an Opus stream');
  });

  it('serves downloads to credentials of the instance, refuses others, and checks signed links', async () => {
    const inbound = await t.admin.post(`/sandbox/instances/${inst.id}/inbound`, { from: '5511977776666', type: 'document', mediaBase64: mediaFixtures.pdf.base64(), mimetype: 'application/pdf', fileName: 'report Ü.pdf' });
    const record = await eventually(async () => ((await t.admin.get(`/api/instances/${inst.id}/incoming`)).body.data as any[]).find((m) => m.messageId === inbound.body.messageId));
    const link = new URL(record.media.url);
    const path = link.pathname;
    const withToken = await t.client(inst.apiToken).request('GET', path);
    assert.equal(withToken.status, 200);
    const raw = await fetch(t.url + path, { headers: { authorization: `Bearer ${inst.apiToken}` } });
    assert.match(raw.headers.get('content-disposition') ?? '', /filename\*=UTF-8''report%20%C3%9C\.pdf/);
    assert.equal((await t.client().get(path)).status, 401, 'no credential, no link');
    const other = (await t.admin.post('/api/instances', { name: 'Other' })).body;
    assert.equal((await t.client(other.apiToken).get(path)).status, 403);

    // Links live MEDIA_LINK_TTL_SECONDS (2) counted in whole seconds, so as little as 1 s. Checks
    // that need a live link count only when they all ran before it expired; otherwise they run
    // again on a fresh link (a slow machine), never on a stale one.
    const freshLink = async () => {
      const list = (await t.admin.get(`/api/instances/${inst.id}/incoming`)).body.data as any[];
      return new URL(list.find((m) => m.messageId === inbound.body.messageId).media.url);
    };
    const expiresAt = (u: URL) => Number(u.searchParams.get('expires')) * 1000;
    let live: URL | undefined;
    for (let tries = 0; !live; tries++) {
      assert.ok(tries < 5, 'five links in a row expired before their checks ran: the machine is far too slow');
      const candidate = await freshLink();
      const signature = candidate.searchParams.get('signature')!;
      const flipped = signature.slice(0, -1) + (signature.endsWith('0') ? '1' : '0');
      const forged = new URL(candidate);
      forged.searchParams.set('signature', flipped);
      const forgedRes = await fetch(forged);
      const extended = new URL(candidate);
      extended.searchParams.set('expires', String(Number(candidate.searchParams.get('expires')) + 3600));
      const extendedStatus = (await fetch(extended)).status;
      const malformed: [string, number][] = [];
      for (const query of ['?expires=111111111111111111111&signature=abc', `?expires=1&expires=2&signature=${signature}`, `?expires=1&signature=${'a'.repeat(200)}`, '?expires=1&signature=%00', '?expires=%ED%A0%80&signature=abc']) {
        malformed.push([query, (await fetch(t.url + path + query)).status]);
      }
      // The link grants the download by itself, whatever Authorization header comes with it.
      const granted = [
        (await fetch(candidate, { headers: { authorization: 'Bearer not-a-token' } })).status,
        (await fetch(candidate, { headers: { authorization: `Bearer ${other.apiToken}` } })).status,
        (await fetch(candidate)).status,
      ];
      if (Date.now() >= expiresAt(candidate)) continue; // expired meanwhile: the answers prove nothing
      assert.equal(forgedRes.status, 401);
      assert.match(forgedRes.headers.get('content-type') ?? '', /problem\+json/);
      assert.equal(extendedStatus, 401, 'the expiry is signed');
      for (const [query, status] of malformed) assert.equal(status, 401, `a malformed link is a forged one: ${query}`);
      assert.deepEqual(granted, [200, 200, 200]);
      live = candidate;
    }
    // Once its expiry has passed (by the clock that signed it), the same link is refused.
    await new Promise((r) => setTimeout(r, Math.max(0, expiresAt(live) - Date.now()) + 100));
    assert.equal((await fetch(live)).status, 401, 'expired');
    assert.equal((await t.client(inst.apiToken).get(`/api/instances/${inst.id}/media/med_absent`)).status, 404);
    // An id no record can have still gets 401 without access, and 403 for another instance's
    // credential, as every other id does: the caller is checked before the id.
    for (const odd of [`/api/instances/%00/media/x`, `/api/instances/${inst.id}/media/x%00`]) {
      const anonymous = await fetch(t.url + odd);
      assert.equal(anonymous.status, 401, odd);
      assert.equal(anonymous.headers.get('www-authenticate'), 'Bearer');
    }
    assert.equal((await t.client(other.apiToken).get(`/api/instances/${inst.id}%00/media/x`)).status, 403);
  });

  it('serves media whose sender gave a mimetype no header can carry as plain bytes, not a 500', async () => {
    const inbound = await t.admin.post(`/sandbox/instances/${inst.id}/inbound`, { from: '5511977776666', type: 'document', mediaBase64: mediaFixtures.pdf.base64(), mimetype: 'application/p€f', fileName: 'odd.pdf' });
    const record = await eventually(async () => ((await t.admin.get(`/api/instances/${inst.id}/incoming`)).body.data as any[]).find((m) => m.messageId === inbound.body.messageId));
    const res = await fetch(t.url + new URL(record.media.url).pathname, { headers: { authorization: `Bearer ${inst.apiToken}` } });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'application/octet-stream');
    assert.ok(Buffer.from(await res.arrayBuffer()).equals(Buffer.from(mediaFixtures.pdf.base64(), 'base64')));
    // Nor one that is no media type: served as plain bytes, never as a type a browser would guess at.
    for (const mimetype of ['bogus', '   ', 'application/pdf\n;x=1', 'application/pdf\u2028;x=1', 'application/pdf\u00a0;x=1']) {
      const odd = await t.admin.post(`/sandbox/instances/${inst.id}/inbound`, { from: '5511977776666', type: 'document', mediaBase64: mediaFixtures.pdf.base64(), mimetype, fileName: 'odd.pdf' });
      const oddRecord = await eventually(async () => ((await t.admin.get(`/api/instances/${inst.id}/incoming`)).body.data as any[]).find((m) => m.messageId === odd.body.messageId));
      const download = await fetch(t.url + new URL(oddRecord.media.url).pathname, { headers: { authorization: `Bearer ${inst.apiToken}` } });
      assert.equal(download.headers.get('content-type'), 'application/octet-stream', JSON.stringify(mimetype));
    }
    const quoted = await t.client(inst.apiToken).post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'document', base64: mediaFixtures.pdf.base64(), mimetype: 'application/pdf; name="€"' });
    assert.equal(quoted.status, 400, 'an API mimetype must be header-safe');
  });

  it('stores a send\'s mimetype with its type and subtype lowercased, and serves it so', async () => {
    const res = await t.client(inst.apiToken).post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'image', base64: mediaFixtures.png.base64(), mimetype: ' IMAGE/PNG ' });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    const media = await echoedMedia(res.body.messengerId);
    assert.equal(media.mimetype, 'image/png');
    assert.equal((await fetch(media.url)).headers.get('content-type'), 'image/png');
  });

  it('downloads keep a long file name and mimetype whole, in headers a strict parser takes', async () => {
    const fileName = `it's (1)*!${'😀'.repeat(245)}`; // 255 characters, the API's limit
    const mimetype = `application/pdf; x="${'b'.repeat(200)}"`;
    const res = await t.client(inst.apiToken).post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'document', base64: mediaFixtures.pdf.base64(), mimetype, fileName });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    const media = await echoedMedia(res.body.messengerId);
    const file = await fetch(media.url);
    assert.equal(file.status, 200);
    assert.equal(file.headers.get('content-type'), mimetype);
    const extended = /filename\*=UTF-8''(\S+)$/.exec(file.headers.get('content-disposition') ?? '')?.[1] ?? '';
    assert.match(extended, /^[A-Za-z0-9!#$&+\-.^_`|~%]+$/, 'RFC 8187 attr-chars and percent-escapes only');
    assert.equal(decodeURIComponent(extended), fileName);
  });

  it('announces failed downloads and view-once media without archiving them', async () => {
    const failed = await t.admin.post(`/sandbox/instances/${inst.id}/inbound`, { from: '5511977776666', type: 'image', mimetype: 'image/jpeg', mediaUnavailable: true });
    const once = await t.admin.post(`/sandbox/instances/${inst.id}/inbound`, { from: '5511977776666', type: 'image', mediaBase64: mediaFixtures.jpg.base64(), mimetype: 'image/jpeg', viewOnce: true });
    const list = await eventually(async () => {
      const data = (await t.admin.get(`/api/instances/${inst.id}/incoming`)).body.data as any[];
      const a = data.find((m) => m.messageId === failed.body.messageId);
      const b = data.find((m) => m.messageId === once.body.messageId);
      return a && b && { a, b };
    });
    assert.equal(list.a.media.url, null);
    assert.equal(list.a.media.downloadAvailable, false);
    assert.equal(typeof list.a.media.error, 'string');
    assert.equal(list.b.media.url, null, 'view-once media is not archived');
    const events = (await t.admin.get(`/api/instances/${inst.id}/events`)).body.data as any[];
    const ev = events.find((e) => e.type === 'message.received' && e.data.messageId === failed.body.messageId);
    assert.equal(ev.data.media.url, null);
    assert.equal(ev.data.media.downloadAvailable, false);
    // The event says what the record says: the same media fields, view-once included.
    const onceEvent = events.find((e) => e.type === 'message.received' && e.data.messageId === once.body.messageId);
    assert.equal(list.b.media.viewOnce, true);
    assert.deepEqual(onceEvent.data.media, list.b.media);
    assert.deepEqual(ev.data.media, list.a.media);
  });

  it('keeps no file of a media send answered from an earlier operation or refused', async () => {
    const queued = (await t.admin.post('/api/instances', { name: 'Never connected' })).body; // its sends wait
    const send = (key: string, caption: string) =>
      t.client(queued.apiToken).post(`/api/instances/${queued.id}/messages`, { phone: '5511988887777', type: 'image', base64: mediaFixtures.png.base64(), mimetype: 'image/png', caption }, { 'idempotency-key': key });
    // Retries racing the first request: each stores its file before the key is known to be used.
    const retries = await Promise.all(Array.from({ length: 6 }, () => send('photo-1', 'same')));
    assert.deepEqual(new Set(retries.map((r) => r.status)), new Set([202]));
    assert.equal(new Set(retries.map((r) => r.body.id)).size, 1);
    // The same key with other content at once: one is taken, the others are 409.
    const rivals = await Promise.all(['a', 'b', 'c', 'd'].map((caption) => send('photo-2', caption)));
    assert.deepEqual(rivals.map((r) => r.status).sort(), [202, 409, 409, 409]);
    const db = t.server.platform.db;
    const stored = (await db('media').where({ instance_id: queued.id }).pluck('id')) as string[];
    const referenced = (await db('send_items').where({ instance_id: queued.id }).select('payload')).map((r: { payload: { mediaId: string } }) => r.payload.mediaId);
    assert.deepEqual(stored.sort(), referenced.sort(), 'every stored file belongs to an item');
  });

  it('keeps listings with signed links out of caches, and serves a file as an inert attachment', async () => {
    for (const path of ['incoming', 'events']) {
      const res = await t.client(inst.apiToken).get(`/api/instances/${inst.id}/${path}`);
      assert.equal(res.headers.get('cache-control'), 'no-store', path);
    }
    const html = Buffer.from('<script>alert(1)</script>');
    const inbound = await t.admin.post(`/sandbox/instances/${inst.id}/inbound`, { from: '5511977774444', type: 'document', mediaBase64: html.toString('base64'), mimetype: 'text/html', fileName: 'page.html' });
    assert.equal(inbound.status, 200, JSON.stringify(inbound.body));
    const media = await eventually(async () => ((await t.admin.get(`/api/instances/${inst.id}/incoming`)).body.data as any[]).find((m) => m.messageId === inbound.body.messageId)?.media, 10_000, 'the document');
    const file = await fetch(media.url);
    assert.equal(file.status, 200);
    assert.match(file.headers.get('content-disposition') ?? '', /^attachment/);
    assert.equal(file.headers.get('content-security-policy'), "sandbox; default-src 'none'");
    assert.equal(file.headers.get('x-content-type-options'), 'nosniff');
  });

  it('offers no download of a received file retention has removed', async () => {
    const inbound = await t.admin.post(`/sandbox/instances/${inst.id}/inbound`, { from: '5511977775555', type: 'image', mediaBase64: mediaFixtures.png.base64(), mimetype: 'image/png' });
    assert.equal(inbound.status, 200, JSON.stringify(inbound.body));
    const incoming = async () => ((await t.admin.get(`/api/instances/${inst.id}/incoming`)).body.data as any[]).find((m) => m.messageId === inbound.body.messageId)?.media;
    const media = await eventually(incoming, 10_000, 'the inbound image');
    assert.equal(media.downloadAvailable, true);
    const mediaId = new URL(media.url).pathname.split('/').pop()!;
    await t.server.platform.db('media').where({ id: mediaId }).delete(); // as the retention sweep does
    const after = await incoming();
    assert.equal(after.url, null);
    assert.equal(after.downloadAvailable, false);
    assert.match(after.error, /^media_expired: /);
    assert.equal((await fetch(media.url)).status, 404, 'the old link finds nothing');
  });

  it('reports media in diagnostics', async () => {
    const diag = await t.admin.get('/api/diagnostics');
    assert.ok(diag.body.media.count > 0);
    assert.ok(diag.body.media.bytes > 0);
  });

  it("deletes an instance's media files with the instance", async () => {
    const doomed = await createConnectedInstance(t.admin, '5511900000021');
    const inbound = await t.admin.post(`/sandbox/instances/${doomed.id}/inbound`, { from: '5511977776666', type: 'image', mediaBase64: mediaFixtures.png.base64(), mimetype: 'image/png' });
    assert.equal(inbound.status, 200, JSON.stringify(inbound.body));
    const media = await eventually(async () => {
      const list = (await t.admin.get(`/api/instances/${doomed.id}/incoming`)).body.data as any[];
      return list.find((m) => m.messageId === inbound.body.messageId)?.media;
    }, 10_000, 'the inbound image');
    const mediaId = new URL(media.url).pathname.split('/').pop()!;
    const { media: store } = t.server.platform;
    assert.ok((await store.get(mediaId)).length > 0);
    assert.equal((await t.admin.delete(`/api/instances/${doomed.id}`)).status, 200);
    await eventually(async () => store.get(mediaId).then(() => undefined, (err: unknown) => err instanceof MediaNotFoundError || undefined), 10_000, 'the file removed');
  });
});
