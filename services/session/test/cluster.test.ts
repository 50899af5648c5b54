// Cluster mode pieces on PostgreSQL + NATS JetStream: the expiry sweeper, the RPC server with the
// gateway's RemoteSessionRuntime, and the session process (main.ts) configuration check.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import knexFactory from 'knex';
import { ConfigError, Problem, resetUnheldSession, subjects } from '@switchboard/core';
import { openBus } from '@switchboard/core/bus/index';
import { freePort } from '../../../test/support/server.ts';
import { NATS_URL } from '../../../test/support/services.ts';
import { expirySweepIntervalMs, startExpirySweeper } from '../src/expiry-sweeper.ts';
import { loadSessionConfig, runSessionProcess } from '../src/main.ts';
import { ownerLockFor } from '../src/owner-lock.ts';
import { RemoteSessionRuntime } from '../src/remote-runtime.ts';
import { serveSessionRpc, type SessionHost } from '../src/rpc-server.ts';
import { enqueueSend, eventsOf, instanceRow, itemStatus, openEnv, until, type Env } from './harness.ts';
import { builtService } from '../../../test/support/built.ts';
import type { GatewayDeps } from '../../gateway/src/deps.ts';
import { instanceRoutes } from '../../gateway/src/routes/instances.ts';

describe('expiry sweeper', () => {
  let env: Env;
  before(async () => (env = await openEnv()));
  after(() => env?.close());

  it('looks every twentieth of the expiry, between 200 ms and 5 s', () => {
    assert.equal(expirySweepIntervalMs(86_400_000), 5_000);
    assert.equal(expirySweepIntervalMs(60_000), 3_000);
    assert.equal(expirySweepIntervalMs(3_000), 200);
    assert.equal(expirySweepIntervalMs(1), 200);
  });

  it('expires queued items past expires_at of an offline instance, once, with message.failed', async () => {
    const instanceId = await env.createInstance();
    const late = await enqueueSend(env, instanceId, { phone: '5511912345678', expiresAt: new Date(Date.now() - 1) });
    const fresh = await enqueueSend(env, instanceId, { phone: '5511912345678' });
    const sent = await enqueueSend(env, instanceId, { phone: '5511912345678', status: 'sent', expiresAt: new Date(Date.now() - 1) });
    const sweeper = startExpirySweeper({ db: env.db, relay: env.relay, intervalMs: 20, log: env.log });
    try {
      await until(async () => (await itemStatus(env.db, late.id)) === 'expired', 'expired');
      await new Promise((r) => setTimeout(r, 60));
      assert.equal(await sweeper.sweep(), 0);
    } finally {
      await sweeper.stop();
    }
    assert.equal(await itemStatus(env.db, fresh.id), 'queued');
    assert.equal(await itemStatus(env.db, sent.id), 'sent');
    const failed = await eventsOf(env.db, instanceId, 'message.failed');
    assert.equal(failed.length, 1);
    assert.equal(failed[0].data.messageId, late.id);
    assert.equal(failed[0].data.error.code, 'expired');
    const item = await env.db('send_items').where({ id: late.id }).first();
    assert.equal(item.error.code, 'expired');
  });
});

