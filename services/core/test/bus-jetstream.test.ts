// The JetStream bus against the shared contract on the real NATS server, plus what only a real
// server can do: consumers deleted behind the bus's back, and a NATS restart (kill -9) on a
// private nats-server so the shared one is never disturbed.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { createLogger } from '../src/logger.ts';
import { JetStreamBus, openBus } from '../src/bus/index.ts';
import { RpcError, subjects, type Bus } from '../src/bus/types.ts';
import { NATS_URL, deleteNamespaceStreams, testNamespace } from '../../../test/support/services.ts';
import { defineBusContract, waitFor } from './bus-contract.ts';

const log = createLogger({ level: 'silent' });
const text = (s: string) => new TextEncoder().encode(s);
const str = (b: Uint8Array) => new TextDecoder().decode(b);


const namespace = testNamespace();
after(() => deleteNamespaceStreams(NATS_URL, namespace));

defineBusContract('jetstream', () => JetStreamBus.open({ natsUrl: NATS_URL, namespace, log }));

describe('JetStreamBus', () => {
  let bus: Bus;
  afterEach(async () => {
    await bus?.close();
  });

  it('openBus with a NATS URL creates the namespaced streams with their limits', async () => {
    bus = await openBus({ natsUrl: NATS_URL, namespace, log });
    const nc = await connect({ servers: NATS_URL });
    try {
      const jsm = await jetstreamManager(nc);
      const commands = await jsm.streams.info(`${namespace.toUpperCase()}_COMMANDS`);
      assert.deepEqual(commands.config.subjects, [`${namespace}.cmd.>`]);
      assert.equal(commands.config.retention, 'workqueue');
      assert.equal(commands.config.storage, 'file');
      assert.equal(commands.config.duplicate_window, 120e9);
      assert.equal(commands.config.max_age, 25 * 3600e9);
      const events = await jsm.streams.info(`${namespace.toUpperCase()}_EVENTS`);
      assert.deepEqual(events.config.subjects, [`${namespace}.evt.>`]);
      assert.equal(events.config.retention, 'limits');
      assert.equal(events.config.max_age, 7 * 24 * 3600e9);
    } finally {
      await nc.close();
    }
  });

  it('resumes consuming after its consumer is deleted behind its back', async () => {
    bus = await JetStreamBus.open({ natsUrl: NATS_URL, namespace, log, pullExpiresMs: 2000 });
    const inst = `del${Date.now()}`;
    const durable = `d-${inst}`;
    const got: string[] = [];
    await bus.consume({ stream: 'commands', filter: subjects.command(inst), durable, maxAckPending: 1 }, async (m) => {
      got.push(str(m.data));
    });
    await bus.publish(subjects.command(inst), text('before'));
    await waitFor(() => got.length === 1, 'the first message');

    const nc = await connect({ servers: NATS_URL });
    try {
      const jsm = await jetstreamManager(nc);
      // NATS 2.9 may refuse a delete with "directory not empty" while it flushes the consumer.
      const deleted = () =>
        jsm.consumers.delete(`${namespace.toUpperCase()}_COMMANDS`, durable).then(
          () => true,
          (err) => /not found/i.test(String(err)),
        );
      await waitFor(deleted, 'the consumer deletion', 5_000);
      await bus.publish(subjects.command(inst), text('after'));
      await waitFor(() => got.length === 2, 'the message published after the deletion', 15_000);
      assert.deepEqual(got, ['before', 'after']);
      const info = await jsm.consumers.info(`${namespace.toUpperCase()}_COMMANDS`, durable);
      assert.equal(info.config.max_ack_pending, 1, 'the consumer was recreated with its settings');
    } finally {
      await nc.close();
    }
  });

  it('lets the server drop a consumer idle past its lifetime; consuming again gets what was published meanwhile', async () => {
    bus = await JetStreamBus.open({ natsUrl: NATS_URL, namespace, log, pullExpiresMs: 1000 });
    const inst = `idle${Date.now()}`;
    const durable = `session-${inst}`;
    const got: string[] = [];
    const options = { stream: 'commands' as const, filter: subjects.command(inst), durable, maxAckPending: 1, singleOwner: true, idleLifetimeMs: 2000 };
    const first = await bus.consume(options, async (m) => void got.push(str(m.data)));
    await bus.publish(subjects.command(inst), text('one'));
    await waitFor(() => got.length === 1, 'the first message');
    const nc = await connect({ servers: NATS_URL });
    try {
      const jsm = await jetstreamManager(nc);
      const exists = () => jsm.consumers.info(`${namespace.toUpperCase()}_COMMANDS`, durable).then(() => true, () => false);
      await new Promise((r) => setTimeout(r, 3000));
      assert.equal(await exists(), true, 'kept while consumed');
      await first.stop(); // the instance paused, or deleted
      await waitFor(async () => !(await exists()), 'the idle consumer dropped by the server', 10_000);
      await bus.publish(subjects.command(inst), text('two'));
      await bus.consume(options, async (m) => void got.push(str(m.data)));
      await waitFor(() => got.length === 2, 'the message published while no consumer existed', 10_000);
      assert.deepEqual(got, ['one', 'two']);
    } finally {
      await nc.close();
    }
  });

  it('recreates a deleted stream on publish and resumes consuming', async () => {
    const ns = testNamespace();
    try {
      bus = await JetStreamBus.open({ natsUrl: NATS_URL, namespace: ns, log, pullExpiresMs: 2000 });
      const got: string[] = [];
      await bus.consume({ stream: 'events', filter: 'evt.>', durable: 'dispatch' }, async (m) => {
        got.push(str(m.data));
      });
      await bus.publish(subjects.event('i1', 'x'), text('e1'), { msgId: 'e1' });
      await waitFor(() => got.length === 1, 'the first event');
      await deleteNamespaceStreams(NATS_URL, ns);
      await bus.publish(subjects.event('i1', 'x'), text('e2'), { msgId: 'e2' });
      await waitFor(() => got.length === 2, 'the event published after the deletion', 15_000);
      assert.deepEqual(got, ['e1', 'e2']);
    } finally {
      await bus?.close();
      await deleteNamespaceStreams(NATS_URL, ns);
    }
  });

  it('recreates a deleted stream on publish when nothing consumes it (every session waiting for a scan)', async () => {
    const ns = testNamespace();
    let publisher: JetStreamBus | undefined;
    try {
      publisher = await JetStreamBus.open({ natsUrl: NATS_URL, namespace: ns, log, publishRetryMs: 5_000 });
      await deleteNamespaceStreams(NATS_URL, ns);
      await publisher.publish(subjects.command('i1'), text('c1'), { msgId: 'c1' });
      const got: string[] = [];
      await publisher.consume({ stream: 'commands', filter: 'cmd.i1', durable: 'session-i1' }, async (m) => {
        got.push(str(m.data));
      });
      await waitFor(() => got.length === 1, 'the command published to the recreated stream');
    } finally {
      await publisher?.close();
      await deleteNamespaceStreams(NATS_URL, ns);
    }
  });

  it('does not redeliver a message whose handler outlives the ack wait but is still running', async () => {
    bus = await JetStreamBus.open({ natsUrl: NATS_URL, namespace, log });
    const inst = `slow${Date.now()}`;
    const deliveries: number[] = [];
    await bus.consume(
      { stream: 'commands', filter: subjects.command(inst), durable: `d-${inst}`, maxAckPending: 1, ackWaitMs: 400 },
      async (m) => {
        deliveries.push(m.deliveryCount);
        await new Promise((r) => setTimeout(r, 1200));
      },
    );
    await bus.publish(subjects.command(inst), text('slow'));
    await waitFor(async () => deliveries.length === 1 && (await bus.pending('commands', `d-${inst}`)) === 0, 'the ack');
    assert.deepEqual(deliveries, [1]);
  });

  it('refuses a request larger than the server carries with 413, not as an outage to retry', async () => {
    bus = await JetStreamBus.open({ natsUrl: NATS_URL, namespace, log });
    const served = await bus.serve(subjects.rpc('big', 'echo'), async (d) => d);
    const nc = await connect({ servers: NATS_URL });
    const maxPayload = nc.info!.max_payload;
    await nc.close();
    try {
      assert.equal((await bus.request(subjects.rpc('big', 'echo'), new Uint8Array(1000), 2000)).length, 1000);
      await assert.rejects(bus.request(subjects.rpc('big', 'echo'), new Uint8Array(maxPayload + 1), 2000), (err: unknown) => {
        assert.ok(err instanceof RpcError);
        assert.deepEqual([err.status, err.code], [413, 'request_too_large']);
        assert.match(err.message, new RegExp(`${maxPayload + 1} bytes.* ${maxPayload} bytes`));
        assert.doesNotMatch(err.message, /NATS|max_payload/, 'no server internals');
        return true;
      });
    } finally {
      await served.stop();
    }
  });

  it('rejects Nats- headers, which are reserved', async () => {
    bus = await JetStreamBus.open({ natsUrl: NATS_URL, namespace, log });
    await assert.rejects(bus.publish(subjects.command('x'), text(''), { headers: { 'Nats-Expected-Stream': 'x' } }), /reserved/);
  });

  describe('across a NATS restart (private nats-server, kill -9)', function () {
    this.timeout(60_000);
    let server: PrivateNats;

    before(async () => {
      server = await PrivateNats.start();
    });
    after(async () => {
      await server?.destroy();
    });

    it('answers a request made while NATS is down with 503 bus_unavailable, not a time-out', async () => {
      bus = await JetStreamBus.open({ natsUrl: server.url, namespace: 'rpc-down', log });
      const served = await bus.serve(subjects.rpc('inst', 'echo'), async (d) => d);
      const isUnavailable = (err: unknown) => err instanceof RpcError && err.status === 503 && err.code === 'bus_unavailable';
      try {
        assert.equal(str(await bus.request(subjects.rpc('inst', 'echo'), text('up'), 2000)), 'up');
        await server.kill();
        // Under way when the connection went, or made after: both are the outage, not a silent session.
        await assert.rejects(bus.request(subjects.rpc('inst', 'echo'), text('during'), 3000), isUnavailable);
        await assert.rejects(bus.request(subjects.rpc('inst', 'echo'), text('down'), 3000), isUnavailable);
        await server.restart();
        await waitFor(async () => bus.request(subjects.rpc('inst', 'echo'), text('back'), 1000).then(() => true, () => false), 'requests answered again', 20_000);
      } finally {
        await served.stop();
      }
    });

    it('loses nothing published or acked, and consumes what is published after the restart', async () => {
      bus = await JetStreamBus.open({ natsUrl: server.url, namespace: 'restart', log, pullExpiresMs: 2000, publishRetryMs: 20_000 });
      const got: string[] = [];
      await bus.consume({ stream: 'commands', filter: 'cmd.inst', durable: 'session-inst', maxAckPending: 1 }, async (m) => {
        got.push(str(m.data));
      });
      for (const body of ['1', '2', '3']) await bus.publish('cmd.inst', text(body), { msgId: body });
      await waitFor(() => got.length === 3, 'three commands');
      await waitFor(async () => (await bus.pending('commands', 'session-inst')) === 0, 'acks stored');
      // Events nobody has consumed yet must survive the restart too.
      for (const body of ['e1', 'e2']) await bus.publish('evt.inst.x', text(body), { msgId: body });

      await server.kill();
      await server.restart();

      for (const body of ['4', '5', '6']) await bus.publish('cmd.inst', text(body), { msgId: body });
      await waitFor(() => got.length >= 6, 'the commands published after the restart', 30_000);
      assert.deepEqual(got, ['1', '2', '3', '4', '5', '6']);

      const events: string[] = [];
      await bus.consume({ stream: 'events', filter: 'evt.>', durable: 'dispatch' }, async (m) => {
        events.push(str(m.data));
      });
      await waitFor(() => events.length === 2, 'the events stored before the restart');
      assert.deepEqual(events, ['e1', 'e2']);
    });

    it('does not hold a single-owner queue for the ack wait when an ack is lost with the server', async () => {
      bus = await JetStreamBus.open({ natsUrl: server.url, namespace: 'lostack', log, pullExpiresMs: 60_000, publishRetryMs: 20_000 });
      const got: string[] = [];
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      const opts = { stream: 'commands', filter: 'cmd.inst', durable: 'session-inst', maxAckPending: 1, ackWaitMs: 120_000, singleOwner: true } as const;
      await bus.consume(opts, async (m) => {
        got.push(str(m.data));
        if (str(m.data) === 'held') await released; // finishes, and acks, while the server is down
      });
      await bus.publish('cmd.inst', text('held'), { msgId: 'held' });
      await waitFor(() => got.length === 1, 'the held command');

      await server.kill();
      release();
      await new Promise((r) => setTimeout(r, 200));
      await server.restart();

      await bus.publish('cmd.inst', text('next'), { msgId: 'next' });
      // Without a release on reconnect, "held" stays unacknowledged for the 120 s ack wait and
      // "next" waits behind it (max_ack_pending 1).
      await waitFor(() => got.includes('next'), 'the command published after the restart', 20_000);
    });

    it('leaves idle single-owner consumers subscribed after a restart: one look each, not a restart', async () => {
      bus = await JetStreamBus.open({ natsUrl: server.url, namespace: 'idle', log, pullExpiresMs: 60_000, publishRetryMs: 20_000 });
      const got: string[] = [];
      const instances = ['a', 'b', 'c', 'd', 'e', 'f'];
      for (const inst of instances) {
        const opts = { stream: 'commands', filter: `cmd.${inst}`, durable: `session-${inst}`, maxAckPending: 1, singleOwner: true } as const;
        await bus.consume(opts, async (m) => void got.push(str(m.data)));
      }
      for (const inst of instances) await bus.publish(`cmd.${inst}`, text(inst), { msgId: inst });
      await waitFor(() => got.length === instances.length, 'one command for each instance');
      for (const inst of instances) await waitFor(async () => (await bus.pending('commands', `session-${inst}`)) === 0, 'acks stored');

      // An orderly restart (an upgrade): after kill -9 the server can come back counting acks it
      // had not yet written as outstanding, which the bus then rightly releases.
      await server.kill('SIGTERM');
      await server.restart();
      await bus.publish('cmd.a', text('after'), { msgId: 'after' }); // returns once the bus is back
      await waitFor(() => got.includes('after'), 'the command published after the restart', 20_000);
      await new Promise((r) => setTimeout(r, 1500)); // past the reconnect's random delay of ≤ 1 s

      // The server's JetStream API counter started again at 0 with the restart. nats.js looks at
      // each consumer once as it resubscribes, and the bus once more (12 calls, and this one); a
      // restart of a consumer would add at least three calls (stream and consumer upserts, look-up).
      const nc = await connect({ servers: server.url });
      try {
        const { api } = await (await jetstreamManager(nc)).getAccountInfo();
        // Room for a call retried while the server recovers; a restart each would be 25 or more.
        assert.ok(api.total <= 3 * instances.length, `${api.total} JetStream API calls after the restart`);
      } finally {
        await nc.close();
      }
    });

    it('recreates its streams and consumers when NATS comes back with empty storage', async () => {
      bus = await JetStreamBus.open({ natsUrl: server.url, namespace: 'wiped', log, pullExpiresMs: 2000, publishRetryMs: 20_000 });
      const got: string[] = [];
      await bus.consume({ stream: 'commands', filter: 'cmd.inst', durable: 'session-inst', maxAckPending: 1 }, async (m) => {
        got.push(str(m.data));
      });
      await bus.publish('cmd.inst', text('before'));
      await waitFor(() => got.length === 1, 'the first command');

      await server.kill();
      await server.wipeStorage();
      await server.restart();

      await bus.publish('cmd.inst', text('after'));
      await waitFor(() => got.length === 2, 'the command published after the restart', 30_000);
      assert.deepEqual(got, ['before', 'after']);
    });
  });
});

