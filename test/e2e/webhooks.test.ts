// Webhooks end to end: a real HTTPS receiver gets signed events from the running server, routed
// per event type, retried, exhausted, retried by hand and cancelled as the contract says.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { startTestServer, type TestServer } from '../support/server.ts';
import { startHttpsReceiver, type HttpsReceiver, type ReceivedRequest } from '../support/https-receiver.ts';
import { eventually } from '../support/http.ts';
import { createConnectedInstance, waitForEvent } from './support.ts';

/** What a client is told to do: verify the raw body before parsing, in constant time. */
function verify(req: ReceivedRequest, secret: string): void {
  const timestamp = req.headers['x-service-timestamp'];
  assert.match(timestamp, /^\d+$/);
  assert.ok(Math.abs(Date.now() / 1000 - Number(timestamp)) < 300, 'fresh timestamp');
  const expected = `sha256=${createHmac('sha256', Buffer.from(secret, 'utf8')).update(`${timestamp}.`).update(req.rawBody).digest('hex')}`;
  assert.equal(req.headers['x-service-signature'], expected);
  const body = JSON.parse(req.rawBody.toString('utf8'));
  assert.equal(req.headers['x-service-event-id'], body.id);
  assert.match(req.headers['content-type'], /^application\/json/);
  assert.deepEqual(Object.keys(body).sort(), ['createdAt', 'data', 'id', 'instanceId', 'type']);
}

const bodyOf = (r: ReceivedRequest) => JSON.parse(r.rawBody.toString('utf8'));