describe('session RPC over NATS with RemoteSessionRuntime', function () {
  this.timeout(20_000);
  let env: Env;
  before(async () => (env = await openEnv({ nats: true })));
  after(() => env?.close());

  it('start, sandbox ops, problems with their status and code, stop and reset', async () => {
    const instanceId = await env.createInstance();
    const remote = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 5000 });
    // No session process yet: start only records the desired state; calls are 409.
    await remote.start(instanceId);
    assert.equal((await instanceRow(env.db, instanceId)).paused, false);
    await assert.rejects(remote.call(instanceId, 'sandbox.scan', { phone: '5511900001111' }), (e: unknown) => e instanceof Problem && e.status === 409 && e.code === 'instance_not_running');

    const host = env.runtime();
    const rpc = await serveSessionRpc(env.bus, instanceId, host);
    try {
      await host.resume(instanceId);
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
      await assert.rejects(remote.call(instanceId, 'sandbox.scan', { phone: 'nope' }), (e: unknown) => e instanceof Problem && e.status === 400 && e.code === 'validation_failed');
      assert.deepEqual(await remote.call(instanceId, 'sandbox.scan', { phone: '5511900001111' }), { state: 'connected', phone: '5511900001111' });
      await assert.rejects(remote.call(instanceId, 'sandbox.scan', { phone: '5511900001111' }), (e: unknown) => e instanceof Problem && e.status === 409 && e.code === 'not_awaiting_scan');
      const inbound = await remote.call(instanceId, 'sandbox.inbound', { from: '5511977776666', type: 'text', text: 'hi' });
      assert.equal(typeof inbound.messageId, 'string');

      await remote.stop(instanceId);
      let row = await instanceRow(env.db, instanceId);
      assert.deepEqual([row.paused, row.state], [true, 'stopped']);
      await remote.start(instanceId);
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'reconnected without scan');
      await remote.reset(instanceId);
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'pairing again after reset');
      row = await instanceRow(env.db, instanceId);
      assert.equal(row.phone, null);
    } finally {
      await rpc.stop();
      await host.close();
    }
  });

  it('a reset with no session running clears the connection its killed session left in the record', async () => {
    const remote = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 5000 });
    for (const paused of [false, true]) {
      // What a session killed with kill -9 leaves: connected as a phone, and its credentials.
      const instanceId = await env.createInstance({ paused, state: 'connected', phone: '5511900002222' });
      await remote.reset(instanceId);
      const row = await instanceRow(env.db, instanceId);
      assert.deepEqual([row.state, row.phone], [paused ? 'stopped' : 'starting', null], `paused: ${paused}`);
      const updates = await eventsOf(env.db, instanceId, 'connection.update');
      assert.deepEqual(updates.map((e) => e.data), [{ state: row.state, previousState: 'connected', phone: '5511900002222', reason: 'reset' }], 'the event names the unlinked phone');
    }
  });

  it('with no session answering, records starting or stopped only for an instance no session holds', async () => {
    const remote = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 300 });
    const state = async (id: string) => {
      const { state: recorded, paused } = await instanceRow(env.db, id);
      return [recorded, paused];
    };
    // Nobody runs it: a created or connected instance is starting (the operator's pod will run it).
    const created = await env.createInstance({ paused: false, state: 'stopped' });
    await remote.created(created);
    assert.deepEqual(await state(created), ['starting', false]);
    // The same connection.update as an embedded server's session gives when it starts.
    const [update] = await eventsOf(env.db, created, 'connection.update');
    assert.deepEqual(update.data, { state: 'starting', previousState: 'stopped', phone: null, reason: 'session_started' });
    const paused = await env.createInstance({ paused: true, state: 'stopped' });
    await remote.start(paused);
    assert.deepEqual(await state(paused), ['starting', false]);
    await remote.stop(paused);
    assert.deepEqual(await state(paused), ['stopped', true]);

    // A session cut off from the bus still holds it, connected: it records its own state when it
    // follows the record's `paused` flag, so neither call writes one over it.
    const held = await env.createInstance({ paused: false, state: 'connected', phone: '5511900004444' });
    const session = ownerLockFor(env.db, held, () => undefined);
    assert.equal(await session.tryAcquire(), true);
    try {
      await remote.stop(held);
      assert.deepEqual(await state(held), ['connected', true]);
      await remote.start(held);
      assert.deepEqual(await state(held), ['connected', false]);
    } finally {
      await session.release();
    }
  });

  it('two gateway replicas starting and stopping an instance no session runs leave a state that fits its paused flag', async () => {
    const replica = () => new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 200 });
    const [a, b] = [replica(), replica()];
    const instanceId = await env.createInstance({ paused: false, state: 'starting' });
    for (let round = 0; round < 20; round++) {
      await Promise.all(round % 2 ? [a.stop(instanceId), b.start(instanceId)] : [b.start(instanceId), a.stop(instanceId)]);
      const row = await instanceRow(env.db, instanceId);
      assert.equal(row.state, row.paused ? 'stopped' : 'starting', `round ${round}: paused ${row.paused}`);
    }
  });

  it('a reset erases nothing under a session that holds the instance without answering (stopping)', async () => {
    const remote = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 300 });
    const instanceId = await env.createInstance({ paused: false, state: 'connected', phone: '5511900002222' });
    await env.db('auth_state').insert({ instance_id: instanceId, category: 'creds', key_id: 'me', value_sealed: env.crypto.seal('{}') });
    const stopping = ownerLockFor(env.db, instanceId, () => undefined);
    assert.equal(await stopping.tryAcquire(), true);
    try {
      await assert.rejects(remote.reset(instanceId), (e: unknown) => e instanceof Problem && e.status === 503 && e.code === 'session_busy' && e.headers['Retry-After'] === '1');
      assert.equal((await env.db('auth_state').where({ instance_id: instanceId })).length, 1, 'the credentials stay');
      assert.equal((await instanceRow(env.db, instanceId)).state, 'connected');
      // Let go while the next reset waits: it erases the pairing then. (A wider time-out: each
      // look is a bus round trip, a transaction and a 100 ms pause.)
      const patient = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 3000 });
      const reset = patient.reset(instanceId);
      await new Promise((r) => setTimeout(r, 100));
      await stopping.release();
      await reset;
    } finally {
      await stopping.release();
    }
    assert.equal((await env.db('auth_state').where({ instance_id: instanceId })).length, 0);
    assert.deepEqual(Object.values(await env.db('instances').where({ id: instanceId }).first('state', 'phone')), ['starting', null]);
  });

  it('a reset waits for a session process that answers but does not hold the instance yet (session_busy), as for one that does not answer', async () => {
    const instanceId = await env.createInstance({ paused: false, state: 'connected', phone: '5511900003333' });
    await env.db('auth_state').insert({ instance_id: instanceId, category: 'creds', key_id: 'me', value_sealed: env.crypto.seal('{}') });
    const previous = ownerLockFor(env.db, instanceId, () => undefined); // the old pod, still stopping
    assert.equal(await previous.tryAcquire(), true);
    const host = env.runtime(); // the new pod: it serves requests, its worker waits for the lock
    const rpc = await serveSessionRpc(env.bus, instanceId, host);
    try {
      await host.resume(instanceId);
      const hurried = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 300 });
      await assert.rejects(hurried.reset(instanceId), (e: unknown) => e instanceof Problem && e.status === 503 && e.code === 'session_busy' && e.headers['Retry-After'] === '1');
      assert.equal((await env.db('auth_state').where({ instance_id: instanceId })).length, 1, 'the credentials stay');
      const patient = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 5000 });
      const reset = patient.reset(instanceId);
      await new Promise((r) => setTimeout(r, 200));
      await previous.release(); // the old pod is gone: the new one takes the instance, or the gateway erases it
      await reset;
      await until(async () => (await env.db('auth_state').where({ instance_id: instanceId })).length === 0, 'the pairing erased');
    } finally {
      await previous.release();
      await rpc.stop();
      await host.close();
    }
  });

  it('a session that fails, is too slow or cannot be reached answers as documented, naming no internals', async () => {
    const instanceId = await env.createInstance();
    const remote = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 300 });
    const failing = await env.bus.serve(subjects.rpc(instanceId, 'pairing-code'), async () => {
      throw new Error('connection refused by 10.0.0.7:5432 (password=hunter2)');
    });
    const slow = await env.bus.serve(subjects.rpc(instanceId, 'sandbox.scan'), () => new Promise(() => undefined));
    const answer = async (call: Promise<unknown>) => {
      const err = await call.then(() => assert.fail('resolved'), (e: unknown) => e as Problem);
      assert.ok(err instanceof Problem);
      assert.doesNotMatch(JSON.stringify(err.toJSON()), /rpc\.|10\.0\.0\.7|hunter2|nothing is serving/);
      return [err.status, err.code, err.headers['Retry-After']];
    };
    try {
      assert.deepEqual(await answer(remote.call(instanceId, 'pairing-code', {})), [500, 'internal_error', undefined]);
      assert.deepEqual(await answer(remote.call(instanceId, 'sandbox.scan', {})), [504, 'session_timeout', undefined]);
      assert.deepEqual(await answer(remote.call(instanceId, 'sandbox.inbound', {})), [409, 'instance_not_running', undefined]);
    } finally {
      await failing.stop();
      await slow.stop();
    }
    // A session whose database is away (a restart) answers 503 with Retry-After, not a fault.
    const away = knexFactory({ client: 'pg', connection: 'postgres://postgres@127.0.0.1:1/gone', pool: { min: 0, max: 1 }, acquireConnectionTimeout: 2000, log: { error: () => undefined, warn: () => undefined } });
    const databaseAway = { call: () => away.raw('SELECT 1') } as unknown as SessionHost;
    const rpc = await serveSessionRpc(env.bus, instanceId, databaseAway);
    try {
      assert.deepEqual(await answer(remote.call(instanceId, 'sandbox.inbound', {})), [503, 'database_unavailable', '1']);
    } finally {
      await rpc.stop();
      await away.destroy();
    }
    // A write the foreign keys refuse: the instance was deleted while the session served it.
    const deleted = { call: () => env.db('auth_state').insert({ instance_id: 'inst-deleted-meanwhile', category: 'creds', key_id: 'creds', value_sealed: 'x' }) } as unknown as SessionHost;
    const late = await serveSessionRpc(env.bus, instanceId, deleted);
    try {
      assert.deepEqual(await answer(remote.call(instanceId, 'sandbox.scan', {})), [404, 'not_found', undefined]);
    } finally {
      await late.stop();
    }
    const closedBus = await openBus({ natsUrl: NATS_URL, namespace: env.namespace, log: env.log });
    await closedBus.close();
    const cut = new RemoteSessionRuntime({ db: env.db, bus: closedBus, crypto: env.crypto, log: env.log, relay: env.relay });
    assert.deepEqual(await answer(cut.call(instanceId, 'pairing-code', {})), [503, 'bus_unavailable', '1']);
  });

  it('concurrent starts and stops through the gateway end in the run state of the last one called', async () => {
    const instanceId = await env.createInstance();
    const remote = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 5000 });
    const host = env.runtime();
    const rpc = await serveSessionRpc(env.bus, instanceId, host);
    try {
      await remote.start(instanceId);
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
      for (const last of ['stop', 'start'] as const) {
        const calls = Array.from({ length: 9 }, (_, i) => ((i % 2 === 0) === (last === 'stop') ? remote.stop(instanceId) : remote.start(instanceId)));
        await Promise.all(calls);
        assert.equal((await instanceRow(env.db, instanceId)).paused, last === 'stop', `paused after a final ${last}`);
        assert.equal(Boolean(host.worker(instanceId)), last === 'start', `the session runs after a final ${last}`);
      }
    } finally {
      await rpc.stop();
      await host.close();
    }
  });

  it('concurrent connects and disconnects leave the Instance resource and the record in the run state of the last one called', async () => {
    const instanceId = await env.createInstance({ paused: true, state: 'stopped' });
    // A Kubernetes API whose patch lands at once and answers later: a connect's answer comes
    // after a disconnect's that was patched after it.
    const resource = { paused: true, generation: 1 };
    const resources = {
      apply: async () => undefined,
      requestReset: async () => undefined,
      delete: async () => undefined,
      async update(_id: string, changes: { paused?: boolean }) {
        resource.paused = changes.paused!;
        const generation = ++resource.generation;
        await new Promise((resolve) => setTimeout(resolve, changes.paused ? 5 : 80));
        return { uid: 'u-1', generation };
      },
    };
    const remote = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 300 });
    const deps = { db: env.db, runtime: remote, resources, log: env.log } as unknown as GatewayDeps;
    const call = (path: string) => instanceRoutes.find((r) => r.path === path)!.handler({ deps, params: { id: instanceId } } as never);
    const connect = call('/api/instances/{id}/connect');
    await new Promise((resolve) => setTimeout(resolve, 20));
    await Promise.all([connect, call('/api/instances/{id}/disconnect')]);
    const row = await instanceRow(env.db, instanceId);
    assert.deepEqual([resource.paused, row.paused, row.state], [true, true, 'stopped'], 'both say what the last call asked');
  });

  it('the session process serves /health and /ready on HEALTH_PORT (the pod probes), until it stops', async () => {
    const instanceId = await env.createInstance();
    const port = await freePort();
    const stop = await startSessionProcess(env, instanceId, { HEALTH_PORT: String(port) });
    try {
      assert.deepEqual(await (await fetch(`http://127.0.0.1:${port}/health`)).json(), { status: 'ok' });
      const ready = await fetch(`http://127.0.0.1:${port}/ready`);
      assert.equal(ready.status, 200);
      assert.equal((await ready.json()).status, 'ready');
    } finally {
      await stop();
    }
    await assert.rejects(fetch(`http://127.0.0.1:${port}/health`), 'the port closes with the process');
  });

  it('a session process refuses to start with another ENCRYPTION_KEY than its database was written with', async () => {
    const instanceId = await env.createInstance();
    const cfg = loadSessionConfig({
      INSTANCE_ID: instanceId, DATABASE_URL: env.dbUrl, NATS_URL, NATS_NAMESPACE: env.namespace, NETWORK_DRIVER: 'sandbox',
      ENCRYPTION_KEY: Buffer.alloc(32, 9).toString('base64'), DATA_DIR: '/nonexistent', LOG_LEVEL: 'error',
    });
    await assert.rejects(runSessionProcess(cfg), /^Error: ENCRYPTION_KEY: does not fit this database/);
    assert.equal((await instanceRow(env.db, instanceId)).state, 'stopped', 'it started nothing');
  });

  it('a session process follows the recorded run state even when no start or stop request reaches it', async () => {
    const instanceId = await env.createInstance({ paused: true });
    const stop = await startSessionProcess(env, instanceId, { SESSION_RUN_STATE_CHECK_MS: '50' });
    try {
      assert.equal((await instanceRow(env.db, instanceId)).state, 'stopped');
      // A connect whose start request was lost on the bus: only the record says "run".
      await env.db('instances').where({ id: instanceId }).update({ paused: false });
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'started from the record');
      // And a disconnect whose stop request was lost: only the record says "paused".
      await env.db('instances').where({ id: instanceId }).update({ paused: true });
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'stopped', 'stopped from the record');
    } finally {
      await stop();
    }
  });

  it('a connect that cannot reach the session holding a logged-out instance answers an error, not 200 (the record alone would not pair it again)', async () => {
    const instanceId = await env.createInstance({ paused: false });
    const stop = await startSessionProcess(env, instanceId, { SESSION_RUN_STATE_CHECK_MS: '50' });
    const gateway = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay });
    try {
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
      await gateway.call(instanceId, 'sandbox.scan', { phone: '5511900003333' });
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'connected');
      await gateway.call(instanceId, 'sandbox.drop', { reason: 'logged_out' }); // unlinked on the phone
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'logged_out', 'logged_out');

      const cutOff = await openBus({ natsUrl: NATS_URL, namespace: env.namespace, log: env.log });
      await cutOff.close(); // a gateway whose NATS is away
      const unheard = new RemoteSessionRuntime({ db: env.db, bus: cutOff, crypto: env.crypto, log: env.log, relay: env.relay });
      await assert.rejects(unheard.start(instanceId), (err: Problem) => err.status === 503 && err.code === 'bus_unavailable');
      await new Promise((resolve) => setTimeout(resolve, 300)); // several run-state checks: nothing follows from the record
      assert.equal((await instanceRow(env.db, instanceId)).state, 'logged_out');

      await gateway.start(instanceId); // the client's retry
      await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'pairing again');
    } finally {
      await stop();
    }
  });

  it('a stopping session process leaves its instance reconnecting, or stopped when it was paused behind its back', async () => {
    for (const pausedMeanwhile of [false, true]) {
      const instanceId = await env.createInstance({ paused: false });
      const stop = await startSessionProcess(env, instanceId);
      try {
        await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
        // A disconnect whose stop never reached this process (the bus was down): only the record says paused.
        if (pausedMeanwhile) await env.db('instances').where({ id: instanceId }).update({ paused: true });
      } finally {
        await stop();
      }
      const row = await instanceRow(env.db, instanceId);
      assert.equal(row.state, pausedMeanwhile ? 'stopped' : 'reconnecting', `paused meanwhile: ${pausedMeanwhile}`);
    }
  });

  it('unlinks the device when the operator marked the instance for a delete or a reset (credentials erased, nothing recorded); otherwise keeps it', async () => {
    // 'late': the mark lands just after the SIGTERM, as with a foreground delete, where the
    // garbage collector stops the pod while the operator marks the instance.
    for (const mark of ['none', 'before', 'late'] as const) {
      const unlinking = mark !== 'none';
      const instanceId = await env.createInstance({ paused: false });
      const stop = await startSessionProcess(env, instanceId, { SESSION_UNLINK_MARK_WAIT_MS: '1500' });
      let marked: Promise<unknown> = Promise.resolve();
      const remote = new RemoteSessionRuntime({ db: env.db, bus: env.bus, crypto: env.crypto, log: env.log, relay: env.relay, requestTimeoutMs: 5000 });
      try {
        await until(async () => (await instanceRow(env.db, instanceId)).state === 'awaiting_scan', 'awaiting_scan');
        await remote.call(instanceId, 'sandbox.scan', { phone: '5511900003333' });
        await until(async () => (await instanceRow(env.db, instanceId)).state === 'connected', 'connected');
        assert.equal((await env.db('auth_state').where({ instance_id: instanceId })).length > 0, true, 'paired: credentials stored');
        const markIt = () => env.db('instances').where({ id: instanceId }).update({ unlink_requested_at: env.db.fn.now() });
        if (mark === 'before') await markIt();
        if (mark === 'late') marked = new Promise((resolve) => setTimeout(resolve, 300)).then(markIt);
      } finally {
        await stop(); // the pod's SIGTERM
        await marked;
      }
      const credentials = await env.db('auth_state').where({ instance_id: instanceId });
      const row = await instanceRow(env.db, instanceId);
      if (unlinking) {
        assert.deepEqual(credentials, [], `logged out (mark ${mark}): the credentials are gone with the link`);
        assert.equal(row.state, 'connected', 'no state recorded: the records go next, or the reset records its own');
        // The operator's reset, once the process let go: its state, and the mark cleared.
        assert.equal(await resetUnheldSession(env.db, instanceId), true);
        const reset = await instanceRow(env.db, instanceId);
        assert.deepEqual([reset.state, reset.phone, reset.unlink_requested_at], ['starting', null, null]);
      } else {
        assert.ok(credentials.length > 0, 'a restart keeps the pairing');
        assert.equal(row.state, 'reconnecting');
      }
    }
  });
});

