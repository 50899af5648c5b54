// The operator against the loopback fake API server and a real PostgreSQL database: what a user
// does with kubectl (create, pause, resume, reset, delete) and what goes wrong in a cluster
// (a watch that dies, compacted history, the API server going away, conflicting writers).
import assert from 'node:assert/strict';
import { CoreV1Api, CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { recordConnectionState, recordSpecStamp } from '@switchboard/core';
import { Controller } from '../src/controller.ts';
import { EventRecorder } from '../src/event-recorder.ts';
import { InstanceReconciler } from '../src/instance-reconciler.ts';
import { InstanceStore } from '../src/instance-store.ts';
import { GROUP, INSTANCES, INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, PROJECTS, SESSION_FINALIZER, VERSION, sessionPodName, tokenSecretName } from '../src/resources.ts';
import { KubernetesInstanceResources } from '../../gateway/src/kubernetes/instance-resources.ts';
import { ownerLockFor } from '../../session/src/owner-lock.ts';
import { issueInstanceToken } from '../../gateway/src/routes/instances.ts';
import type { FakeApiServer } from './fake-apiserver.ts';
import { NAMESPACE, chartRoleRules, eventually, kubeConfigFor, openTestDb, silentLogger, startFake, type TestDb } from './helpers.ts';

const SESSION = { image: 'switchboard:test', envSecretName: 'switchboard-env' };
/** Polls, retries and restarts at test speed. */
// The records these tests write stand for sessions that run (no session process holds them):
// their states are not taken for lost sessions here, only in the test made for that.
const QUICK = { statePollMs: 100, podPollMs: 100, nameTakenPollMs: 200, backoffBaseMs: 20, backoffMaxMs: 500, informerRestartMinMs: 50, sessionLostAfterMs: 3_600_000 };
/** Tests of other things replace pods one by one, whatever else is down (see the rollout test). */
const NO_ROLLOUT_LIMIT = { rolloutMaxUnavailable: { count: 1000 } };

describe('operator: Instance and Project reconciliation', function () {
  this.timeout(20_000);
  let fake: FakeApiServer;
  let t: TestDb;
  let store: InstanceStore;
  let controller: Controller;
  let kubectl: CustomObjectsApi;
  /** Set while the reset erases the pairing: proves the session pod was gone at that moment. */
  let podsDuringReset: number[];
  /** Called once by the next reset (then cleared), after the pairing is erased. */
  let afterNextReset: ((id: string) => void) | undefined;
  /** Session pods present each time the records of a deleted instance were deleted. */
  let podsDuringDelete: number[] = [];
  /** Session pods present when a deleted instance's record was marked (its session then unlinks). */
  let podsAtUnlinkMark: number[] = [];
  /** While true, deleting an instance's records fails (a database outage during the finalizer). */
  let failRecordDeletes = false;

  before(async () => {
    // The operator's requests are held to the chart's Role; the test's own (kubectl) are not.
    fake = await startFake({ roles: { operator: chartRoleRules('operator') } });
    t = await openTestDb();
    podsDuringReset = [];
    store = new (class extends InstanceStore {
      override async resetSession(id: string): Promise<boolean> {
        podsDuringReset.push(fake.list('', 'v1', 'pods', NAMESPACE).filter((p) => p.metadata.name === sessionPodName(id)).length);
        if (!(await super.resetSession(id))) return false;
        const hook = afterNextReset;
        afterNextReset = undefined;
        hook?.(id);
        return true;
      }

      override async markUnlinkRequested(id: string, reason: 'delete' | 'reset'): Promise<void> {
        podsAtUnlinkMark.push(fake.list('', 'v1', 'pods', NAMESPACE).filter((p) => p.metadata.name === sessionPodName(id)).length);
        return super.markUnlinkRequested(id, reason);
      }

      override async delete(id: string, onlyIfDeleting?: boolean): Promise<boolean> {
        podsDuringDelete.push(fake.list('', 'v1', 'pods', NAMESPACE).filter((p) => p.metadata.name === sessionPodName(id)).length);
        if (failRecordDeletes) throw new Error('database unavailable');
        return super.delete(id, onlyIfDeleting);
      }
    })(t.db, t.crypto);
    kubectl = kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi);
    controller = new Controller({
      kubeConfig: kubeConfigFor(fake.url, 'operator'), namespace: NAMESPACE, store, session: SESSION, logger: silentLogger,
      ...QUICK, ...NO_ROLLOUT_LIMIT, resyncMs: 1000, stuckPodAfterMs: 300,
    });
    await controller.start();
  });

  afterEach(() => assert.deepEqual(fake.refused.filter((r) => r.endsWith(' 403')), [], 'the chart\'s Role grants every call the operator made'));
  after(async () => {
    await controller.stop();
    await fake.stop();
    await t.close();
  });

  const instance = (name: string) => fake.get(GROUP, VERSION, INSTANCES, NAMESPACE, name);
  const pod = (id: string) => fake.get('', 'v1', 'pods', NAMESPACE, sessionPodName(id));
  const row = (id: string) => t.db('instances').where({ id }).first();
  const connectionUpdates = async (id: string) =>
    (await t.db('events').where({ instance_id: id, type: 'connection.update' }).orderBy('created_at').orderBy('id')).map((e) => JSON.parse(e.body).data);
  const createInstance = (name: string, spec: Record<string, unknown>) =>
    kubectl.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'Instance', metadata: { name }, spec } });
  const patchSpec = (name: string, spec: Record<string, unknown>) =>
    kubectl.patchNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, name, body: { spec } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
  const condition = (name: string, type: string) => instance(name)?.status?.conditions?.find((c: { type: string }) => c.type === type);

  it('adopts an Instance created with kubectl: record, token Secret, session pod, status', async () => {
    await createInstance('inst-kubectl', { displayName: 'Sales line' });
    const created = await eventually(() => {
      const i = instance('inst-kubectl');
      assert.equal(i?.status?.state, 'starting');
      return i;
    });
    assert.deepEqual(created.metadata.finalizers, [SESSION_FINALIZER]);
    assert.equal(created.spec.paused, false, 'the CRD default applies');
    assert.equal(created.status.observedGeneration, created.metadata.generation);
    // Ready once its session pod is (the fake's kubelet makes it Ready at once).
    await eventually(() => assert.equal(condition('inst-kubectl', 'Ready')?.reason, 'SessionRunning'));
    assert.equal(condition('inst-kubectl', 'Ready')?.status, 'True');
    assert.equal(condition('inst-kubectl', 'Connected')?.reason, 'Starting');

    const record = await row('inst-kubectl');
    assert.equal(record.name, 'Sales line');
    assert.equal(record.paused, false);
    const secret = fake.get('', 'v1', 'secrets', NAMESPACE, tokenSecretName('inst-kubectl'))!;
    const token = Buffer.from(secret.data.apiToken, 'base64').toString();
    assert.equal(t.crypto.hashToken(token), record.token_hash, 'the Secret holds the instance token');
    assert.equal(secret.metadata.ownerReferences[0].uid, created.metadata.uid);

    const p = pod('inst-kubectl')!;
    assert.equal(p.metadata.ownerReferences[0].uid, created.metadata.uid);
    assert.equal(p.spec.containers[0].env.find((e: { name: string }) => e.name === 'INSTANCE_ID').value, 'inst-kubectl');
    assert.equal(p.spec.containers[0].image, SESSION.image);
    const events = fake.list('', 'v1', 'events', NAMESPACE).filter((e) => e.involvedObject.name === 'inst-kubectl').map((e) => e.reason);
    assert.ok(events.includes('Adopted') && events.includes('SessionStarted'), `events: ${events}`);
  });

  it('mirrors the session state and phone from the database into the status', async () => {
    await t.db('instances').where({ id: 'inst-kubectl' }).update({ state: 'awaiting_scan' });
    await eventually(() => {
      assert.equal(instance('inst-kubectl')?.status?.state, 'awaiting_scan');
      assert.equal(condition('inst-kubectl', 'Connected')?.status, 'False');
      assert.equal(condition('inst-kubectl', 'Connected')?.reason, 'AwaitingScan');
    });
    await t.db('instances').where({ id: 'inst-kubectl' }).update({ state: 'connected', phone: '5511999990000' });
    await eventually(() => {
      assert.equal(instance('inst-kubectl')?.status?.state, 'connected');
      assert.equal(instance('inst-kubectl')?.status?.phone, '5511999990000');
      assert.equal(condition('inst-kubectl', 'Connected')?.status, 'True');
    });
  });

  it('writes no status while nothing changed, although the API server stores it with its keys sorted', async () => {
    const statusWrites = () => fake.requests.filter((r) => r.startsWith('PUT ') && r.endsWith('/status')).length;
    await eventually(() => assert.equal(instance('inst-kubectl')?.status?.phone, '5511999990000'));
    const before = statusWrites();
    await new Promise((r) => setTimeout(r, 2500)); // two resyncs, and the state polls between them
    assert.equal(statusWrites(), before);
  });

  it('pauses (pod stopped, record paused) and resumes (a new pod)', async () => {
    const before = pod('inst-kubectl')!;
    await patchSpec('inst-kubectl', { paused: true });
    await eventually(async () => {
      assert.equal(pod('inst-kubectl'), undefined);
      assert.equal(instance('inst-kubectl')?.status?.state, 'stopped');
      assert.equal(condition('inst-kubectl', 'Ready')?.reason, 'Paused');
      assert.equal((await row('inst-kubectl')).paused, true);
    });
    assert.equal(instance('inst-kubectl')!.status.observedGeneration, instance('inst-kubectl')!.metadata.generation);

    await patchSpec('inst-kubectl', { paused: false });
    await eventually(async () => {
      assert.notEqual(pod('inst-kubectl')?.metadata.uid ?? before.metadata.uid, before.metadata.uid);
      assert.equal((await row('inst-kubectl')).paused, false);
      assert.equal(condition('inst-kubectl', 'Ready')?.reason, 'SessionRunning');
    });
    // Paused and resumed on the resource, not through the API: clients hear of both.
    const updates = (await connectionUpdates('inst-kubectl')).slice(-2);
    assert.deepEqual(updates.map((d) => [d.state, d.reason]), [['stopped', 'paused'], ['starting', null]]);
  });

  const instancePath = (name: string) => `/apis/${GROUP}/${VERSION}/namespaces/${NAMESPACE}/instances/${name}`;

  it('never writes a spec it read over a newer one the API wrote meanwhile (a disconnect is not undone)', async () => {
    const id = 'inst-overtaken';
    await createInstance(id, { displayName: 'Overtaken line' });
    await eventually(async () => assert.ok(pod(id) && (await row(id)).spec_generation, 'a pod and a stamped record'));
    const gateway = new KubernetesInstanceResources(kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi), NAMESPACE);
    let eventsBefore = 0;
    let ran = false;
    // What POST /api/instances/{id}/disconnect does in cluster mode (routes/instances.ts and
    // RemoteSessionRuntime.stop), done while the reconcile of the rename below reads the resource.
    fake.afterNextRead(instancePath(id), async () => {
      eventsBefore = (await connectionUpdates(id)).length;
      await recordSpecStamp(t.db, id, (await gateway.update(id, { paused: true }))!);
      await t.db('instances').where({ id }).update({ paused: true });
      await recordConnectionState(t.db, id, 'stopped', { reason: 'paused' });
      ran = true;
    });
    await patchSpec(id, { displayName: 'Renamed on the resource' }); // read: renamed, paused false
    await eventually(async () => {
      assert.ok(ran, 'the disconnect ran while the reconcile read the resource');
      assert.equal(pod(id), undefined);
      assert.equal(condition(id, 'Ready')?.reason, 'Paused');
    });
    const record = await row(id);
    assert.deepEqual([record.paused, record.name, Number(record.spec_generation)], [true, 'Renamed on the resource', instance(id)!.metadata.generation]);
    const updates = (await connectionUpdates(id)).slice(eventsBefore);
    assert.deepEqual(updates.map((d) => [d.state, d.reason]), [['stopped', 'paused']], 'no brief start from the older spec');
  });

  it('starts no pod from a read the API overtook before writing the record (stamped, values not yet written)', async () => {
    const id = 'inst-stamped-first';
    await createInstance(id, { displayName: 'Paused line', paused: true });
    await eventually(() => assert.equal(instance(id)?.status?.state, 'stopped'));
    const gateway = new KubernetesInstanceResources(kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi), NAMESPACE);
    const podCreations = () => fake.requests.filter((r) => r === `POST /api/v1/namespaces/${NAMESPACE}/pods`).length;
    // A connect, whole; then the reconcile it causes reads the resource while a disconnect has
    // changed it and stamped the record, but not yet written `paused` to it.
    let ran = false;
    const disconnectStamped = async () => {
      await recordSpecStamp(t.db, id, (await gateway.update(id, { paused: true }))!);
      ran = true;
    };
    fake.afterNextRead(instancePath(id), disconnectStamped, (read) => read.spec.paused === false);
    const creationsBefore = podCreations();
    await recordSpecStamp(t.db, id, (await gateway.update(id, { paused: false }))!);
    await t.db('instances').where({ id }).update({ paused: false });
    await eventually(() => assert.ok(ran, 'the disconnect ran while the reconcile read the resource'));
    await t.db('instances').where({ id }).update({ paused: true }); // the disconnect's own write, now
    await eventually(async () => {
      assert.equal((await row(id)).paused, true);
      assert.equal(instance(id)?.status?.observedGeneration, instance(id)?.metadata.generation);
      assert.equal(condition(id, 'Ready')?.reason, 'Paused');
    });
    assert.equal(podCreations() - creationsBefore, 0, 'no session pod was started from the older spec');
  });

  it('follows the resource again when it went back behind the record (restored from a backup)', async () => {
    const id = 'inst-restored';
    await createInstance(id, { displayName: 'Before the backup' });
    await eventually(async () => assert.ok((await row(id)).spec_generation, 'a stamped record'));
    const uid = instance(id)!.metadata.uid;
    await t.db('instances').where({ id }).update({ spec_uid: uid, spec_generation: 999 }); // written before the restore
    await patchSpec(id, { displayName: 'After the restore' });
    await eventually(async () => {
      const record = await row(id);
      assert.deepEqual([record.name, Number(record.spec_generation)], ['After the restore', instance(id)!.metadata.generation]);
    });
    const reasons = fake.list('', 'v1', 'events', NAMESPACE).filter((e) => e.involvedObject.name === id).map((e) => e.reason);
    assert.ok(reasons.includes('SpecGenerationWentBack'), `events: ${reasons}`);
  });

  it('resets: stops the pod, erases the pairing while no pod runs, starts a new pod, records lastResetAt', async () => {
    await t.db('auth_state').insert({ instance_id: 'inst-kubectl', category: 'creds', key_id: 'me', value_sealed: t.crypto.seal('{}') });
    await t.db('instances').where({ id: 'inst-kubectl' }).update({ state: 'connected', phone: '5511999990000' });
    const before = await eventually(() => pod('inst-kubectl')!);
    const requestedAt = '2030-01-01T00:00:00Z';
    podsAtUnlinkMark = [];
    await patchSpec('inst-kubectl', { resetRequestedAt: requestedAt });
    await eventually(async () => {
      assert.equal(instance('inst-kubectl')?.status?.lastResetAt, requestedAt);
      const now = pod('inst-kubectl');
      assert.ok(now && now.metadata.uid !== before.metadata.uid && !now.metadata.deletionTimestamp, 'a new session pod');
    });
    assert.deepEqual(podsDuringReset, [0], 'the pairing was erased exactly once, with no session pod');
    assert.equal(podsAtUnlinkMark[0], 1, 'the stopping session was told to log out first, before its pod was deleted');
    assert.equal((await t.db('auth_state').where({ instance_id: 'inst-kubectl' })).length, 0);
    const record = await row('inst-kubectl');
    assert.equal(record.unlink_requested_at, null, 'the reset cleared the mark: the new session keeps its pairing when it stops');
    assert.equal(record.deletion_requested_at, null, 'a reset is no delete, for a session of the previous version either');
    assert.equal(record.phone, null);
    assert.equal(record.state, 'starting');
    const [last] = (await connectionUpdates('inst-kubectl')).slice(-1);
    assert.deepEqual(last, { state: 'starting', previousState: 'connected', phone: '5511999990000', reason: 'reset' });
  });

  it('records a finished reset before it starts the new pod, so a conflict never restarts the fresh session', async () => {
    await createInstance('inst-reset-409', { displayName: 'Reset conflict' });
    await eventually(() => assert.ok(pod('inst-reset-409') && condition('inst-reset-409', 'Ready')?.reason === 'SessionRunning', 'session running again'));
    podsDuringReset = [];
    // The status write that follows the erase meets a concurrent writer (409).
    afterNextReset = (id) => fake.injectFailure(1, (method, path) => method === 'PUT' && path.endsWith(`/instances/${id}/status`));
    await patchSpec('inst-reset-409', { resetRequestedAt: '2030-01-01T00:00:00Z' });
    await eventually(() => {
      assert.equal(instance('inst-reset-409')?.status?.lastResetAt, '2030-01-01T00:00:00Z');
      assert.ok(pod('inst-reset-409') && !pod('inst-reset-409')!.metadata.deletionTimestamp, 'a session pod that is not terminating');
    });
    const settled = pod('inst-reset-409')!.metadata.uid;
    await new Promise((r) => setTimeout(r, 400));
    await controller.idle();
    assert.equal(pod('inst-reset-409')?.metadata.uid, settled, 'the new session pod was not stopped again');
    const starts = fake.list('', 'v1', 'events', NAMESPACE).filter((e) => e.involvedObject.name === 'inst-reset-409' && e.reason === 'SessionStarted');
    assert.equal(starts.length, 2, 'one pod before the reset, one after');
    assert.ok(podsDuringReset.length >= 1 && podsDuringReset.every((n) => n === 0), `pods during reset: ${podsDuringReset}`);
  });

  it('replaces an outdated or failed session pod, creating the new one only after the old one is gone, and waits for one not Ready yet', async () => {
    await createInstance('inst-upgrade', { displayName: 'Upgrade' });
    const first = await eventually(() => {
      const p = pod('inst-upgrade');
      assert.ok(p, 'the session pod exists');
      return p;
    });
    // A pod made from an older template (an upgrade changed the image or settings).
    fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName('inst-upgrade'), (p) => (p.metadata.annotations['switchboard.dev/template-hash'] = 'older-template'));
    const second = await eventually(() => {
      const p = pod('inst-upgrade');
      assert.ok(p && p.metadata.uid !== first.metadata.uid && !p.metadata.deletionTimestamp, 'the pod of the current template');
      assert.equal(p.metadata.annotations['switchboard.dev/template-hash'], first.metadata.annotations['switchboard.dev/template-hash']);
      return p;
    });
    // A pod that cannot start (its image does not pull) is not Ready, and the resource says why.
    fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName('inst-upgrade'), (p) => {
      p.status = { phase: 'Pending', conditions: [{ type: 'Ready', status: 'False' }], containerStatuses: [{ name: 'session', ready: false, state: { waiting: { reason: 'ImagePullBackOff', message: 'Back-off pulling image' } } }] };
    });
    await eventually(() => {
      const ready = condition('inst-upgrade', 'Ready');
      assert.deepEqual([ready?.status, ready?.reason], ['False', 'SessionNotReady']);
      assert.match(ready.message, /ImagePullBackOff: Back-off pulling image/);
    });
    // One no node takes, and one whose container runs but fails its readiness probe after a crash.
    fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName('inst-upgrade'), (p) => {
      p.status = { phase: 'Pending', conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: '0/3 nodes are available' }] };
    });
    await eventually(() => assert.match(condition('inst-upgrade', 'Ready')?.message, /not scheduled: Unschedulable: 0\/3 nodes are available/));
    fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName('inst-upgrade'), (p) => {
      p.status = { phase: 'Running', conditions: [{ type: 'Ready', status: 'False' }], containerStatuses: [{ name: 'session', ready: false, state: { running: {} }, lastState: { terminated: { reason: 'Error', exitCode: 1 } } }] };
    });
    await eventually(() => assert.match(condition('inst-upgrade', 'Ready')?.message, /readiness probe .* not passing \(restarted after Error, code 1\)/));
    fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName('inst-upgrade'), (p) => (p.status = { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] }));
    await eventually(() => assert.equal(condition('inst-upgrade', 'Ready')?.reason, 'SessionRunning'));
    assert.equal(pod('inst-upgrade')?.metadata.uid, second.metadata.uid, 'a pod still starting is waited for, not replaced');
    fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName('inst-upgrade'), (p) => (p.status = { phase: 'Failed' }));
    await eventually(() => {
      const p = pod('inst-upgrade');
      assert.ok(p && p.metadata.uid !== second.metadata.uid && p.status.phase === 'Running', 'a pod replacing the failed one');
      assert.equal(condition('inst-upgrade', 'Ready')?.reason, 'SessionRunning');
    });
    const starts = fake.list('', 'v1', 'events', NAMESPACE).filter((e) => e.involvedObject.name === 'inst-upgrade' && e.reason === 'SessionStarted');
    assert.equal(starts.length, 3);
    assert.deepEqual(fake.refused.filter((r) => r.startsWith(`POST /api/v1/namespaces/${NAMESPACE}/pods `)), [], 'no pod create was tried while the old pod still existed');
  });

  it('removes a session pod stuck terminating on a node that no longer answers, and starts a new one', async () => {
    await createInstance('inst-lost-node', { displayName: 'Lost node' });
    const first = await eventually(() => {
      const p = pod('inst-lost-node');
      assert.ok(p, 'the session pod exists');
      return p;
    });
    assert.deepEqual(first.spec.tolerations.map((t: { key: string; tolerationSeconds: number }) => [t.key, t.tolerationSeconds]), [['node.kubernetes.io/unreachable', 30], ['node.kubernetes.io/not-ready', 30]], 'evicted 30 s after its node goes silent');
    // Evicted from a lost node (grace period 1 s): no kubelet will ever confirm. Its deletion time
    // is an hour in the future, as an API server whose clock is skewed would show it: the
    // operator judges by how long it has itself seen the pod terminating (1 s + 300 ms here).
    const evicted = new Date(Date.now() + 3_600_000).toISOString().replace(/\.\d+Z$/, 'Z');
    fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName('inst-lost-node'), (p) => Object.assign(p.metadata, { deletionTimestamp: evicted, deletionGracePeriodSeconds: 1 }));
    await eventually(() => {
      const p = pod('inst-lost-node');
      assert.ok(p && p.metadata.uid !== first.metadata.uid && !p.metadata.deletionTimestamp, 'a new session pod');
    });
    const reasons = fake.list('', 'v1', 'events', NAMESPACE).filter((e) => e.involvedObject.name === 'inst-lost-node').map((e) => e.reason);
    assert.deepEqual(reasons.filter((r) => r === 'SessionPodForceDeleted'), ['SessionPodForceDeleted']);
  });

  it('waits for a terminating pod whose grace period has not long ended', async () => {
    await createInstance('inst-slow-stop', { displayName: 'Slow stop' });
    const first = await eventually(() => {
      const p = pod('inst-slow-stop');
      assert.ok(p, 'the session pod exists');
      return p;
    });
    // Its deletion time passed long ago by the API server's clock (skewed), but the operator has
    // seen it terminating for less than its 30 s grace period.
    const graceEnds = new Date(Date.now() - 3_600_000).toISOString().replace(/\.\d+Z$/, 'Z');
    fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName('inst-slow-stop'), (p) => Object.assign(p.metadata, { deletionTimestamp: graceEnds, deletionGracePeriodSeconds: 30 }));
    await new Promise((r) => setTimeout(r, 800)); // several reconcile polls (100 ms), past stuckPodAfterMs
    assert.equal(pod('inst-slow-stop')?.metadata.uid, first.metadata.uid, 'still the terminating pod');
  });

  it('keeps a deleted Instance (finalizer) until its session is stopped and its records are deleted', async () => {
    await createInstance('inst-final', { displayName: 'Final' });
    await eventually(() => assert.ok(pod('inst-final'), 'inst-final has a session pod'));
    podsDuringDelete = [];
    podsAtUnlinkMark = [];
    failRecordDeletes = true;
    await kubectl.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, name: 'inst-final' });
    await eventually(() => assert.ok(podsDuringDelete.length >= 2, 'the record delete was retried'));
    assert.ok(instance('inst-final')?.metadata.deletionTimestamp, 'the resource stays while its records cannot be deleted');
    assert.ok((await row('inst-final'))?.unlink_requested_at, 'the session is told it stops for a delete (it unlinks the device)');
    assert.ok((await row('inst-final'))?.deletion_requested_at, 'as a session of the previous version reads it');
    assert.equal(podsAtUnlinkMark[0], 1, 'told before its pod was deleted');
    assert.equal(pod('inst-final'), undefined);
    failRecordDeletes = false;
    await eventually(async () => {
      assert.equal(instance('inst-final'), undefined);
      assert.equal(await row('inst-final'), undefined);
    });
    assert.ok(podsDuringDelete.every((n) => n === 0), `the records went only once no session pod existed: ${podsDuringDelete}`);
  });

  it('deletes with the finalizer: pod stopped, records deleted, then the resource and its Secret go', async () => {
    await kubectl.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, name: 'inst-kubectl' });
    await eventually(async () => {
      assert.equal(instance('inst-kubectl'), undefined);
      assert.equal(pod('inst-kubectl'), undefined);
      assert.equal(await row('inst-kubectl'), undefined);
      assert.equal(fake.get('', 'v1', 'secrets', NAMESPACE, tokenSecretName('inst-kubectl')), undefined);
    });
  });

  it('finishes a foreground delete (Argo CD\'s prune): the collector stops the pod, the records go, then the resource', async () => {
    await createInstance('inst-fg', { displayName: 'Foreground' });
    await eventually(() => assert.equal(condition('inst-fg', 'Ready')?.reason, 'SessionRunning'));
    podsDuringDelete = [];
    podsAtUnlinkMark = [];
    fake.setGarbageCollectionDelay(600_000); // the real collector takes a moment; here it acts once the operator has marked the record
    try {
      await kubectl.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, name: 'inst-fg', propagationPolicy: 'Foreground' });
      assert.ok(instance('inst-fg')?.metadata.finalizers.includes('foregroundDeletion'));
      await eventually(() => assert.ok(podsAtUnlinkMark.length > 0));
      fake.setGarbageCollectionDelay(50);
      fake.collectGarbageNow();
      await eventually(async () => {
        assert.equal(instance('inst-fg'), undefined);
        assert.equal(await row('inst-fg'), undefined);
      });
    } finally {
      fake.setGarbageCollectionDelay(50);
    }
    assert.equal(podsAtUnlinkMark[0], 1, 'the session was told it stops for a delete (it unlinks the phone)');
    assert.equal(pod('inst-fg'), undefined);
    assert.equal(fake.get('', 'v1', 'secrets', NAMESPACE, tokenSecretName('inst-fg')), undefined);
    assert.ok(podsDuringDelete.length > 0 && podsDuringDelete.every((n) => n === 0), `the records went only once no session pod existed: ${podsDuringDelete}`);
  });

  it('stops the session pod an orphaning delete left without owner before it deletes the records', async () => {
    // `kubectl delete --cascade=orphan`: the garbage collector strips the pod's owner reference;
    // the pod still carries the operator's labels for this instance, so it is still its session.
    await createInstance('inst-orphan', { displayName: 'Orphan' });
    await eventually(() => assert.ok(pod('inst-orphan'), 'inst-orphan has a session pod'));
    podsDuringDelete = [];
    podsAtUnlinkMark = [];
    fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName('inst-orphan'), (p) => delete p.metadata.ownerReferences);
    await kubectl.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, name: 'inst-orphan' });
    await eventually(async () => {
      assert.equal(instance('inst-orphan'), undefined);
      assert.equal(await row('inst-orphan'), undefined);
    });
    assert.equal(pod('inst-orphan'), undefined, 'the session pod is stopped, not left running');
    assert.equal(podsAtUnlinkMark[0], 1, 'the session was told it stops for a delete');
    assert.ok(podsDuringDelete.every((n) => n === 0), `the records went only once no session pod existed: ${podsDuringDelete}`);
  });

  it('takes over the token Secret an orphaning delete left behind for an Instance of the same name', async () => {
    const core = kubeConfigFor(fake.url).makeApiClient(CoreV1Api);
    const stale = Buffer.from('sbi_revoked-token-of-the-deleted-instance').toString('base64');
    await core.createNamespacedSecret({
      namespace: NAMESPACE,
      body: { metadata: { name: tokenSecretName('inst-reborn'), labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [INSTANCE_LABEL]: 'inst-reborn' } }, data: { apiToken: stale, instanceId: Buffer.from('inst-reborn').toString('base64') } },
    });
    await createInstance('inst-reborn', { displayName: 'Reborn' });
    const secret = () => fake.get('', 'v1', 'secrets', NAMESPACE, tokenSecretName('inst-reborn'));
    await eventually(() => assert.equal(secret()?.metadata.ownerReferences?.[0]?.uid, instance('inst-reborn')?.metadata.uid, 'owned by the new Instance'));
    assert.notEqual(secret()!.data.apiToken, stale, 'the new token, not the revoked one');
    await eventually(() => assert.equal(condition('inst-reborn', 'Ready')?.reason, 'SessionRunning'));
  });

  /** Deletes the Instance, lets its finalizer stop the session (its records cannot be deleted
   *  meanwhile), then removes the finalizer by hand; once the resource is gone and the finalizer's
   *  retries have ended, runs `meanwhile`, then lets records be deleted again. Resolves with the
   *  record's token hash as it was. */
  async function deleteWithFinalizerRemovedByHand(name: string, meanwhile?: () => Promise<void>): Promise<string> {
    await createInstance(name, { displayName: 'Forced' });
    await eventually(() => assert.equal(condition(name, 'Ready')?.reason, 'SessionRunning'));
    failRecordDeletes = true;
    try {
      await kubectl.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, name });
      await eventually(() => assert.equal(pod(name), undefined));
      await eventually(async () => assert.ok((await row(name))?.unlink_requested_at, 'its session was told to unlink'));
      await kubectl.patchNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, name, body: { metadata: { finalizers: null } } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
      await eventually(() => assert.equal(instance(name), undefined));
      await new Promise((r) => setTimeout(r, 1000)); // a finalizer retry already under way ends (failing)
      const record = await row(name);
      assert.ok(record, 'the records are still there');
      await meanwhile?.();
      return record.token_hash;
    } finally {
      failRecordDeletes = false;
    }
  }

  it('deletes the records of an instance whose finalizer was removed by hand during its delete, and does not bring it back', async () => {
    // The operator writes its Instances with PUT; a PATCH of one is the test's removal of the
    // finalizer, or the operator's apply for a record without a resource.
    const applies = () => fake.requests.filter((r) => r === `PATCH /apis/${GROUP}/${VERSION}/namespaces/${NAMESPACE}/${INSTANCES}/inst-forced`).length;
    await deleteWithFinalizerRemovedByHand('inst-forced');
    await eventually(async () => assert.equal(await row('inst-forced'), undefined));
    await eventually(() => assert.equal(fake.get('', 'v1', 'secrets', NAMESPACE, tokenSecretName('inst-forced')), undefined, 'its Secret is collected'));
    await new Promise((r) => setTimeout(r, 600)); // a few more database polls
    assert.equal(instance('inst-forced'), undefined, 'no resource comes back for it');
    assert.equal(applies(), 1, 'none was created again, not even for a moment (the one PATCH removed the finalizer)');
    assert.equal(pod('inst-forced'), undefined);
  });

  it('starts an Instance applied again after such a delete as a new one: the begun delete is finished first', async () => {
    // Applied again (a GitOps sync) while the records still cannot be deleted: its reconcile, not
    // the database poll (which skips a record whose resource it sees), finishes the earlier delete.
    const oldToken = await deleteWithFinalizerRemovedByHand('inst-again-applied', async () => {
      await createInstance('inst-again-applied', { displayName: 'Applied again' });
      await eventually(() => assert.ok(instance('inst-again-applied')?.metadata.finalizers?.length, 'reconciled (its finalizer added)'));
    });
    await eventually(() => assert.equal(condition('inst-again-applied', 'Ready')?.reason, 'SessionRunning'));
    const fresh = await t.db('instances').where({ id: 'inst-again-applied' }).first();
    assert.equal(fresh.deletion_requested_at, null, 'not marked for deletion');
    assert.equal(fresh.unlink_requested_at, null, 'its session will not unlink the phone when it stops');
    assert.notEqual(fresh.token_hash, oldToken, 'a new instance: a new token');
    assert.equal(fresh.name, 'Applied again');
  });

  it('takes over a session pod an orphaning delete left without owner, keeping the session', async () => {
    await createInstance('inst-adopt-pod', { displayName: 'Adopts its pod' });
    await eventually(() => assert.equal(condition('inst-adopt-pod', 'Ready')?.reason, 'SessionRunning'));
    const podUid = pod('inst-adopt-pod')!.metadata.uid;
    fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName('inst-adopt-pod'), (p) => delete p.metadata.ownerReferences);
    await eventually(() => assert.equal(pod('inst-adopt-pod')?.metadata.ownerReferences?.[0]?.uid, instance('inst-adopt-pod')!.metadata.uid));
    assert.equal(pod('inst-adopt-pod')!.metadata.uid, podUid, 'the same pod, not a new one');
  });

  it('takes over the session pod and token Secret an earlier resource of the same instance left to the garbage collector', async () => {
    const secret = () => fake.get('', 'v1', 'secrets', NAMESPACE, tokenSecretName('inst-again'));
    await createInstance('inst-again', { displayName: 'Again' });
    await eventually(() => assert.equal(condition('inst-again', 'Ready')?.reason, 'SessionRunning'));
    await eventually(() => assert.ok(secret()));
    const sessionPodUid = pod('inst-again')!.metadata.uid;
    fake.setGarbageCollectionDelay(600_000); // the collector acts when the test says
    try {
      // Gone before the operator saw its delete: its record stays, so the operator creates the
      // resource again (a new uid) while the collector has yet to remove the old one's pod and Secret.
      fake.forceDelete(GROUP, VERSION, INSTANCES, NAMESPACE, 'inst-again');
      await eventually(() => assert.ok(instance('inst-again'), 'created again for its record'));
      const uid = instance('inst-again')!.metadata.uid;
      await eventually(() => {
        assert.equal(pod('inst-again')?.metadata.ownerReferences?.[0]?.uid, uid);
        assert.equal(secret()?.metadata.ownerReferences?.[0]?.uid, uid);
      });
      fake.collectGarbageNow();
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(pod('inst-again')?.metadata.uid, sessionPodUid, 'the same session pod serves it, never stopped');
      assert.equal(pod('inst-again')?.metadata.deletionTimestamp, undefined);
      assert.equal(secret()?.metadata.ownerReferences?.[0]?.uid, uid);
      assert.equal(condition('inst-again', 'Ready')?.reason, 'SessionRunning');
    } finally {
      fake.setGarbageCollectionDelay(50);
    }
  });

  it('never replaces or deletes a pod or Secret of the same name it did not make, and takes the names once they are free', async () => {
    const core = kubeConfigFor(fake.url).makeApiClient(CoreV1Api);
    const theirs = { labels: { app: 'someone-else' } };
    await core.createNamespacedPod({ namespace: NAMESPACE, body: { metadata: { name: sessionPodName('inst-squat'), ...theirs }, spec: { containers: [{ name: 'web', image: 'nginx' }] } } });
    await core.createNamespacedSecret({ namespace: NAMESPACE, body: { metadata: { name: tokenSecretName('inst-squat'), ...theirs }, data: { password: Buffer.from('theirs').toString('base64') } } });
    const foreignPodUid = pod('inst-squat')!.metadata.uid;
    await createInstance('inst-squat', { displayName: 'Squatted names' });

    await eventually(() => assert.equal(condition('inst-squat', 'Ready')?.reason, 'PodNameTaken'));
    assert.equal(condition('inst-squat', 'Ready')?.status, 'False');
    assert.match(condition('inst-squat', 'Ready')?.message, /session-inst-squat exists but was not made by the operator/);
    assert.equal(instance('inst-squat')?.status?.tokenSecretName, undefined, 'the status names no Secret it could not write');
    await new Promise((r) => setTimeout(r, 600)); // a few more reconciles (nameTakenPollMs 200)
    assert.equal(pod('inst-squat')!.metadata.uid, foreignPodUid, 'their pod is not deleted');
    assert.equal(pod('inst-squat')!.spec.containers[0].image, 'nginx');
    const secret = fake.get('', 'v1', 'secrets', NAMESPACE, tokenSecretName('inst-squat'))!;
    assert.deepEqual(secret.data, { password: Buffer.from('theirs').toString('base64') }, 'their Secret is not overwritten with the token');
    const warnings = fake.list('', 'v1', 'events', NAMESPACE).filter((e) => e.involvedObject.name === 'inst-squat' && e.type === 'Warning').map((e) => e.reason);
    assert.deepEqual(warnings.sort(), ['PodNameTaken', 'SecretNameTaken'], 'one warning each, not one per reconcile');

    await core.deleteNamespacedPod({ name: sessionPodName('inst-squat'), namespace: NAMESPACE });
    await eventually(() => assert.equal(condition('inst-squat', 'Ready')?.reason, 'SessionRunning'));
    await core.deleteNamespacedSecret({ name: tokenSecretName('inst-squat'), namespace: NAMESPACE }); // no watch event comes of it
    await eventually(() => assert.ok(fake.get('', 'v1', 'secrets', NAMESPACE, tokenSecretName('inst-squat'))?.metadata.ownerReferences, 'its own Secret now'));
    const uid = instance('inst-squat')!.metadata.uid;
    assert.equal(pod('inst-squat')!.metadata.ownerReferences[0].uid, uid);
    assert.equal(fake.get('', 'v1', 'secrets', NAMESPACE, tokenSecretName('inst-squat'))!.metadata.ownerReferences[0].uid, uid);
    await eventually(() => assert.equal(instance('inst-squat')!.status.tokenSecretName, tokenSecretName('inst-squat')), 3000); // the status follows the Secret

    // Paused (its own pod gone), a foreign pod takes the name, and the Instance is deleted: the
    // records go, the foreign pod stays.
    await patchSpec('inst-squat', { paused: true });
    await eventually(() => assert.equal(pod('inst-squat'), undefined));
    await core.createNamespacedPod({ namespace: NAMESPACE, body: { metadata: { name: sessionPodName('inst-squat'), ...theirs }, spec: { containers: [{ name: 'web', image: 'nginx' }] } } });
    await eventually(() => assert.equal(condition('inst-squat', 'Ready')?.reason, 'Paused'));
    await kubectl.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, name: 'inst-squat' });
    await eventually(async () => {
      assert.equal(instance('inst-squat'), undefined);
      assert.equal(await row('inst-squat'), undefined);
    });
    assert.equal(pod('inst-squat')?.spec.containers[0].image, 'nginx', 'their pod outlives the Instance');
  });

  it('asks to look again while its token Secret name is taken, as no watch event announces its removal', async () => {
    const core = kubeConfigFor(fake.url).makeApiClient(CoreV1Api);
    const reconciler = new InstanceReconciler({ custom: kubectl, core, store, events: new EventRecorder(core, 'test'), session: SESSION, nameTakenPollMs: 4321 });
    await core.createNamespacedSecret({ namespace: NAMESPACE, body: { metadata: { name: tokenSecretName('inst-taken') }, data: { password: 'dGhlaXJz' } } });
    await createInstance('inst-taken', { displayName: 'Taken Secret name', paused: true });
    // The controller reconciles the same Instance meanwhile: a write of ours may meet a 409, and is retried.
    await eventually(async () => assert.equal(await reconciler.reconcile(NAMESPACE, 'inst-taken'), 4321));
    await core.deleteNamespacedSecret({ name: tokenSecretName('inst-taken'), namespace: NAMESPACE });
    await eventually(async () => assert.equal(await reconciler.reconcile(NAMESPACE, 'inst-taken'), undefined));
    assert.ok(fake.get('', 'v1', 'secrets', NAMESPACE, tokenSecretName('inst-taken'))?.metadata.ownerReferences, 'its own Secret now');
  });

  it('keeps the records of an instance whose session still runs somewhere (its pod gone), and erases nothing', async () => {
    await createInstance('inst-held', { displayName: 'Held' });
    await eventually(() => assert.ok(pod('inst-held'), 'inst-held has a session pod'));
    await eventually(async () => assert.ok(await row('inst-held'), 'inst-held has its record'));
    // A session on a node cut off from the API server: its pod was force-deleted, it still holds
    // the owner lock (here taken by the test, with the session's own lock).
    const session = ownerLockFor(t.db, 'inst-held', () => undefined);
    assert.equal(await session.tryAcquire(), true);
    try {
      assert.equal(await store.resetSession('inst-held'), false, 'no pairing erased under a running session');
      await kubectl.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, name: 'inst-held' });
      await eventually(() => assert.equal(pod('inst-held'), undefined));
      await new Promise((r) => setTimeout(r, 500)); // several finalizer rounds (100 ms)
      assert.ok(await row('inst-held'), 'the record stays while the session holds the instance');
      assert.ok(instance('inst-held'), 'the resource keeps its finalizer');
    } finally {
      await session.release();
    }
    await eventually(async () => {
      assert.equal(await row('inst-held'), undefined);
      assert.equal(instance('inst-held'), undefined);
    });
  });

  it('gives an instance created through the API a resource without a second record, and keeps its token', async () => {
    const token = 'sbk_existing-token';
    await t.db('instances').insert({ id: 'inst-api', name: 'API made', paused: false, state: 'starting', token_hash: t.crypto.hashToken(token), token_sealed: t.crypto.seal(token) });
    const gateway = new KubernetesInstanceResources(kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi), NAMESPACE);
    await gateway.apply({ id: 'inst-api', name: 'API made', projectId: null, paused: false });
    await eventually(() => assert.ok(pod('inst-api'), 'inst-api has a session pod'));
    const secret = await eventually(() => fake.get('', 'v1', 'secrets', NAMESPACE, tokenSecretName('inst-api'))!);
    assert.equal(Buffer.from(secret.data.apiToken, 'base64').toString(), token);
    assert.equal((await t.db('instances').where({ id: 'inst-api' })).length, 1);

    // Deleted through the API: the record goes first, the resource must not resurrect it.
    await t.db('instances').where({ id: 'inst-api' }).delete();
    await gateway.delete('inst-api');
    await eventually(async () => {
      assert.equal(instance('inst-api'), undefined);
      assert.equal(await row('inst-api'), undefined);
    });
  });

  it('creates the missing resource of a record (a create made while the API was unavailable)', async () => {
    await t.db('instances').insert({ id: 'inst-orphan', name: 'Orphan', paused: true, state: 'stopped', token_hash: t.crypto.hashToken('x1'), token_sealed: t.crypto.seal('x1') });
    await eventually(() => {
      const i = instance('inst-orphan');
      assert.equal(i?.spec.displayName, 'Orphan');
      assert.equal(i?.spec.paused, true);
      assert.equal(i?.status?.state, 'stopped');
    });
    assert.equal(pod('inst-orphan'), undefined, 'paused: no pod');
  });

  it('creates and mirrors the other records while the API refuses one resource', async () => {
    fake.injectFailure(1_000_000, (method, path) => method === 'PATCH' && path.endsWith('/instances/inst-refused'), 403);
    const record = (id: string) => ({ id, name: id, paused: true, state: 'stopped', token_hash: t.crypto.hashToken(id), token_sealed: t.crypto.seal(id) });
    await t.db('instances').insert([record('inst-refused'), record('inst-after-refused')]);
    try {
      await eventually(() => assert.equal(instance('inst-after-refused')?.status?.state, 'stopped'));
      assert.equal(instance('inst-refused'), undefined);
    } finally {
      fake.clearInjectedFailures();
      await t.db('instances').where({ id: 'inst-refused' }).delete();
    }
  });

  it('adopts a Project created with kubectl and deletes its record with the resource', async () => {
    await kubectl.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: PROJECTS, body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'Project', metadata: { name: 'acme' }, spec: { displayName: 'ACME' } } });
    await eventually(async () => assert.equal((await t.db('projects').where({ id: 'acme' }).first())?.name, 'ACME'));
    const adopted = await t.db('projects').where({ id: 'acme' }).first();
    await new Promise((r) => setTimeout(r, 1500)); // reconciled again meanwhile (resyncMs: 1000)
    assert.deepEqual(await t.db('projects').where({ id: 'acme' }).first(), adopted, 'a reconcile without a change writes nothing (updatedAt stays)');
    const rename = { spec: { displayName: 'ACME Corp' } };
    await kubectl.patchNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: PROJECTS, name: 'acme', body: rename }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    await eventually(async () => assert.equal((await t.db('projects').where({ id: 'acme' }).first())?.name, 'ACME Corp'));
    await createInstance('inst-acme', { displayName: 'ACME line', projectRef: 'acme', paused: true });
    await eventually(async () => assert.equal((await row('inst-acme'))?.project_id, 'acme'));
    await kubectl.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: PROJECTS, name: 'acme' });
    await eventually(async () => {
      assert.equal(fake.get(GROUP, VERSION, PROJECTS, NAMESPACE, 'acme'), undefined);
      assert.equal(await t.db('projects').where({ id: 'acme' }).first(), undefined);
      assert.equal((await row('inst-acme')).project_id, null);
    });
  });

  it('keeps working after its watches die, after 410 Gone, and after the API server restarts', async () => {
    fake.breakWatches();
    await createInstance('inst-after-break', { displayName: 'After break' });
    await eventually(() => assert.ok(pod('inst-after-break'), 'inst-after-break has a session pod'));

    const lists = () => fake.requests.filter((r) => r === `GET /apis/${GROUP}/${VERSION}/namespaces/${NAMESPACE}/instances`).length;
    const listsBefore = lists();
    // While the operator cannot watch, history moves on and is compacted: resuming from its last
    // resourceVersion gets 410 Gone, and the informer must relist.
    fake.setUnavailable(true);
    fake.breakWatches();
    fake.mutate(GROUP, VERSION, INSTANCES, NAMESPACE, 'inst-after-break', (o) => (o.metadata.labels = { touched: 'yes' }));
    fake.compact();
    fake.setUnavailable(false);
    await createInstance('inst-after-gone', { displayName: 'After gone' });
    await eventually(() => assert.ok(pod('inst-after-gone'), 'inst-after-gone has a session pod'));
    assert.ok(lists() > listsBefore, 'the informer relisted after 410 Gone');

    await fake.stop();
    await new Promise((r) => setTimeout(r, 200));
    await fake.start();
    await createInstance('inst-after-restart', { displayName: 'After restart' });
    await eventually(() => assert.ok(pod('inst-after-restart'), 'inst-after-restart has a session pod'));
  });

  it('retries after conflicting updates until the status converges', async () => {
    fake.injectFailure(3, (method, path) => method === 'PUT' && path.endsWith('/instances/inst-conflict/status'));
    await createInstance('inst-conflict', { displayName: 'Conflicts' });
    await eventually(() => assert.equal(instance('inst-conflict')?.status?.state, 'starting'));
    // A concurrent writer changes the spec between the operator's read and write: it converges on the newest spec.
    fake.injectFailure(1, (method, path) => method === 'PUT' && path.endsWith('/instances/inst-conflict/status'));
    fake.mutate(GROUP, VERSION, INSTANCES, NAMESPACE, 'inst-conflict', (o) => (o.spec.paused = true));
    await eventually(() => {
      const i = instance('inst-conflict')!;
      assert.equal(i.status.state, 'stopped');
      assert.equal(i.status.observedGeneration, i.metadata.generation);
    });
    assert.equal(fake.pendingFailures, 0, 'every injected conflict was met');
  });
});