/** A nats-server of this test alone, on a free port with its own storage directory. */
class PrivateNats {
  private proc: ChildProcess | undefined;

  private constructor(
    readonly port: number,
    private readonly storeDir: string,
  ) {}

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  static async start(): Promise<PrivateNats> {
    const server = new PrivateNats(await freePort(), await mkdtemp(join(tmpdir(), 'sb-nats-')));
    await server.restart();
    return server;
  }

  async restart(): Promise<void> {
    this.proc = spawn('/usr/sbin/nats-server', ['-js', '-a', '127.0.0.1', '-p', String(this.port), '-sd', this.storeDir], {
      stdio: 'ignore',
    });
    await waitFor(() => canConnect(this.port), 'nats-server to listen', 10_000);
  }

  /** kill -9 by default; SIGTERM is an orderly stop, which writes JetStream's state first. */
  async kill(signal: 'SIGKILL' | 'SIGTERM' = 'SIGKILL'): Promise<void> {
    const proc = this.proc;
    if (!proc || proc.exitCode !== null) return;
    const exited = new Promise((r) => proc.once('exit', r));
    proc.kill(signal);
    await exited;
  }

  /** Loses everything JetStream stored, as a server on a fresh volume would. */
  async wipeStorage(): Promise<void> {
    await rm(this.storeDir, { recursive: true, force: true });
  }

  async destroy(): Promise<void> {
    await this.kill();
    await rm(this.storeDir, { recursive: true, force: true });
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
