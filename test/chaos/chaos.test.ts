// Chaos in cluster mode (issue 10): real PostgreSQL and NATS servers of this run alone, the
// gateway, two dispatchers and one session per instance as separate processes under a supervisor
// that restarts whatever exits (as Kubernetes would). During a mixed load of API sends and sandbox
// inbound messages the test kills -9 the gateway, a session and a dispatcher, and restarts NATS and
// PostgreSQL. Then, without any help from the test:
// - every accepted send exists and is terminal or still queued;
// - no message reached the sandbox network twice unless its item is `uncertain`, and every one it
//   took came back as the account's own message (the echo);
// - every recorded event that has a destination reached the receiver at least once, and every
//   copy of an event carries the same id and the same body.
// `make test` runs one short round; `make chaos` (CHAOS_LONG=1) runs several longer ones.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import knexFactory, { type Knex } from 'knex';
import { startHttpsReceiver, type HttpsReceiver } from '../support/https-receiver.ts';
import { ApiClient } from '../support/http.ts';
import { createInstance, ordinaryPhone, pairOnSandbox, setWebhook, type BenchInstance } from '../bench/api.ts';
import { startCluster, startPrivateNats, startPrivatePostgres, waitUntil, type Cluster, type PrivateServer } from '../support/cluster.ts';

const LONG = process.env.CHAOS_LONG === '1';
const ROUNDS = LONG ? 4 : 1;
const PAUSE_MS = LONG ? 4000 : 2500; // between two faults: long enough for the victim to come back
const TERMINAL = ['sent', 'delivered', 'read', 'played', 'failed', 'uncertain', 'cancelled', 'expired'];
const SETTLED_DELIVERY = ['delivered', 'filtered', 'no_destination'];

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Sends and inbound messages at a steady pace until stopped; remembers what was accepted. */
class MixedLoad {
  readonly acceptedSends = new Map<string, string>(); // idempotency key → item id
  readonly inboundIds = new Set<string>();
  failures = 0;
  /** Answers that blame the server (500, 501) rather than an outage (502–504) or the request. */
  readonly serverFaults: string[] = [];
  private stopped = false;
  private loops: Promise<void>[] = [];

  constructor(
    private readonly url: string,
    private readonly adminKey: string,
    private readonly instances: BenchInstance[],
  ) {}

  start(): void {
    this.loops = [this.sendLoop(), this.inboundLoop()];
  }

  /** Stops once both loops got `minimum` answers (waiting at most `graceMs` for them): on a busy
   *  machine the faults can leave a loop with few answers, and the checks need some of each. */
  async stop(minimum: number, graceMs: number): Promise<void> {
    const until = Date.now() + graceMs;
    while ((this.acceptedSends.size < minimum || this.inboundIds.size < minimum) && Date.now() < until) await sleep(100);
    this.stopped = true;
    await Promise.all(this.loops);
  }

  private async sendLoop(): Promise<void> {
    for (let i = 0; !this.stopped; i++) {
      const inst = this.instances[i % this.instances.length];
      // A few outcomes of the sandbox's magic numbers: failed (0000) and connection lost mid-send (0001).
      const phone = i % 25 === 7 ? '5511900000001' : i % 25 === 13 ? '5511900000000' : ordinaryPhone(i);
      const key = `chaos-${i}`;
      // Like a careful client: retry a request whose answer was lost, with the same key, until accepted.
      for (let attempt = 0; attempt < 40 && !this.stopped; attempt++) {
        const res = await this.post(`/api/instances/${inst.id}/messages`, inst.token, { phone, type: 'text', text: `chaos ${i}` }, { 'idempotency-key': key });
        if (res?.status === 202) {
          this.acceptedSends.set(key, res.body.id);
          break;
        }
        this.failures++;
        await sleep(100);
      }
      await sleep(40);
    }
  }

  private async inboundLoop(): Promise<void> {
    for (let i = 0; !this.stopped; i++) {
      const inst = this.instances[i % this.instances.length];
      const res = await this.post(`/sandbox/instances/${inst.id}/inbound`, this.adminKey, { from: '5511977770000', type: 'text', text: `inbound ${i}` });
      if (res?.status === 200) this.inboundIds.add(res.body.messageId);
      else this.failures++;
      await sleep(res ? 40 : 100);
    }
  }

