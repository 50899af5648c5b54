// kill -9 of a session process (as built: dist/session.mjs) in the middle of a burst of queued sends, on PostgreSQL +
// NATS JetStream, then a restart: every item ends terminal, nothing is sent twice, and the item
// that was in flight is reported uncertain instead of being resent.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DbAuthStore, enqueueOutbox, newId, newMessengerId, subjects } from '@switchboard/core';
import { builtService } from '../../../test/support/built.ts';
import { NATS_URL } from '../../../test/support/services.ts';
import { openEnv, until, type Env } from './harness.ts';

const BURST = 500;
const TERMINAL = ['sent', 'delivered', 'read', 'played', 'failed', 'uncertain', 'cancelled', 'expired'];

describe('session process killed with SIGKILL during a burst', function () {
  this.timeout(120_000);
  let env: Env;
  let dataDir: string;
  let main: string;
  const children: ChildProcess[] = [];

  before(async () => {
    main = await builtService('session');
    env = await openEnv({ nats: true });
    dataDir = mkdtempSync(join(tmpdir(), 'sb-session-proc-'));
  });
  after(async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    await env?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  function spawnSession(instanceId: string): ChildProcess {
    const child = spawn(process.execPath, [main], {
      env: {
        PATH: process.env.PATH,
        INSTANCE_ID: instanceId,
        DATABASE_URL: env.dbUrl,
        NATS_URL,
        NATS_NAMESPACE: env.namespace,
        NETWORK_DRIVER: 'sandbox',
        ENCRYPTION_KEY: env.encryptionKey.toString('base64'),
        DATA_DIR: dataDir,
        SANDBOX_RECEIPT_DELAY_MS: '1',
        SESSION_COMMAND_ACK_WAIT_MS: '2000',
        SESSION_LOCK_RETRY_MS: '200',
        LOG_LEVEL: 'error',
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (d) => (stderr += d));
    child.on('exit', (code, signal) => {
      if (code && code !== 0) console.error(`session process exited ${code}: ${stderr}`);
      void signal;
    });
    children.push(child);
    return child;
  }

  async function ledgerCount(instanceId: string): Promise<number> {
    return Number((await env.db('sandbox_ledger').where({ instance_id: instanceId }).count({ n: '*' }).first())!.n);
  }

  it('ends with every item terminal and none sent twice', async () => {
    const instanceId = await env.createInstance({ paused: false, state: 'connected', phone: '5511900001111' });
    await new DbAuthStore(env.db, env.crypto, instanceId).set({ sandbox: { creds: { phone: '5511900001111' } } });
    await env.db.transaction(async (trx) => {
      for (let i = 0; i < BURST; i++) {
        const id = newId('msg');
        // A few destinations drop the connection mid-send (uncertain) to mix reconnects in.
        const phone = i % 100 === 50 ? '5511900000001' : `55119${String(10000 + i)}5`; // last four digits never magic
        await trx('send_items').insert({
          id, instance_id: instanceId, messenger_id: newMessengerId(), phone, type: 'text',
          payload: JSON.stringify({ text: `burst ${i}` }), status: 'queued', expires_at: new Date(Date.now() + 3_600_000),
        });
        await enqueueOutbox(trx, { subject: subjects.command(instanceId), msgId: id, payload: JSON.stringify({ id }) });
      }
    });
    env.relay.kick();

    const first = spawnSession(instanceId);
    await until(async () => (await ledgerCount(instanceId)) >= 60, 'the first process sending', 60_000);
    first.kill('SIGKILL');
    await new Promise((r) => first.once('exit', r));
    const atKill = await ledgerCount(instanceId);
    assert.ok(atKill < BURST, 'killed mid-burst');

    const second = spawnSession(instanceId);
    await until(
      async () => (await env.db('send_items').where({ instance_id: instanceId }).whereNotIn('status', TERMINAL).count({ n: '*' }).first())!.n === '0',
      'every item terminal',
      90_000,
    );

    const items = await env.db('send_items').where({ instance_id: instanceId }).select('messenger_id', 'status', 'phone');
    const ledger = (await env.db('sandbox_ledger').where({ instance_id: instanceId }).pluck('messenger_id')) as string[];
    const times = new Map<string, number>();
    for (const id of ledger) times.set(id, (times.get(id) ?? 0) + 1);
    for (const item of items) {
      const n = times.get(item.messenger_id) ?? 0;
      if (n > 1) assert.equal(item.status, 'uncertain', `${item.messenger_id} sent ${n} times`);
      if (['sent', 'delivered', 'read'].includes(item.status)) assert.equal(n, 1, `${item.messenger_id} is ${item.status} but in the ledger ${n} times`);
    }
    assert.ok([...times.values()].every((n) => n === 1), 'nothing was sent twice');
    const byStatus = items.reduce<Record<string, number>>((acc, i) => ((acc[i.status] = (acc[i.status] ?? 0) + 1), acc), {});
    assert.ok((byStatus.uncertain ?? 0) >= 5, `the connection-drop destinations are uncertain: ${JSON.stringify(byStatus)}`);
    const failures = await env.db("send_items").where({ instance_id: instanceId, status: "failed" }).select("phone", "error");
    assert.equal(byStatus.failed ?? 0, 0, JSON.stringify({ byStatus, failures }));

    second.kill('SIGTERM');
    const code = await new Promise<number | null>((r) => second.once('exit', (exitCode) => r(exitCode)));
    assert.equal(code, 0, 'graceful shutdown on SIGTERM');
    const row = await env.db('instances').where({ id: instanceId }).first();
    assert.equal(row.state, 'reconnecting');
  });
});
