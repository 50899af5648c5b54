// Helpers shared by the end-to-end suites: connected sandbox instances and waiting for states.
import assert from 'node:assert/strict';
import type { ApiClient } from '../support/http.ts';
import { eventually } from '../support/http.ts';

export async function createConnectedInstance(admin: ApiClient, phone = '5511900000001', body: Record<string, unknown> = {}) {
  const created = await admin.post('/api/instances', { name: 'E2E instance', ...body });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id: string = created.body.id;
  assert.equal((await admin.post(`/api/instances/${id}/connect`)).status, 200);
  await eventually(async () => (await admin.get(`/api/instances/${id}`)).body.state === 'awaiting_scan', 10_000, 'awaiting_scan');
  const scan = await admin.post(`/sandbox/instances/${id}/scan`, { phone });
  assert.equal(scan.status, 200, JSON.stringify(scan.body));
  await waitForState(admin, id, 'connected');
  return { id, apiToken: created.body.apiToken as string };
}

export async function waitForState(admin: ApiClient, id: string, state: string, timeoutMs = 10_000) {
  return eventually(async () => {
    const r = await admin.get(`/api/instances/${id}`);
    return r.body.state === state && r.body;
  }, timeoutMs, `state ${state}`);
}

export async function waitForSendStatus(client: ApiClient, instanceId: string, messageId: string, statuses: string[], timeoutMs = 10_000) {
  return eventually(async () => {
    const r = await client.get(`/api/instances/${instanceId}/messages/${messageId}`);
    return statuses.includes(r.body.status) && r.body;
  }, timeoutMs, `message ${messageId} in ${statuses.join('/')}`);
}

export async function eventsOf(client: ApiClient, instanceId: string, type?: string): Promise<any[]> {
  const r = await client.get(`/api/instances/${instanceId}/events`);
  return (r.body.data as any[]).filter((e) => !type || e.type === type);
}

export async function waitForEvent(client: ApiClient, instanceId: string, match: (e: any) => boolean, what: string, timeoutMs = 10_000) {
  return eventually(async () => (await eventsOf(client, instanceId)).find(match), timeoutMs, what);
}
