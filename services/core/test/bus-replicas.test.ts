// NATS_STREAM_REPLICAS on a real three-server NATS cluster (private to this test): the streams
// and the media bucket are kept on every server, and killing one (kill -9) loses no command,
// event or file.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { createLogger } from '../src/logger.ts';
import { Crypto } from '../src/crypto.ts';
import { JetStreamBus } from '../src/bus/index.ts';
import { NatsMediaStore, natsMediaBucketName } from '../src/media/nats-store.ts';
import { NATS_URL, deleteNamespaceStreams, testNamespace } from '../../../test/support/services.ts';
import { freePort } from '../../../test/support/server.ts';
import { waitFor } from './bus-contract.ts';

const log = createLogger({ level: 'silent' });
const text = (s: string) => new TextEncoder().encode(s);
const str = (b: Uint8Array) => new TextDecoder().decode(b);

describe('NATS_STREAM_REPLICAS on a NATS cluster', function () {
  this.timeout(120_000);
  let cluster: NatsCluster;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  const closers: (() => Promise<unknown>)[] = [];

  before(async () => {
    cluster = await NatsCluster.start(3);
    nc = await connect({ servers: cluster.urls, maxReconnectAttempts: -1, reconnectTimeWait: 200 });
    jsm = await jetstreamManager(nc);
  });
  afterEach(async () => {
    for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
  });
  after(async () => {
    await nc?.close();
    await cluster?.destroy();
  });

  const openBus = async (namespace: string, replicas: number) => {
    const bus = await JetStreamBus.open({ natsUrl: cluster.urls.join(','), namespace, log, replicas, publishRetryMs: 30_000, pullExpiresMs: 2000 });
    closers.push(() => bus.close());
    return bus;
  };
  const peersOf = async (stream: string) => {
    const info = await jsm.streams.info(stream);
    return { replicas: info.config.num_replicas, followers: info.cluster?.replicas?.length ?? 0, leader: info.cluster?.leader };
  };

  it('keeps commands, events and media on three servers, and loses none when the leader is killed', async () => {
    const namespace = testNamespace();
    const bus = await openBus(namespace, 3);
    const media = await NatsMediaStore.open({ natsUrl: cluster.urls.join(','), namespace, crypto: new Crypto(randomBytes(32)), replicas: 3 });
    closers.push(() => media.close());
    const prefix = namespace.toUpperCase();
    for (const stream of [`${prefix}_COMMANDS`, `${prefix}_EVENTS`, `OBJ_${natsMediaBucketName(namespace)}`]) {
      const peers = await peersOf(stream);
      assert.deepEqual([peers.replicas, peers.followers], [3, 2], stream);
    }

    const got: string[] = [];
    await bus.consume({ stream: 'commands', filter: 'cmd.inst', durable: 'session-inst', maxAckPending: 1 }, async (m) => void got.push(str(m.data)));
    await bus.publish('cmd.inst', text('before-1'));
    await waitFor(() => got.length === 1, 'the first command');
    const consumer = await jsm.consumers.info(`${prefix}_COMMANDS`, 'session-inst');
    assert.equal(consumer.cluster?.replicas?.length, 2, "the session's position is kept on every server too");
    const file = randomBytes(300_000);
    await media.put('photo-1', file);
    await bus.publish('evt.inst', text('event-1'));

    // The commands stream's leader dies (kill -9): another server takes over, with everything.
    const { leader } = await peersOf(`${prefix}_COMMANDS`);
    await cluster.kill(leader!);
    await bus.publish('cmd.inst', text('after-1'));
    await bus.publish('cmd.inst', text('after-2'));
    await waitFor(() => got.length === 3, 'the commands published after the kill', 60_000);
    assert.deepEqual(got, ['before-1', 'after-1', 'after-2']);
    // Each stream elects its own new leader; the bucket's may still be electing (a read then
    // times out, as a client's would, and is asked again).
    let read: Uint8Array | undefined;
    await waitFor(async () => (read = await media.get('photo-1').catch(() => undefined)) !== undefined, 'the file', 30_000);
    assert.deepEqual(Buffer.from(read!), file, 'the file, from the servers left');
    const events: string[] = [];
    await bus.consume({ stream: 'events', filter: 'evt.>', durable: 'dispatcher', maxAckPending: 10 }, async (m) => void events.push(str(m.data)));
    await waitFor(() => events.length === 1, 'the event recorded before the kill', 30_000);
    assert.deepEqual(events, ['event-1']);
    await cluster.restart(leader!);
  });

  it('moves existing streams and the media bucket to the configured count, and never back down', async () => {
    const namespace = testNamespace();
    const crypto = new Crypto(randomBytes(32));
    await (await openBus(namespace, 1)).close();
    await (await NatsMediaStore.open({ natsUrl: cluster.urls.join(','), namespace, crypto })).close();
    const streams = [`${namespace.toUpperCase()}_COMMANDS`, `${namespace.toUpperCase()}_EVENTS`, `OBJ_${natsMediaBucketName(namespace)}`];
    for (const stream of streams) assert.equal((await peersOf(stream)).replicas, 1, stream);
    await openBus(namespace, 3);
    const media = await NatsMediaStore.open({ natsUrl: cluster.urls.join(','), namespace, crypto, replicas: 3 });
    closers.push(() => media.close());
    for (const stream of streams) assert.equal((await peersOf(stream)).replicas, 3, stream);
    // A process started with a lower value (a one-off job, a pod without the setting) takes none away.
    await (await openBus(namespace, 1)).close();
    await (await NatsMediaStore.open({ natsUrl: cluster.urls.join(','), namespace, crypto })).close();
    for (const stream of streams) assert.equal((await peersOf(stream)).replicas, 3, `${stream} kept`);
  });

  it('refuses more replicas than there are servers, naming NATS_STREAM_REPLICAS', async () => {
    const refusal = /NATS_STREAM_REPLICAS=(3|5) needs a NATS cluster of at least \1 JetStream servers/;
    // A single server (the shared one), and a cluster of three asked for five.
    const single = testNamespace();
    try {
      await assert.rejects(JetStreamBus.open({ natsUrl: NATS_URL, namespace: single, log, replicas: 3 }), refusal);
      await assert.rejects(NatsMediaStore.open({ natsUrl: NATS_URL, namespace: single, crypto: new Crypto(randomBytes(32)), replicas: 3 }), refusal);
      // Streams a deployment made with one replica: a single server would take the change and keep one copy.
      await (await JetStreamBus.open({ natsUrl: NATS_URL, namespace: single, log })).close();
      await assert.rejects(JetStreamBus.open({ natsUrl: NATS_URL, namespace: single, log, replicas: 3 }), /not part of one/);
      const sharedNc = await connect({ servers: NATS_URL });
      try {
        assert.equal((await (await jetstreamManager(sharedNc)).streams.info(`${single.toUpperCase()}_COMMANDS`)).config.num_replicas, 1, 'left as it was');
      } finally {
        await sharedNc.close();
      }
    } finally {
      await deleteNamespaceStreams(NATS_URL, single);
    }
    await assert.rejects(JetStreamBus.open({ natsUrl: cluster.urls.join(','), namespace: testNamespace(), log, replicas: 5 }), refusal);
    // A cluster of two (it says it is one): the copies made are counted, an existing stream's too.
    const pair = await NatsCluster.start(2);
    try {
      const namespace = testNamespace();
      await (await JetStreamBus.open({ natsUrl: pair.urls.join(','), namespace, log })).close();
      await (await NatsMediaStore.open({ natsUrl: pair.urls.join(','), namespace, crypto: new Crypto(randomBytes(32)) })).close();
      await assert.rejects(JetStreamBus.open({ natsUrl: pair.urls.join(','), namespace, log, replicas: 3 }), refusal);
      await assert.rejects(NatsMediaStore.open({ natsUrl: pair.urls.join(','), namespace, crypto: new Crypto(randomBytes(32)), replicas: 3 }), refusal);
    } finally {
      await pair.destroy();
    }
  });
});

