// Lease-based leader election against the fake API server: one leader at a time, takeover after
// a crash (lease expiry), fast handover on a clean stop, MicroTime-formatted lease times.
import assert from 'node:assert/strict';
import { CoordinationV1Api } from '@kubernetes/client-node';
import { LeaderElector } from '../src/leader-election.ts';
import type { FakeApiServer } from './fake-apiserver.ts';
import { NAMESPACE, eventually, kubeConfigFor, startFake } from './helpers.ts';

describe('operator: leader election', function () {
  this.timeout(15_000);
  let fake: FakeApiServer;
  const leaders = new Set<string>();
  let maxLeaders = 0;
  const electors: LeaderElector[] = [];

  before(async () => (fake = await startFake()));
  after(async () => {
    for (const e of electors) await e.stop();
    await fake.stop();
  });

  /** A candidate whose connection to the API can be cut (a crashed or partitioned process) or
   *  left hanging (a link that drops packets: requests neither answer nor fail). */
  function candidate(identity: string, skewMs = 0, leaseDurationMs = 1000, onStarted: () => Promise<void> | void = () => {}) {
    const real = kubeConfigFor(fake.url).makeApiClient(CoordinationV1Api);
    const link = { up: true, hanging: false };
    const call = (target: object, v: (...a: unknown[]) => unknown, args: unknown[]) => {
      if (link.hanging) return new Promise(() => {});
      return link.up ? v.apply(target, args) : Promise.reject(new Error('connect ECONNREFUSED'));
    };
    const api = new Proxy(real, {
      get: (target, prop) => {
        const v = (target as any)[prop];
        return typeof v === 'function' ? (...args: unknown[]) => call(target, v, args) : v;
      },
    });
    const elector = new LeaderElector({
      api, namespace: NAMESPACE, leaseName: 'switchboard-operator', identity,
      leaseDurationMs, renewDeadlineMs: 600, renewIntervalMs: 150, retryIntervalMs: 100,
      now: () => Date.now() + skewMs,
      onStartedLeading: () => {
        leaders.add(identity);
        maxLeaders = Math.max(maxLeaders, leaders.size);
        return onStarted();
      },
      onStoppedLeading: () => void leaders.delete(identity),
    });
    electors.push(elector);
    elector.start();
    return { elector, link };
  }

  it('elects exactly one leader, fails over after a crash, and hands over quickly on a clean stop', async () => {
    const a = candidate('a');
    await eventually(() => assert.ok(a.elector.isLeader, 'a leads'));
    // b's own leases last 10 s: once b leads, nobody may take its lease before that unless b
    // releases it (the clean stop below), however slow the machine.
    const b = candidate('b', 0, 10_000);
    await new Promise((r) => setTimeout(r, 1200)); // longer than a lease: b must not take a renewed lease
    assert.ok(a.elector.isLeader && !b.elector.isLeader);

    const lease = fake.get('coordination.k8s.io', 'v1', 'leases', NAMESPACE, 'switchboard-operator')!;
    assert.equal(lease.spec.holderIdentity, 'a');
    assert.match(lease.spec.renewTime, /\.\d{6}Z$/, 'renewTime is a MicroTime');

    a.link.up = false; // a crashes (cannot renew)
    await eventually(() => assert.ok(b.elector.isLeader, 'b leads'), 5000);
    assert.equal(a.elector.isLeader, false);
    assert.equal(maxLeaders, 1, 'never two leaders at once');
    assert.equal(fake.get('coordination.k8s.io', 'v1', 'leases', NAMESPACE, 'switchboard-operator')!.spec.leaseTransitions, 1);

    a.link.up = true; // a comes back: b's lease is valid, a stays a follower
    const c = candidate('c');
    const stoppedAt = Date.now();
    await b.elector.stop(); // releases the lease
    await eventually(() => assert.ok(a.elector.isLeader || c.elector.isLeader, 'a or c leads'), 5000);
    assert.ok(Date.now() - stoppedAt < 5000, 'a released lease is taken before it would have expired (10 s)');
    assert.equal(maxLeaders, 1);
  });

  it('judges expiry on its own clock: a holder whose clock runs an hour behind keeps its live lease', async () => {
    await fake.stop();
    fake = await startFake();
    leaders.clear();
    maxLeaders = 0;
    const d = candidate('d', -3600_000); // writes renewTimes an hour in the past
    await eventually(() => assert.ok(d.elector.isLeader, 'd leads'));
    const e = candidate('e');
    await new Promise((r) => setTimeout(r, 1500));
    assert.ok(d.elector.isLeader && !e.elector.isLeader, 'the renewed lease stays with its holder');
    assert.equal(maxLeaders, 1);
    d.link.up = false;
    await eventually(() => assert.ok(e.elector.isLeader, 'e leads'), 5000);
    assert.equal(maxLeaders, 1);
  });

  it('stops leading by the renew deadline when its requests hang, and a slow controller start delays no renewal', async () => {
    await fake.stop();
    fake = await startFake();
    leaders.clear();
    maxLeaders = 0;
    let startDone = false;
    const f = candidate('f', 0, 1000, async () => {
      await new Promise((r) => setTimeout(r, 6000)); // a first list that outlasts all of this test
      startDone = true;
    });
    await eventually(() => assert.ok(f.elector.isLeader, 'f leads'));
    const g = candidate('g');
    await new Promise((r) => setTimeout(r, 2000));
    assert.ok(f.elector.isLeader && !g.elector.isLeader && !startDone, 'f kept its lease while its controller was starting');

    f.link.hanging = true;
    await eventually(() => assert.ok(g.elector.isLeader, 'g leads'), 5000);
    assert.equal(f.elector.isLeader, false, 'f stepped down although no request of it failed');
    assert.equal(maxLeaders, 1, 'never two leaders at once: f stopped its controller without waiting for its start');
    f.link.hanging = false;
  });
});