describe('operator: a new session template rolls out a few pods at a time', function () {
  this.timeout(30_000);
  let fake: FakeApiServer;
  let t: TestDb;
  let controller: Controller;

  before(async () => {
    fake = await startFake({ podTerminationMs: 50, roles: { operator: chartRoleRules('operator') } });
    t = await openTestDb();
    const kubeConfig = kubeConfigFor(fake.url, 'operator');
    // Waiting pods are woken by pod events alone here: the safety poll is longer than the test.
    controller = new Controller({ kubeConfig, namespace: NAMESPACE, store: new InstanceStore(t.db, t.crypto), session: SESSION, logger: silentLogger, ...QUICK, rolloutMaxUnavailable: { count: 2 }, rolloutPollMs: 600_000 });
    await controller.start();
  });
  after(async () => {
    await controller?.stop();
    await fake?.stop();
    await t?.close();
  });

  it('replaces at most SESSION_ROLLOUT_MAX_UNAVAILABLE outdated pods at once, moving on as new ones become Ready', async () => {
    const kubectl = kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi);
    const ids = ['roll-1', 'roll-2', 'roll-3', 'roll-4', 'roll-5', 'roll-6'];
    for (const id of ids) {
      await kubectl.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'Instance', metadata: { name: id }, spec: { displayName: id } } });
    }
    const pod = (id: string) => fake.get('', 'v1', 'pods', NAMESPACE, sessionPodName(id));
    const ready = (p: any) => p && !p.metadata.deletionTimestamp && p.status?.conditions?.some((c: { type: string; status: string }) => c.type === 'Ready' && c.status === 'True');
    const hash = (id: string): string | undefined => pod(id)?.metadata.annotations['switchboard.dev/template-hash'];
    // Each pod's template hash now (it covers the Instance's own spec too).
    const current = await eventually(() => {
      assert.ok(ids.every((id) => pod(id) && ready(pod(id))), 'every session pod up');
      return new Map(ids.map((id) => [id, hash(id)]));
    });

    // An upgrade: every pod is of an older template at once. New pods are Ready only when the test says.
    fake.podsReadyAtOnce = false;
    let mostDown = 0;
    const down = () => ids.filter((id) => !ready(pod(id))).length;
    const sampler = setInterval(() => (mostDown = Math.max(mostDown, down())), 5);
    try {
      for (const id of ids) fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName(id), (p) => (p.metadata.annotations['switchboard.dev/template-hash'] = 'older-template'));
      const replaced = () => ids.filter((id) => hash(id) === current.get(id));
      await eventually(() => assert.equal(replaced().length, 2, 'two replaced'));
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(replaced().length, 2, 'no more while those two are not Ready');
      const kept = ids.filter((id) => hash(id) === 'older-template' && ready(pod(id)));
      assert.equal(kept.length, 4, 'the others keep serving');
      // And say so: Ready, an update pending.
      await eventually(() => {
        const readyCondition = fake.get(GROUP, VERSION, INSTANCES, NAMESPACE, kept[0])?.status?.conditions?.find((c: { type: string }) => c.type === 'Ready');
        assert.deepEqual([readyCondition?.status, readyCondition?.reason], ['True', 'UpdatePending']);
        assert.match(readyCondition.message, /older template .*SESSION_ROLLOUT_MAX_UNAVAILABLE/);
      });

      // Each new pod that becomes Ready lets one more go.
      const markReady = (id: string) => fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName(id), (p) => (p.status = { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] }));
      markReady(replaced()[0]);
      await eventually(() => assert.equal(replaced().length, 3, 'a third once one is Ready'));
      await eventually(() => {
        for (const id of replaced()) if (!ready(pod(id))) markReady(id);
        assert.equal(replaced().length, 6, 'all replaced');
        assert.ok(ids.every((id) => ready(pod(id))), 'all Ready');
      }, 20_000, 50);
    } finally {
      clearInterval(sampler);
      fake.podsReadyAtOnce = true;
    }
    assert.ok(mostDown <= 2, `at most two down at any time (saw ${mostDown})`);

    // Every pod outdated and not Ready at once (the database or NATS restarting with an upgrade):
    // replacing one not Ready takes nothing down, but they still go two at a time, so a broken
    // new version does not reach every instance.
    const now = new Map(ids.map((id) => [id, hash(id)]));
    fake.podsReadyAtOnce = false;
    try {
      for (const id of ids) {
        fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName(id), (p) => {
          p.metadata.annotations['switchboard.dev/template-hash'] = 'older-template';
          p.status = { phase: 'Running', conditions: [{ type: 'Ready', status: 'False' }] };
        });
      }
      const renewed = () => ids.filter((id) => hash(id) === now.get(id));
      await eventually(() => assert.equal(renewed().length, 2, 'two replaced'));
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(renewed().length, 2, 'no more while the new ones are not Ready');
      // As new ones become Ready the kept ones follow, woken at once (the poll is longer than the test).
      await eventually(() => {
        for (const id of renewed()) {
          if (!ready(pod(id))) fake.mutate('', 'v1', 'pods', NAMESPACE, sessionPodName(id), (p) => (p.status = { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] }));
        }
        assert.equal(renewed().length, 6, 'all replaced');
        assert.ok(ids.every((id) => ready(pod(id))), 'all Ready');
      }, 20_000, 50);
    } finally {
      fake.podsReadyAtOnce = true;
    }
  });
});