/** A session process (main.ts) for the instance, as its pod runs it; the returned stop is the
 *  pod's SIGTERM. */
async function startSessionProcess(env: Env, instanceId: string, extra: Record<string, string> = {}): Promise<() => Promise<void>> {
  const dataDir = mkdtempSync(join(tmpdir(), 'sb-session-process-'));
  const cfg = loadSessionConfig({
    INSTANCE_ID: instanceId, DATABASE_URL: env.dbUrl, NATS_URL, NATS_NAMESPACE: env.namespace, NETWORK_DRIVER: 'sandbox',
    ENCRYPTION_KEY: env.encryptionKey.toString('base64'), DATA_DIR: dataDir, LOG_LEVEL: 'error', ...extra,
  });
  const shutdown = await runSessionProcess(cfg).catch((err: unknown) => {
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  });
  return async () => {
    try {
      await shutdown();
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  };
}

describe('session process configuration', () => {
  it('names each missing variable', () => {
    assert.throws(() => loadSessionConfig({}), (e: any) => /INSTANCE_ID/.test(e.message) && /DATABASE_URL/.test(e.message) && /NATS_URL/.test(e.message));
    assert.throws(() => loadSessionConfig({ HEALTH_PORT: 'eighty' }), (e: unknown) => e instanceof ConfigError && e.problems.some((p) => p.startsWith('HEALTH_PORT: ')));
  });

  it('exits non-zero with one clear line for each bad or missing variable', async () => {
    const out = spawnSync(process.execPath, [await builtService('session')], {
      env: { PATH: process.env.PATH, INSTANCE_ID: 'Bad_Id' },
      encoding: 'utf8',
      timeout: 20_000,
    });
    assert.notEqual(out.status, 0);
    const lines = out.stderr.trim().split('\n').filter((l) => !l.startsWith('npm warn'));
    assert.deepEqual(lines.map((l) => /^configuration error: (\w+): /.exec(l)?.[1]), ['INSTANCE_ID', 'DATABASE_URL', 'NATS_URL', 'ENCRYPTION_KEY'], out.stderr);
  });
});