describe('webhooks end to end', function () {
  this.timeout(60_000);
  let t: TestServer;
  let receiver: HttpsReceiver;

  before(async () => {
    receiver = await startHttpsReceiver();
    t = await startTestServer({
      storage: 'postgres',
      env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_RETRY_SCHEDULE: '0,20,20,20,20,20,20,20', SANDBOX_RECEIPT_DELAY_MS: '5' },
    });
  });
  after(async () => {
    await t?.stop();
    await receiver?.close();
  });

  it('delivers signed events routed per type, and the test event on the general URL', async () => {
    const inst = await createConnectedInstance(t.admin, '5511900000010');
    const saved = await t.admin.put(`/api/instances/${inst.id}/webhook`, {
      url: receiver.url('/all'),
      delivery: receiver.url('/delivery'),
      status: receiver.url('/status'),
      received: receiver.url('/received'),
      presence: receiver.url('/presence'),
      settings: { notifyFromMe: false },
    });
    assert.equal(saved.status, 200, JSON.stringify(saved.body));
    const secret: string = saved.body.secret;

    const send = await t.admin.post(`/api/instances/${inst.id}/messages`, { phone: '5511988887777', type: 'text', text: 'hook me' });
    const inbound = await t.admin.post(`/sandbox/instances/${inst.id}/inbound`, { from: '5511977776666', type: 'text', text: 'hello' });
    const presence = await t.admin.post(`/sandbox/instances/${inst.id}/presence`, { from: '5511977776666', presence: 'composing', lid: '4242@lid' });
    assert.equal(presence.status, 200, JSON.stringify(presence.body));
    const test = await t.admin.post(`/api/instances/${inst.id}/webhook/test`);
    assert.equal(test.status, 200);

    const reqs = await receiver.waitForRequests(6, 15_000, (r) => bodyOf(r).instanceId === inst.id && ['message.sent', 'message.status', 'message.received', 'chat.presence', 'webhook.test'].includes(bodyOf(r).type));
    for (const r of reqs) verify(r, secret);
    const byType = (type: string) => receiver.requests.filter((r) => bodyOf(r).instanceId === inst.id && bodyOf(r).type === type);
    // Six requests can be the three statuses and three others: wait for each kind, not a count.
    const arrived = () => ['message.sent', 'message.received', 'chat.presence', 'webhook.test'].every((type) => byType(type).length > 0);
    await eventually(async () => arrived() && byType('message.status').some((r) => bodyOf(r).data.status === 'read'), 10_000, 'every kind, and the read status');
    assert.ok(byType('message.sent').every((r) => r.path === '/delivery'));
    assert.ok(byType('message.status').every((r) => r.path === '/status'));
    assert.equal(bodyOf(byType('message.sent')[0]).data.messageId, send.body.id);
    const received = byType('message.received');
    assert.equal(received.length, 1, 'the API echo (fromMe) is not notified without notifyFromMe');
    assert.equal(received[0].path, '/received');
    assert.equal(bodyOf(received[0]).data.messageId, inbound.body.messageId);
    const [typing] = byType('chat.presence');
    assert.equal(typing.path, '/presence');
    assert.deepEqual(bodyOf(typing).data, { phone: '5511977776666', chatLid: '4242@lid', presence: 'composing' });
    const testReq = byType('webhook.test');
    assert.equal(testReq[0].path, '/all');
    assert.equal(bodyOf(testReq[0]).id, test.body.id);
    // connection.update has no URL of its own here: it goes to the general URL.
    assert.ok(byType('connection.update').every((r) => r.path === '/all'));

    const events = (await t.admin.get(`/api/instances/${inst.id}/events`)).body.data as any[];
    const echo = events.find((e) => e.type === 'message.received' && e.data.fromMe);
    assert.equal(echo.delivery.status, 'filtered', 'filtered events stay recorded');
    const delivered = events.find((e) => e.id === test.body.id);
    assert.equal(delivered.delivery.status, 'delivered');
    assert.equal(delivered.delivery.attempts, 1);
    assert.equal(delivered.delivery.lastStatusCode, 200);
  });

  it('retries failures with the same id and body, exhausts after 8 attempts, and retries by hand', async () => {
    const inst = (await t.admin.post('/api/instances', { name: 'Failing receiver' })).body;
    await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: receiver.url('/fail') });
    receiver.respondWith((r) => (r.path === '/fail' ? { status: 500 } : { status: 200 }));
    const test = await t.admin.post(`/api/instances/${inst.id}/webhook/test`);
    const attempts = await receiver.waitForRequests(8, 15_000, (r) => r.path === '/fail' && bodyOf(r).id === test.body.id);
    assert.equal(new Set(attempts.map((a) => a.rawBody.toString('hex'))).size, 1, 'identical body on every attempt');
    const exhausted = await waitForEvent(t.admin, inst.id, (e) => e.id === test.body.id && e.delivery.status === 'exhausted', 'exhausted');
    assert.equal(exhausted.delivery.attempts, 8);
    assert.equal(exhausted.delivery.lastStatusCode, 500);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(receiver.requests.filter((r) => bodyOf(r).id === test.body.id).length, 8, 'exactly 8 attempts');

    assert.equal((await t.client(inst.apiToken).post(`/api/instances/${inst.id}/events/${test.body.id}/retry`)).status, 403, 'retry needs the admin key');
    assert.equal((await t.admin.post(`/api/instances/${inst.id}/events/evt_missing/retry`)).status, 404);
    receiver.respondWith(() => ({ status: 204 }));
    const retry = await t.admin.post(`/api/instances/${inst.id}/events/${test.body.id}/retry`);
    assert.equal(retry.status, 202);
    const again = await waitForEvent(t.admin, inst.id, (e) => e.id === test.body.id && e.delivery.status === 'delivered', 'delivered after retry');
    assert.equal(again.delivery.attempts, 1, 'a fresh series');
    const all = receiver.requests.filter((r) => bodyOf(r).id === test.body.id);
    assert.equal(all.length, 9);
    assert.equal(all[8].rawBody.toString('hex'), all[0].rawBody.toString('hex'), 'same body on the manual retry');
  });

  it('retries every exhausted delivery of an instance with one request, after a receiver outage', async () => {
    const inst = (await t.admin.post('/api/instances', { name: 'Outage' })).body;
    await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: receiver.url('/outage') });
    receiver.respondWith((r) => (r.path === '/outage' ? { status: 503 } : { status: 200 }));
    const tests = [];
    for (let i = 0; i < 3; i++) tests.push((await t.admin.post(`/api/instances/${inst.id}/webhook/test`)).body.id);
    await eventually(async () => (await t.admin.get(`/api/instances/${inst.id}/events?deliveryStatus=exhausted`)).body.data.length === 3, 20_000, 'all three exhausted');

    assert.equal((await t.client(inst.apiToken).post(`/api/instances/${inst.id}/events/retry`)).status, 403, 'the admin key only');
    assert.equal((await t.admin.post('/api/instances/inst-missing/events/retry')).status, 404);
    receiver.respondWith(() => ({ status: 200 }));
    const retry = await t.admin.post(`/api/instances/${inst.id}/events/retry`);
    assert.equal(retry.status, 202, JSON.stringify(retry.body));
    assert.deepEqual(retry.body, { retried: 3, notRetryable: 0 });
    for (const id of tests) await waitForEvent(t.admin, inst.id, (e) => e.id === id && e.delivery.status === 'delivered', `${id} delivered`);
    assert.deepEqual((await t.admin.post(`/api/instances/${inst.id}/events/retry`)).body, { retried: 0, notRetryable: 0 }, 'nothing left');
  });

  it('routes a manual retry with the configuration of now: a removed URL gets nothing, no URL is 409', async () => {
    const inst = (await t.admin.post('/api/instances', { name: 'Moved receiver' })).body;
    await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: receiver.url('/gone') });
    receiver.respondWith((r) => (r.path === '/gone' ? { status: 500 } : { status: 200 }));
    const test = await t.admin.post(`/api/instances/${inst.id}/webhook/test`);
    await waitForEvent(t.admin, inst.id, (e) => e.id === test.body.id && e.delivery.status === 'exhausted', 'exhausted');

    await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: '' });
    const refused = await t.admin.post(`/api/instances/${inst.id}/events/${test.body.id}/retry`);
    assert.equal(refused.status, 409);
    assert.equal(refused.body.code, 'not_retryable');
    assert.match(refused.body.detail, /no URL/);
    const kept = await waitForEvent(t.admin, inst.id, (e) => e.id === test.body.id, 'the event');
    assert.equal(kept.delivery.status, 'exhausted', 'still retryable once a URL is set');

    await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: receiver.url('/moved') });
    assert.equal((await t.admin.post(`/api/instances/${inst.id}/events/${test.body.id}/retry`)).status, 202);
    const again = await waitForEvent(t.admin, inst.id, (e) => e.id === test.body.id && e.delivery.status === 'delivered', 'delivered after retry');
    assert.equal(again.delivery.url, receiver.url('/moved'));
    const paths = receiver.requests.filter((r) => bodyOf(r).id === test.body.id).map((r) => r.path);
    assert.deepEqual(paths, [...Array(8).fill('/gone'), '/moved'], 'nothing more to the removed URL');
  });

});

