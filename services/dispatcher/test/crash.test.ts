// Crash safety of the standalone dispatcher (as built: dist/dispatcher.mjs) on PostgreSQL + NATS JetStream: two
// replicas share the work; one is killed with SIGKILL in the middle of a burst of events published
// the way the outbox relay does, and a replacement starts as an orchestrator would restart it.
// Every event must be delivered at least once; the only duplicates are redeliveries of the same
// event id with the same body.
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { OutboxRelay, openBus, type Bus } from '@switchboard/core';
import type { Knex } from 'knex';
import { builtService } from '../../../test/support/built.ts';
import { NATS_URL, testNamespace } from '../../../test/support/services.ts';
import { startHttpsReceiver, TEST_CA_PATH, type HttpsReceiver } from '../../../test/support/https-receiver.ts';
import { createInstance, deleteNamespaceStreams, log, masterKey, openTestDatabase, recordTestEvent, waitFor } from './support.ts';

let main: string;
const EVENTS = 300;

interface DispatcherProcess {
  child: ChildProcess;
  started: Promise<void>;
  exited: Promise<number | null>;
}

function spawnDispatcher(env: Record<string, string>): DispatcherProcess {
  const child = spawn(process.execPath, [main], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const started = new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString('utf8');
      if (output.includes('dispatcher started')) resolve();
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (c: Buffer) => (output += c.toString('utf8')));
    child.once('exit', (code) => reject(new Error(`dispatcher exited early (${code}): ${output.slice(-2000)}`)));
  });
  started.catch(() => undefined);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, started, exited };
}

describe('dispatcher crash safety (main.ts, PostgreSQL + NATS)', function () {
  this.timeout(90_000);
  const namespace = testNamespace();
  let db: Knex;
  let dbUrl: string;
  let drop: () => Promise<void>;
  let bus: Bus;
  let receiver: HttpsReceiver;
  const processes: DispatcherProcess[] = [];

  before(async () => {
    main = await builtService('dispatcher');
    ({ db, drop, url: dbUrl } = await openTestDatabase());
    bus = await openBus({ natsUrl: NATS_URL, namespace, log });
    receiver = await startHttpsReceiver(() => ({ status: 200, delayMs: 5 }));
  });
  after(async () => {
    for (const p of processes) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
    await receiver.close();
    await bus.close();
    await deleteNamespaceStreams(NATS_URL, namespace);
    await drop();
  });

  it('delivers every event at least once when a replica is killed mid-burst', async () => {
    const env = {
      DATABASE_URL: dbUrl,
      NATS_URL,
      NATS_NAMESPACE: namespace,
      ENCRYPTION_KEY: masterKey.toString('base64'),
      WEBHOOK_RETRY_SCHEDULE: '0,50,50,50,50,50,50,50',
      WEBHOOK_ALLOW_PRIVATE_TARGETS: 'true',
      NODE_EXTRA_CA_CERTS: TEST_CA_PATH,
      DISPATCHER_POLL_INTERVAL_MS: '20',
      DISPATCHER_LEASE_MS: '3000',
      DISPATCHER_ATTEMPT_TIMEOUT_MS: '2000',
      DISPATCHER_PER_DESTINATION_CONCURRENCY: '8',
      LOG_LEVEL: 'info',
    };
    const inst = await createInstance(db, { webhook: { url: receiver.url('/crash') } });
    const victim = spawnDispatcher(env);
    const survivor = spawnDispatcher(env);
    processes.push(victim, survivor);
    await Promise.all([victim.started, survivor.started]);

    const relay = new OutboxRelay(db, bus, log, 50);
    relay.start();
    const ids: string[] = [];
    for (let i = 0; i < EVENTS; i++) ids.push((await recordTestEvent(db, inst.id, 'message.sent', { i })).id);
    await receiver.waitForRequests(50, 30_000);
    victim.child.kill('SIGKILL');
    assert.ok(receiver.requests.length < EVENTS, 'the kill happened mid-burst');
    await relay.flush();
    await relay.stop();

    // The orchestrator restarts the killed replica.
    const replacement = spawnDispatcher(env);
    processes.push(replacement);
    await replacement.started;

    await waitFor('every event delivered', async () => {
      const [{ count }] = await db('deliveries').whereIn('event_id', ids).where({ status: 'delivered' }).count<{ count: string }[]>({ count: '*' });
      return Number(count) === EVENTS;
    }, 60_000, 100);

    const seen = new Map<string, Buffer[]>();
    for (const r of receiver.requests) {
      const id = r.headers['x-service-event-id'];
      seen.set(id, [...(seen.get(id) ?? []), r.rawBody]);
    }
    assert.deepEqual([...seen.keys()].sort(), [...ids].sort(), 'every event reached the receiver, nothing else did');
    const bodies = new Map((await db('events').whereIn('id', ids).select('id', 'body')).map((e) => [e.id, Buffer.from(e.body, 'utf8')]));
    for (const [id, received] of seen) {
      for (const body of received) assert.ok(body.equals(bodies.get(id)!), `duplicates of ${id} carry the same body`);
    }

    // Graceful stop of the others.
    survivor.child.kill('SIGTERM');
    replacement.child.kill('SIGTERM');
    assert.equal(await survivor.exited, 0);
    assert.equal(await replacement.exited, 0);
  });

  it('refuses at start a replica silence shorter than two heartbeats, naming the variable', () => {
    const env = { ...process.env, DATABASE_URL: dbUrl, NATS_URL, ENCRYPTION_KEY: masterKey.toString('base64'), DISPATCHER_REPLICA_HEARTBEAT_MS: '1000', DISPATCHER_REPLICA_GONE_AFTER_MS: '1500' };
    const run = spawnSync(process.execPath, [main], { env, encoding: 'utf8', timeout: 30_000 });
    assert.equal(run.status, 2, run.stderr);
    assert.match(run.stderr, /configuration error: DISPATCHER_REPLICA_GONE_AFTER_MS: must be at least twice DISPATCHER_REPLICA_HEARTBEAT_MS \(1000\), got 1500/);
  });

  it('refuses at start a most per URL below the base, naming both', () => {
    const env = { ...process.env, DATABASE_URL: dbUrl, NATS_URL, ENCRYPTION_KEY: masterKey.toString('base64'), DISPATCHER_PER_DESTINATION_CONCURRENCY: '8', DISPATCHER_PER_DESTINATION_MAX_CONCURRENCY: '6' };
    const run = spawnSync(process.execPath, [main], { env, encoding: 'utf8', timeout: 30_000 });
    assert.equal(run.status, 2, run.stderr);
    assert.match(run.stderr, /configuration error: DISPATCHER_PER_DESTINATION_MAX_CONCURRENCY: must be at least DISPATCHER_PER_DESTINATION_CONCURRENCY \(8\), got 6/);
  });
});