describe('operator: changes no watch event of the resource itself announces', function () {
  this.timeout(20_000);
  let fake: FakeApiServer;
  let t: TestDb;
  let controller: Controller;

  before(async () => {
    fake = await startFake({ roles: { operator: chartRoleRules('operator') } });
    t = await openTestDb();
    // Resyncs far apart: only the database poll can notice the drift within the test.
    controller = new Controller({
      kubeConfig: kubeConfigFor(fake.url, 'operator'), namespace: NAMESPACE, store: new InstanceStore(t.db, t.crypto), session: SESSION, logger: silentLogger,
      ...QUICK, resyncMs: 600_000, sessionLostAfterMs: 300,
    });
    await controller.start();
  });
  after(async () => {
    await controller.stop();
    await fake.stop();
    await t.close();
  });

  it('brings a recorded `paused` back to the resource\'s (two racing API calls left the older one)', async () => {
    const kubectl = kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi);
    await kubectl.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'Instance', metadata: { name: 'inst-drift' }, spec: { displayName: 'Drift', paused: true } } });
    const row = () => t.db('instances').where({ id: 'inst-drift' }).first();
    await eventually(async () => assert.equal((await row())?.paused, true));
    await controller.idle();
    await t.db('instances').where({ id: 'inst-drift' }).update({ paused: false }); // a connect's write landing after a disconnect's
    await eventually(async () => assert.equal((await row()).paused, true), 3000);
    assert.equal(fake.get('', 'v1', 'pods', NAMESPACE, sessionPodName('inst-drift')), undefined, 'paused: still no session pod');
  });

  it('writes a token renewed through the API to its Secret at the next poll, not the next resync', async () => {
    const kubectl = kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi);
    await kubectl.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'Instance', metadata: { name: 'inst-renew' }, spec: { displayName: 'Renew', paused: true } } });
    const secretToken = () => Buffer.from(fake.get('', 'v1', 'secrets', NAMESPACE, 'inst-renew-token')?.data?.apiToken ?? '', 'base64').toString();
    await eventually(() => assert.ok(secretToken(), 'the token Secret exists'));
    await controller.idle();
    await new Promise((r) => setTimeout(r, 300)); // a few polls see the token as it is
    const renewed = issueInstanceToken({ crypto: t.crypto });
    await t.db('instances').where({ id: 'inst-renew' }).update(renewed.columns); // POST …/token
    await eventually(() => assert.equal(secretToken(), renewed.token), 3000);
  });

  it('records the session of a record left connected by a dead session process as lost (stopped when paused), not one a session holds', async () => {
    const record = (id: string, state: string, paused = false) => ({ id, name: id, paused, state, phone: state === 'connected' ? '5511900005555' : null, token_hash: t.crypto.hashToken(id), token_sealed: t.crypto.seal(id) });
    // inst-dead-paused: its session was killed while it stopped for a pause, before it recorded `stopped`.
    await t.db('instances').insert([record('inst-dead', 'connected'), record('inst-dead-qr', 'awaiting_scan'), record('inst-alive', 'connected'), record('inst-dead-paused', 'connected', true)]);
    const alive = ownerLockFor(t.db, 'inst-alive', () => undefined);
    assert.equal(await alive.tryAcquire(), true);
    try {
      const stateOf = async (id: string) => (await t.db('instances').where({ id }).first('state')).state;
      await eventually(async () => assert.deepEqual([await stateOf('inst-dead'), await stateOf('inst-dead-qr'), await stateOf('inst-dead-paused')], ['reconnecting', 'starting', 'stopped']), 5000);
      const lastUpdate = async (id: string) => JSON.parse((await t.db('events').where({ instance_id: id, type: 'connection.update' }).orderBy('created_at', 'desc').first('body')).body).data;
      assert.deepEqual(await lastUpdate('inst-dead'), { state: 'reconnecting', previousState: 'connected', phone: '5511900005555', reason: 'session_lost' });
      assert.deepEqual(await lastUpdate('inst-dead-paused'), { state: 'stopped', previousState: 'connected', phone: '5511900005555', reason: 'paused' });
      await new Promise((resolve) => setTimeout(resolve, 800)); // longer than sessionLostAfterMs
      assert.equal(await stateOf('inst-alive'), 'connected', 'a session holds it');
    } finally {
      await alive.release();
    }
  });

  it('links an Instance applied before its Project as soon as the Project exists', async () => {
    const kubectl = kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi);
    const create = (plural: string, kind: string, name: string, spec: Record<string, unknown>) =>
      kubectl.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural, body: { apiVersion: `${GROUP}/${VERSION}`, kind, metadata: { name }, spec } });
    const row = () => t.db('instances').where({ id: 'inst-early' }).first();
    await create(INSTANCES, 'Instance', 'inst-early', { displayName: 'Early', projectRef: 'late', paused: true });
    await eventually(async () => assert.equal((await row())?.name, 'Early'));
    await controller.idle();
    assert.equal((await row()).project_id, null, 'no project record yet');
    await create(PROJECTS, 'Project', 'late', { displayName: 'Late' });
    await eventually(async () => assert.equal((await row()).project_id, 'late'), 3000);

    // Further changes of the Project (its record exists) leave its instances alone.
    await controller.idle();
    const reads = () => fake.requests.filter((r) => r === `GET /apis/${GROUP}/${VERSION}/namespaces/${NAMESPACE}/${INSTANCES}/inst-early`).length;
    const before = reads();
    await kubectl.patchNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: PROJECTS, name: 'late', body: { spec: { displayName: 'Later' } } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    await eventually(async () => assert.equal((await t.db('projects').where({ id: 'late' }).first()).name, 'Later'));
    await controller.idle();
    assert.equal(reads(), before, 'no instance reconciled for a change of its project');
  });
});