describe('webhook cancellation rules', function () {
  this.timeout(60_000);
  let t: TestServer;
  let receiver: HttpsReceiver;

  before(async () => {
    receiver = await startHttpsReceiver((r) => (r.path.startsWith('/down') ? { status: 503 } : { status: 200 }));
    // After the first failure the next attempt is a minute away: the delivery stays `retrying`.
    t = await startTestServer({ storage: 'postgres', env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_RETRY_SCHEDULE: '0,60000,60000,60000,60000,60000,60000,60000' } });
  });
  after(async () => {
    await t?.stop();
    await receiver?.close();
  });

  const statusOf = async (instanceId: string, eventId: string) =>
    ((await t.admin.get(`/api/instances/${instanceId}/events`)).body.data as any[]).find((e) => e.id === eventId).delivery;

  it('saving cancels pending deliveries only for URLs that were removed', async () => {
    const inst = (await t.admin.post('/api/instances', { name: 'Cancellations' })).body;
    await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: receiver.url('/down-a') });
    const first = await t.admin.post(`/api/instances/${inst.id}/webhook/test`);
    const failed = await waitForEvent(t.admin, inst.id, (e) => e.id === first.body.id && e.delivery.status === 'retrying', 'retrying');
    assert.equal(failed.delivery.lastStatusCode, 503);
    assert.ok(failed.delivery.nextAttemptAt);
    await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: receiver.url('/down-a'), status: receiver.url('/other') });
    assert.equal((await statusOf(inst.id, first.body.id)).status, 'retrying', 'a kept URL keeps its deliveries');
    await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: receiver.url('/down-b') });
    assert.equal((await statusOf(inst.id, first.body.id)).status, 'cancelled');
  });

  it('regenerating the secret cancels every pending delivery', async () => {
    const inst = (await t.admin.post('/api/instances', { name: 'Secret change' })).body;
    await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: receiver.url('/down-c') });
    const test = await t.admin.post(`/api/instances/${inst.id}/webhook/test`);
    await waitForEvent(t.admin, inst.id, (e) => e.id === test.body.id && e.delivery.status === 'retrying', 'retrying');
    const rotated = await t.admin.post(`/api/instances/${inst.id}/webhook/secret`);
    assert.equal(rotated.status, 200);
    assert.equal((await statusOf(inst.id, test.body.id)).status, 'cancelled');
  });
});

describe('webhooks after a crash of the embedded server', function () {
  this.timeout(60_000);
  let t: TestServer;
  let receiver: HttpsReceiver;

  before(async () => {
    receiver = await startHttpsReceiver();
    t = await startTestServer({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true' } }); // PGlite
  });
  after(async () => {
    await t?.stop();
    await receiver?.close();
  });

  it('delivers at once what the crashed process had claimed, without waiting out its 60 s lease', async () => {
    const inst = (await t.admin.post('/api/instances', { name: 'Crash line' })).body;
    const test = await t.admin.post(`/api/instances/${inst.id}/webhook/test`); // no URL yet: recorded only
    assert.equal(test.status, 200);
    // What a kill -9 mid-attempt leaves behind: the delivery leased (60 s) by the process's dispatcher.
    const db = t.server.platform.db;
    await db('deliveries')
      .where({ event_id: test.body.id })
      .update({ status: 'pending', url: receiver.url('/after-crash'), next_attempt_at: db.raw("date_trunc('milliseconds', now()) + interval '60 seconds'"), lease_until: db.raw("date_trunc('milliseconds', now()) + interval '60 seconds'"), lease_owner: 'embedded' });
    await t.restart();
    const [req] = await receiver.waitForRequests(1, 15_000, (r) => r.path === '/after-crash');
    assert.equal(bodyOf(req).id, test.body.id);
  });
});
