// Paging back through the lists of sends, incoming messages and events (`before`, `limit`) and
// narrowing them (`status`, `deliveryStatus`): every item is reached once, in the lists'
// newest-first order, and a query the lists cannot answer is a 400 naming its field.
import assert from 'node:assert/strict';
import { startTestServer, type TestServer } from '../support/server.ts';
import type { ApiClient } from '../support/http.ts';
import { eventually } from '../support/http.ts';
import { createConnectedInstance } from './support.ts';

describe('list pages (before, limit) and filters', function () {
  this.timeout(120_000);
  let t: TestServer;
  let inst: { id: string; apiToken: string };
  const inboundIds: string[] = []; // oldest first

  before(async () => {
    t = await startTestServer({ env: { SANDBOX_RECEIPT_DELAY_MS: '5' } });
    inst = await createConnectedInstance(t.admin);
    for (let i = 0; i < 120; i++) {
      const r = await t.admin.post(`/sandbox/instances/${inst.id}/inbound`, { from: '5511977776666', type: 'text', text: `message ${i}` });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      inboundIds.push(r.body.messageId);
    }
    await eventually(async () => (await t.admin.get(`/api/instances/${inst.id}/incoming?limit=1`)).body.data[0]?.messageId === inboundIds.at(-1), 20_000, 'the last inbound recorded');
  });
  after(async () => t?.stop());

  it('pages back through incoming messages: every one once, newest first, then an empty page', async () => {
    const pages = await allPages(t.client(inst.apiToken), `/api/instances/${inst.id}/incoming`);
    assert.deepEqual(pages.map((p) => p.length), [50, 50, 20, 0]);
    assert.deepEqual(pages.flat().map((m) => m.messageId), [...inboundIds].reverse());
    const first = (await t.admin.get(`/api/instances/${inst.id}/incoming`)).body.data;
    assert.deepEqual(first, pages[0], 'without a query: the last 50, as before');
  });

  it('takes a smaller limit, and refuses one out of 1–50 or a cursor of no item of the list', async () => {
    const seven = await t.admin.get(`/api/instances/${inst.id}/incoming?limit=7`);
    assert.deepEqual(seven.body.data.map((m: any) => m.messageId), inboundIds.slice(-7).reverse());
    for (const bad of ['limit=0', 'limit=51', 'limit=abc', 'limit=2.5', 'limit=0x10', 'limit=1e1', 'limit=%205', 'limit=', 'limit=1&limit=2']) {
      const r = await t.admin.get(`/api/instances/${inst.id}/incoming?${bad}`);
      assert.equal(r.status, 400, bad);
      assert.equal(r.body.code, 'validation_failed');
      assert.deepEqual(r.body.errors, [{ path: 'limit', message: 'must be a whole number from 1 to 50' }], bad);
    }
    const ignored = await t.admin.get(`/api/instances/${inst.id}/incoming?limit=3&foo=%00&type=anything`);
    assert.equal(ignored.status, 200, 'parameters the list does not read are ignored');
    assert.equal(ignored.body.data.length, 3);
    const nul = await t.admin.get(`/api/instances/${inst.id}/incoming?before=a%00b`);
    assert.deepEqual([nul.status, nul.body.errors?.[0]?.path], [400, 'before']);
    const events = (await t.admin.get(`/api/instances/${inst.id}/events?limit=1`)).body.data;
    for (const cursor of ['nope', events[0].id]) {
      const r = await t.admin.get(`/api/instances/${inst.id}/incoming?before=${cursor}`);
      assert.equal(r.status, 400, cursor);
      assert.deepEqual(r.body.errors.map((e: any) => e.path), ['before']);
    }
    const other = await createConnectedInstance(t.admin, '5511900000002');
    const theirs = await t.admin.post(`/sandbox/instances/${other.id}/inbound`, { from: '5511977776666', type: 'text', text: 'elsewhere' });
    const theirRecord = await eventually(async () => (await t.admin.get(`/api/instances/${other.id}/incoming`)).body.data.find((m: any) => m.messageId === theirs.body.messageId));
    assert.equal((await t.admin.get(`/api/instances/${inst.id}/incoming?before=${theirRecord.id}`)).status, 400, "another instance's item is no cursor here");
  });

  it('narrows sends by status, and pages through the narrowed list', async () => {
    const client = t.client(inst.apiToken);
    const failing: string[] = [];
    for (let i = 0; i < 60; i++) {
      const phone = i % 4 === 0 ? '5511912340000' : '5511912345678'; // …0000 fails in the sandbox
      const r = await client.post(`/api/instances/${inst.id}/messages`, { phone, type: 'text', text: `send ${i}` });
      assert.equal(r.status, 202);
      if (i % 4 === 0) failing.push(r.body.id);
    }
    await eventually(async () => (await client.get(`/api/instances/${inst.id}/messages?status=failed`)).body.data.length === 15, 20_000, 'every failing send failed');
    const failed = await allPages(client, `/api/instances/${inst.id}/messages`, 'status=failed&limit=4');
    assert.deepEqual(failed.map((p) => p.length), [4, 4, 4, 3, 0]);
    assert.deepEqual(failed.flat().map((s) => s.id), [...failing].reverse());
    assert.ok(failed.flat().every((s) => s.status === 'failed'));
    const bad = await client.get(`/api/instances/${inst.id}/messages?status=lost`);
    assert.equal(bad.status, 400);
    assert.deepEqual(bad.body.errors.map((e: any) => e.path), ['status']);
  });

  it('narrows events by delivery status', async () => {
    // No webhook is configured: every routed event has no destination (receipts still arrive, so
    // the list read first is a part of the narrowed one read next).
    const all = (await allPages(t.admin, `/api/instances/${inst.id}/events`)).flat();
    const routed = (await allPages(t.admin, `/api/instances/${inst.id}/events`, 'deliveryStatus=no_destination')).flat();
    assert.ok(routed.every((e) => e.delivery.status === 'no_destination'));
    const routedIds = new Set(routed.map((e) => e.id));
    const expected = all.filter((e) => e.delivery.status === 'no_destination');
    assert.ok(expected.length > 200);
    assert.deepEqual(expected.filter((e) => !routedIds.has(e.id)), []);
    assert.equal((await t.admin.get(`/api/instances/${inst.id}/events?deliveryStatus=exhausted`)).body.data.length, 0);
    const pending = await t.admin.get(`/api/instances/${inst.id}/events?deliveryStatus=pending`);
    assert.ok(pending.body.data.every((e: any) => e.delivery.status === 'pending'));
    const bad = await t.admin.get(`/api/instances/${inst.id}/events?deliveryStatus=lost`);
    assert.equal(bad.status, 400);
    assert.deepEqual(bad.body.errors.map((e: any) => e.path), ['deliveryStatus']);
  });
});

/** Every page of a list, following `before` from the last item of each until an empty page. */
async function allPages(client: ApiClient, path: string, query = ''): Promise<any[][]> {
  const pages: any[][] = [];
  let before: string | undefined;
  for (;;) {
    const params = [query, before ? `before=${before}` : ''].filter(Boolean).join('&');
    const r = await client.get(params ? `${path}?${params}` : path);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    pages.push(r.body.data);
    if (!r.body.data.length) return pages;
    before = r.body.data.at(-1).id;
  }
}
