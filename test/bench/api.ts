// Admin-API steps the benchmarks share: create instances, pair them on the sandbox network,
// point their webhook at a receiver.
import { ApiClient } from '../support/http.ts';
import { waitUntil } from '../support/cluster.ts';

export interface BenchInstance {
  id: string;
  token: string;
}

export async function createInstance(admin: ApiClient, name: string): Promise<BenchInstance> {
  const res = await admin.post('/api/instances', { name });
  if (res.status !== 201) throw new Error(`create instance: ${res.status} ${res.text}`);
  return { id: res.body.id, token: res.body.apiToken };
}

/** Waits for the QR stage, scans it with `phone`, and waits until the instance is connected. */
export async function pairOnSandbox(admin: ApiClient, id: string, phone: string, timeoutMs = 60_000): Promise<void> {
  await waitUntil(`${id} awaiting_scan`, async () => (await admin.get(`/api/instances/${id}`)).body?.state === 'awaiting_scan', timeoutMs, 100);
  const scan = await admin.post(`/sandbox/instances/${id}/scan`, { phone });
  if (scan.status !== 200) throw new Error(`scan ${id}: ${scan.status} ${scan.text}`);
  await waitUntil(`${id} connected`, async () => (await admin.get(`/api/instances/${id}`)).body?.state === 'connected', timeoutMs, 100);
}

/** A new instance whose webhook points at `webhookUrl`, its session started (`startSession`, the
 *  cluster's) and paired on the sandbox as `phone`. */
export async function connectedInstance(admin: ApiClient, startSession: (id: string) => unknown, name: string, webhookUrl: string, phone: string): Promise<BenchInstance> {
  const inst = await createInstance(admin, name);
  await setWebhook(admin, inst.id, webhookUrl);
  startSession(inst.id);
  await pairOnSandbox(admin, inst.id, phone);
  return inst;
}

export async function setWebhook(admin: ApiClient, id: string, url: string, settings: Record<string, boolean> = {}): Promise<string> {
  const res = await admin.put(`/api/instances/${id}/webhook`, { url, settings });
  if (res.status !== 200) throw new Error(`webhook ${id}: ${res.status} ${res.text}`);
  return res.body.secret;
}

/** The sandbox delivers every other number; these never hit a magic outcome suffix (DESIGN §6). */
export function ordinaryPhone(i: number): string {
  return `5511${String(900000000 + (i % 1000) * 10 + 5)}`;
}
