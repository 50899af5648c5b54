// Memory of one session worker process (RSS from /proc): idle once connected, and after 1,000
// sends went through it to the sandbox network.
import type { Knex } from 'knex';
import { ApiClient } from '../../support/http.ts';
import { rssBytes, waitUntil, type Cluster } from '../../support/cluster.ts';
import { createInstance, ordinaryPhone, pairOnSandbox } from '../api.ts';
import { runLoad } from '../load.ts';

export interface MemoryFigures {
  idleRssMiB: number;
  after1000SendsRssMiB: number;
}

export async function measureSessionMemory(cluster: Cluster, db: Knex, progress: (l: string) => void): Promise<MemoryFigures> {
  const admin = new ApiClient(cluster.url, cluster.adminKey);
  const inst = await createInstance(admin, 'bench memory');
  const session = cluster.startSession(inst.id);
  await pairOnSandbox(admin, inst.id, '5511966660000');
  await new Promise((r) => setTimeout(r, 3000));
  const idle = rssBytes(session.pid!);
  progress(`session idle RSS ${(idle / 2 ** 20).toFixed(1)} MiB; sending 1000 messages`);
  let accepted = 0;
  await runLoad({
    origin: cluster.url,
    concurrency: 8,
    durationMs: 120_000,
    request: (i) => ({
      method: 'POST',
      path: `/api/instances/${inst.id}/messages`,
      headers: { authorization: `Bearer ${inst.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ phone: ordinaryPhone(i), type: 'text', text: `memory ${i}` }),
    }),
    onResponse: (_i, status) => void (status === 202 && accepted++),
    stopWhen: () => accepted >= 1000,
  });
  await waitUntil('1000 sends sent', async () => Number((await db('sandbox_ledger').where({ instance_id: inst.id }).count({ n: '*' }).first())!.n) >= 1000, 120_000, 200);
  await new Promise((r) => setTimeout(r, 2000));
  const after = rssBytes(session.pid!);
  progress(`session RSS after 1000 sends ${(after / 2 ** 20).toFixed(1)} MiB`);
  return { idleRssMiB: idle / 2 ** 20, after1000SendsRssMiB: after / 2 ** 20 };
}