/** Three nats-server processes of this test alone, clustered, each with its own storage. */
class NatsCluster {
  private readonly procs = new Map<string, ChildProcess>();

  private constructor(
    private readonly nodes: { name: string; port: number; routePort: number; dir: string }[],
    private readonly clusterName: string,
  ) {}

  get urls(): string[] {
    return this.nodes.map((n) => `nats://127.0.0.1:${n.port}`);
  }

  static async start(size: number): Promise<NatsCluster> {
    const nodes = [];
    for (let i = 1; i <= size; i++) nodes.push({ name: `n${i}`, port: await freePort(), routePort: await freePort(), dir: await mkdtemp(join(tmpdir(), 'sb-nats-cluster-')) });
    const cluster = new NatsCluster(nodes, `sb-${randomBytes(3).toString('hex')}`);
    for (const node of nodes) cluster.spawn(node.name);
    await cluster.jetStreamReady();
    return cluster;
  }

  /** kill -9 of one server, by its name (as stream info names leaders). */
  async kill(name: string): Promise<void> {
    const proc = this.procs.get(name);
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    proc.kill('SIGKILL');
    await exited;
  }

  async restart(name: string): Promise<void> {
    this.spawn(name);
    await this.jetStreamReady();
  }

  async destroy(): Promise<void> {
    for (const node of this.nodes) await this.kill(node.name);
    for (const node of this.nodes) await rm(node.dir, { recursive: true, force: true });
  }

  private spawn(name: string): void {
    const node = this.nodes.find((n) => n.name === name)!;
    const routes = this.nodes.map((n) => `nats://127.0.0.1:${n.routePort}`).join(',');
    const args = ['-a', '127.0.0.1', '-p', String(node.port), '-js', '-sd', node.dir, '-n', node.name, '--cluster_name', this.clusterName, '--cluster', `nats://127.0.0.1:${node.routePort}`, '--routes', routes];
    this.procs.set(name, spawn('/usr/sbin/nats-server', args, { stdio: 'ignore' }));
  }

  /** Ready once a stream on every server can be made: the servers found each other, elected
   *  their meta leader, and a restarted one caught up. */
  private async jetStreamReady(): Promise<void> {
    let nc: NatsConnection | undefined;
    const probe = { name: `PROBE_${randomBytes(4).toString('hex')}`, subjects: [`probe.${randomBytes(4).toString('hex')}`], num_replicas: this.nodes.length };
    try {
      await waitFor(async () => {
        nc ??= await connect({ servers: this.urls, maxReconnectAttempts: -1, reconnectTimeWait: 100 }).catch(() => undefined);
        const made = nc && (await jetstreamManager(nc).then((jsm) => jsm.streams.add(probe)).then(() => true, () => false));
        if (!made) await new Promise((r) => setTimeout(r, 200));
        return Boolean(made);
      }, 'the JetStream cluster', 60_000);
      await (await jetstreamManager(nc!)).streams.delete(probe.name);
    } finally {
      await nc?.close();
    }
  }
}