  private async post(path: string, token: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any } | undefined> {
    try {
      const res = await fetch(this.url + path, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(5000),
      });
      const text = await res.text();
      if (res.status === 500 || res.status === 501) this.serverFaults.push(`${path} → ${res.status} ${text}`);
      return { status: res.status, body: text ? JSON.parse(text) : undefined };
    } catch {
      return undefined; // gateway down or the request timed out: the loop retries
    }
  }
}

describe(`chaos: cluster mode under kill -9 and server restarts (${LONG ? 'long' : 'short'} form)`, function () {
  this.timeout(LONG ? 900_000 : 150_000); // the short form's 2 minutes, and 30 s for the load's minimum (MixedLoad.stop)
  let pg: PrivateServer;
  let nats: PrivateServer;
  let cluster: Cluster;
  let receiver: HttpsReceiver;
  let db: Knex;
  const instances: BenchInstance[] = [];

  before(async () => {
    pg = await startPrivatePostgres();
    nats = await startPrivateNats();
    receiver = await startHttpsReceiver(() => ({ status: 200 }));
    cluster = await startCluster({
      databaseUrl: pg.url,
      natsUrl: nats.url,
      namespace: `chaos${randomBytes(3).toString('hex')}`,
      dispatchers: 2,
      env: {
        WEBHOOK_RETRY_SCHEDULE: '0,200,400,800,1000,2000,3000,5000',
        SANDBOX_RECEIPT_DELAY_MS: '20',
        SESSION_COMMAND_ACK_WAIT_MS: '2000',
        DISPATCHER_POLL_INTERVAL_MS: '100',
        DISPATCHER_LEASE_MS: '4000',
        DISPATCHER_ATTEMPT_TIMEOUT_MS: '3000',
      },
    });
    db = knexFactory({ client: 'pg', connection: pg.url, pool: { min: 0, max: 2 } });
    const admin = new ApiClient(cluster.url, cluster.adminKey);
    for (let i = 0; i < 2; i++) {
      const inst = await createInstance(admin, `chaos ${i}`);
      await setWebhook(admin, inst.id, receiver.url('/chaos'));
      cluster.startSession(inst.id);
      await pairOnSandbox(admin, inst.id, `55119444400${i}5`);
      instances.push(inst);
    }
  });

  after(async () => {
    await cluster?.stop();
    await db?.destroy();
    await receiver?.close();
    await nats?.close();
    await pg?.close();
  });

  it('loses nothing, sends nothing twice, delivers every event', async () => {
    const load = new MixedLoad(cluster.url, cluster.adminKey, instances);
    load.start();
    await sleep(PAUSE_MS);
    const faults: [string, () => Promise<void>][] = [
      ['kill -9 gateway', () => cluster.gateway.kill9()],
      ['kill -9 session', () => cluster.sessions.get(instances[0].id)!.kill9()],
      ['kill -9 dispatcher', () => cluster.dispatchers[0].kill9()],
      ['restart NATS', () => nats.restart()],
      ['restart PostgreSQL', () => pg.restart()],
    ];
    for (let round = 0; round < ROUNDS; round++) {
      for (const [, fault] of faults) {
        await fault();
        await sleep(PAUSE_MS);
      }
    }
    await sleep(PAUSE_MS);
    await load.stop(21, 30_000);
    assert.ok(load.acceptedSends.size > 20 && load.inboundIds.size > 20, `the load ran (${load.acceptedSends.size} sends, ${load.inboundIds.size} inbound)`);

    // Recovery without help: the gateway answers and both instances are connected again.
    await cluster.ready(30_000);
    const admin = new ApiClient(cluster.url, cluster.adminKey);
    for (const inst of instances) await waitUntil(`${inst.id} connected again`, async () => (await admin.get(`/api/instances/${inst.id}`)).body?.state === 'connected', 30_000, 200);

    // 0. An outage is a 503 to retry through, never a 500 (its stack logged as a fault of ours).
    assert.deepEqual(load.serverFaults.slice(0, 5), [], `${load.serverFaults.length} answers were server faults`);

    // 1. Every accepted send exists and ends terminal (or is still queued).
    const ids = [...load.acceptedSends.values()];
    const items = await waitUntil('every accepted send terminal or queued', async () => {
      const rows = await db('send_items').whereIn('id', ids).select('id', 'status', 'messenger_id');
      return rows.length === ids.length && rows.every((r) => TERMINAL.includes(r.status) || r.status === 'queued') ? rows : undefined;
    }, 40_000, 250);
    assert.equal(new Set(items.map((r) => r.id)).size, ids.length, 'no accepted send is missing');

    // 2. Nothing reached the network twice, except items reported uncertain.
    const ledger = (await db('sandbox_ledger').whereIn('instance_id', instances.map((i) => i.id)).pluck('messenger_id')) as string[];
    const times = new Map<string, number>();
    for (const m of ledger) times.set(m, (times.get(m) ?? 0) + 1);
    for (const item of items) {
      const n = times.get(item.messenger_id) ?? 0;
      if (n > 1) assert.equal(item.status, 'uncertain', `${item.id} reached the network ${n} times but is ${item.status}`);
    }

    // 2b. The network echoed every send it took as the account's own message, also when the
    // session that should have taken the echo was killed first (the echo is owed, like receipts).
    const instanceIds = instances.map((i) => i.id);
    const took = items.filter((r) => ['sent', 'delivered', 'read', 'played'].includes(r.status)).map((r) => r.messenger_id as string);
    await waitUntil('every send the network took echoed', async () => {
      const echoed = new Set(await db('incoming').whereIn('instance_id', instanceIds).where({ from_me: true }).whereIn('message_id', took).pluck('message_id'));
      return took.every((m) => echoed.has(m)) || undefined;
    }, 30_000, 250);

    // 3. Every recorded event with a destination reached the receiver; copies share id and body.
    await waitUntil('every event routed and settled', async () => {
      const [{ n }] = await db('events')
        .leftJoin('deliveries', 'deliveries.event_id', 'events.id')
        .whereIn('events.instance_id', instanceIds)
        .where((q) => q.whereNull('deliveries.status').orWhereNotIn('deliveries.status', SETTLED_DELIVERY))
        .count({ n: '*' });
      return Number(n) === 0;
    }, 60_000, 250);
    const events = await db('events').join('deliveries', 'deliveries.event_id', 'events.id').whereIn('events.instance_id', instanceIds).select('events.id', 'events.body', 'deliveries.status');
    // Only this test's deliveries count: the receiver's port may have served an earlier suite in
    // this mocha process, whose leftover retries can still arrive here for other instances.
    const ours = receiver.requests.filter((r) => r.path === '/chaos' && instanceIds.includes(JSON.parse(r.rawBody.toString('utf8')).instanceId));
    const copies = new Map<string, Buffer[]>();
    for (const r of ours) copies.set(r.headers['x-service-event-id'], [...(copies.get(r.headers['x-service-event-id']) ?? []), r.rawBody]);
    for (const e of events) {
      if (e.status !== 'delivered') continue;
      const received = copies.get(e.id) ?? [];
      assert.ok(received.length >= 1, `event ${e.id} was never received`);
      for (const body of received) assert.ok(body.equals(Buffer.from(e.body, 'utf8')), `a copy of ${e.id} differs`);
    }
    const known = new Set(events.map((e) => e.id));
    for (const id of copies.keys()) assert.ok(known.has(id), `the receiver got an unknown event ${id}`);
    const inboundSeen = new Set(ours.map((r) => JSON.parse(r.rawBody.toString('utf8'))).filter((e) => e.type === 'message.received').map((e) => e.data.messageId));
    for (const id of load.inboundIds) assert.ok(inboundSeen.has(id), `inbound ${id} never reached the webhook`);

    const restarts = [cluster.gateway, ...cluster.dispatchers, ...cluster.sessions.values()].map((p) => `${p.name}:${p.restarts}`).join(' ');
    console.log(`      chaos: ${ids.length} sends, ${load.inboundIds.size} inbound, ${events.length} events, ${ours.length} webhooks (${receiver.requests.length - ours.length} foreign), ${load.failures} client retries; restarts ${restarts}`);
  });
});