describe('operator: a token renewed before the first database poll after a start', function () {
  this.timeout(20_000);

  it('reaches its Secret at that poll, not the next resync', async () => {
    const fake = await startFake();
    const t = await openTestDb();
    // The first poll comes 3 s after the start; resyncs are far apart.
    const controller = new Controller({
      kubeConfig: kubeConfigFor(fake.url), namespace: NAMESPACE, store: new InstanceStore(t.db, t.crypto), session: SESSION, logger: silentLogger,
      ...QUICK, statePollMs: 3000, resyncMs: 600_000,
    });
    try {
      const kubectl = kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi);
      await kubectl.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'Instance', metadata: { name: 'inst-early-renew' }, spec: { displayName: 'Early renew', paused: true } } });
      await controller.start();
      const secretToken = () => Buffer.from(fake.get('', 'v1', 'secrets', NAMESPACE, 'inst-early-renew-token')?.data?.apiToken ?? '', 'base64').toString();
      await eventually(() => assert.ok(secretToken(), 'the first sync wrote the token Secret'));
      const renewed = issueInstanceToken({ crypto: t.crypto });
      await t.db('instances').where({ id: 'inst-early-renew' }).update(renewed.columns); // POST …/token, before the first poll
      await eventually(() => assert.equal(secretToken(), renewed.token), 8000);
    } finally {
      await controller.stop();
      await fake.stop();
      await t.close();
    }
  });
});
