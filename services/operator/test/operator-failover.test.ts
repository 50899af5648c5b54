// Two operator replicas (src/operator.ts) against the fake API server, each through its own
// link that can be cut: only the leader reconciles; a partitioned leader stops and reports the
// loss, the standby takes over once the lease expires and reconciles what happened meanwhile;
// a clean stop hands the lease over at once and is not reported as a loss.
import assert from 'node:assert/strict';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { InstanceStore } from '../src/instance-store.ts';
import { Operator } from '../src/operator.ts';
import { GROUP, INSTANCES, VERSION, sessionPodName } from '../src/resources.ts';
import type { FakeApiServer } from './fake-apiserver.ts';
import { LinkProxy, NAMESPACE, chartRoleRules, eventually, kubeConfigFor, openTestDb, silentLogger, startFake, type TestDb } from './helpers.ts';

const LEASE = 'sb-switchboard-operator'; // the Lease the chart's Role grants (release sb)

describe('operator: leader failover between replicas', function () {
  this.timeout(20_000);
  let fake: FakeApiServer;
  let t: TestDb;
  const replicas: { operator: Operator; link: LinkProxy; lost: number }[] = [];
  const leading = new Set<string>();
  let maxLeaders = 0;

  before(async () => {
    fake = await startFake({ roles: { operator: chartRoleRules('operator') } }); // the replicas are held to the chart's Role
    t = await openTestDb();
  });
  after(async () => {
    for (const r of replicas) {
      await r.operator.stop();
      await r.link.stop();
    }
    await fake.stop();
    await t.close();
  });

  async function replica(identity: string, leaseDurationMs = 1000) {
    const link = new LinkProxy(fake.url);
    const entry = { operator: undefined as unknown as Operator, link, lost: 0 };
    entry.operator = new Operator({
      kubeConfig: kubeConfigFor(await link.start(), 'operator'),
      namespace: NAMESPACE,
      store: new InstanceStore(t.db, t.crypto),
      session: { image: 'switchboard:test' },
      logger: silentLogger,
      resyncMs: 1000, statePollMs: 100, podPollMs: 100, backoffBaseMs: 20, backoffMaxMs: 300, informerRestartMinMs: 50,
      leaseName: LEASE,
      identity,
      election: { leaseDurationMs, renewDeadlineMs: 600, renewIntervalMs: 150, retryIntervalMs: 100 },
      onLostLeadership: () => void entry.lost++,
    });
    // Count leaders through the controller starts/stops the Operator drives.
    const controller = entry.operator.controller;
    const start = controller.start.bind(controller);
    const stop = controller.stop.bind(controller);
    controller.start = async () => {
      leading.add(identity);
      maxLeaders = Math.max(maxLeaders, leading.size);
      await start();
    };
    controller.stop = async () => {
      leading.delete(identity);
      await stop();
    };
    replicas.push(entry);
    entry.operator.start();
    return entry;
  }

  const kubectl = () => kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi);
  const create = (name: string) =>
    kubectl().createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'Instance', metadata: { name }, spec: { displayName: name } } });
  const pod = (id: string) => fake.get('', 'v1', 'pods', NAMESPACE, sessionPodName(id));

  it('runs the controller on the leader only, fails over when the leader is cut off, and hands over on a clean stop', async () => {
    const a = await replica('a');
    await eventually(() => assert.ok(a.operator.isLeader, 'a leads'));
    // b's own leases last 10 s: once b leads, nobody may take its lease before that unless b
    // releases it (the clean stop below), however slow the machine.
    const b = await replica('b', 10_000);
    await create('inst-before');
    await eventually(() => assert.ok(pod('inst-before'), 'inst-before has a session pod'));
    await new Promise((r) => setTimeout(r, 300));
    assert.ok(!b.operator.isLeader && !leading.has('b'), 'the standby does not reconcile');

    a.link.cut(); // a is partitioned from the API server
    await create('inst-during');
    await eventually(() => assert.ok(b.operator.isLeader, 'b leads'), 5000);
    assert.equal(a.lost, 1, 'the cut-off leader stopped and reported the loss (main exits on it)');
    assert.equal(a.operator.isLeader, false);
    await eventually(() => assert.ok(pod('inst-during'), 'inst-during has a session pod'), 5000);
    assert.equal(maxLeaders, 1, 'never two controllers at once');
    assert.equal(fake.get('coordination.k8s.io', 'v1', 'leases', NAMESPACE, LEASE)!.spec.holderIdentity, 'b');

    const c = await replica('c');
    const stoppedAt = Date.now();
    await b.operator.stop();
    assert.equal(b.lost, 0, 'a clean stop is not a loss of leadership');
    await eventually(() => assert.ok(c.operator.isLeader, 'c leads'), 5000);
    assert.ok(Date.now() - stoppedAt < 5000, 'the released lease is taken before it would have expired (10 s)');
    await create('inst-after');
    await eventually(() => assert.ok(pod('inst-after'), 'inst-after has a session pod'), 5000);
    assert.equal(maxLeaders, 1);
  });
});
