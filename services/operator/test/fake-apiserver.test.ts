// The fake API server must behave like the real one where the operator depends on it; these
// checks keep it honest (through client-node, as the operator talks to it).
import assert from 'node:assert/strict';
import { CoreV1Api, CustomObjectsApi, PatchStrategy, Watch, setHeaderOptions } from '@kubernetes/client-node';
import { GROUP, INSTANCES, VERSION } from '../src/resources.ts';
import type { FakeApiServer } from './fake-apiserver.ts';
import { NAMESPACE, eventually, kubeConfigFor, startFake } from './helpers.ts';

describe('fake Kubernetes API server', () => {
  let fake: FakeApiServer;
  let custom: CustomObjectsApi;
  let core: CoreV1Api;
  const ref = { group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES };
  const body = (name: string, spec: Record<string, unknown> = { displayName: 'Xx' }) => ({ apiVersion: `${GROUP}/${VERSION}`, kind: 'Instance', metadata: { name }, spec });

  before(async () => {
    fake = await startFake({ podTerminationMs: 0 });
    const kc = kubeConfigFor(fake.url);
    custom = kc.makeApiClient(CustomObjectsApi);
    core = kc.makeApiClient(CoreV1Api);
  });
  after(() => fake.stop());

  it('rejects a write with a stale resourceVersion with 409, and an invalid object with 422', async () => {
    const created = await custom.createNamespacedCustomObject({ ...ref, body: body('rv-test') });
    const updated = await custom.replaceNamespacedCustomObject({ ...ref, name: 'rv-test', body: { ...created, spec: { displayName: 'Yy' } } });
    assert.notEqual(updated.metadata.resourceVersion, created.metadata.resourceVersion);
    assert.equal(updated.metadata.generation, 2);
    await assert.rejects(custom.replaceNamespacedCustomObject({ ...ref, name: 'rv-test', body: { ...created, spec: { displayName: 'Zz' } } }), (e: { code?: number }) => e.code === 409);
    await assert.rejects(custom.createNamespacedCustomObject({ ...ref, body: body('bad', { displayName: '' }) }), (e: { code?: number }) => e.code === 422);
    await assert.rejects(custom.createNamespacedCustomObject({ ...ref, body: body('rv-test') }), (e: { code?: number }) => e.code === 409);
  });

  it('keeps status out of main-resource writes and spec out of status writes', async () => {
    const o = await custom.getNamespacedCustomObject({ ...ref, name: 'rv-test' });
    const s = await custom.replaceNamespacedCustomObjectStatus({ ...ref, name: 'rv-test', body: { ...o, spec: { displayName: 'ignored' }, status: { state: 'connected' } } });
    assert.equal(s.spec.displayName, 'Yy');
    assert.equal(s.status.state, 'connected');
    assert.equal(s.metadata.generation, o.metadata.generation, 'status writes do not bump generation');
    const m = await custom.replaceNamespacedCustomObject({ ...ref, name: 'rv-test', body: { ...s, status: { state: 'stopped' } } });
    assert.equal(m.status.state, 'connected');
  });

  it('drops fields the CRD schema does not name, as the real server prunes them', async () => {
    const created = await custom.createNamespacedCustomObject({ ...ref, body: { ...body('prune-test', { displayName: 'Pp', colour: 'red' }), extra: 1 } });
    assert.deepEqual([created.spec, created.extra, created.metadata.name], [{ displayName: 'Pp', paused: false }, undefined, 'prune-test']);
    const s = await custom.replaceNamespacedCustomObjectStatus({ ...ref, name: 'prune-test', body: { ...created, status: { state: 'connected', mood: 'fine', conditions: [] } } });
    assert.deepEqual(s.status, { conditions: [], state: 'connected' });
  });

  it('bumps generation only for a real spec change (not the order of keys, not a defaulted field left out)', async () => {
    const created = await custom.createNamespacedCustomObject({ ...ref, body: body('gen-test', { displayName: 'Gg', projectRef: 'acme' }) });
    assert.equal(created.spec.paused, false, 'the schema default is filled in');
    const put = (spec: Record<string, unknown>, from: { metadata: { resourceVersion: string } }) =>
      custom.replaceNamespacedCustomObject({ ...ref, name: 'gen-test', body: { ...body('gen-test', spec), metadata: { name: 'gen-test', resourceVersion: from.metadata.resourceVersion } } });
    const reordered = await put({ projectRef: 'acme', paused: false, displayName: 'Gg' }, created);
    const defaulted = await put({ displayName: 'Gg', projectRef: 'acme' }, reordered);
    assert.deepEqual([reordered, defaulted].map((o) => [o.metadata.generation, o.metadata.resourceVersion]), [1, 1].map((g) => [g, created.metadata.resourceVersion]));
    const changed = await put({ displayName: 'Gh', projectRef: 'acme' }, defaulted);
    assert.equal(changed.metadata.generation, 2);
  });

  it('holds a resource with finalizers until they are removed, then garbage-collects its dependents', async () => {
    const owner = await custom.createNamespacedCustomObject({ ...ref, body: { ...body('gc-owner'), metadata: { name: 'gc-owner', finalizers: ['test/hold'] } } });
    await core.createNamespacedSecret({ namespace: NAMESPACE, body: { metadata: { name: 'gc-secret', ownerReferences: [{ apiVersion: `${GROUP}/${VERSION}`, kind: 'Instance', name: 'gc-owner', uid: owner.metadata.uid }] }, data: { a: 'Yg==' } } });
    await custom.deleteNamespacedCustomObject({ ...ref, name: 'gc-owner' });
    const deleting = await custom.getNamespacedCustomObject({ ...ref, name: 'gc-owner' });
    assert.ok(deleting.metadata.deletionTimestamp);
    assert.ok(fake.get('', 'v1', 'secrets', NAMESPACE, 'gc-secret'));
    await assert.rejects(custom.replaceNamespacedCustomObject({ ...ref, name: 'gc-owner', body: { ...deleting, metadata: { ...deleting.metadata, finalizers: ['test/hold', 'test/new'] } } }), (e: { code?: number }) => e.code === 422);
    await custom.replaceNamespacedCustomObject({ ...ref, name: 'gc-owner', body: { ...deleting, metadata: { ...deleting.metadata, finalizers: [] } } });
    assert.equal(fake.get(GROUP, VERSION, INSTANCES, NAMESPACE, 'gc-owner'), undefined);
    await eventually(() => fake.get('', 'v1', 'secrets', NAMESPACE, 'gc-secret') === undefined);
  });

  /** An Instance `name` with a Secret owned by it, and that Secret held by a finalizer of its own. */
  async function ownerWithHeldSecret(name: string) {
    const owner = await custom.createNamespacedCustomObject({ ...ref, body: body(name) });
    const ownerRef = { apiVersion: `${GROUP}/${VERSION}`, kind: 'Instance', name, uid: owner.metadata.uid };
    await core.createNamespacedSecret({ namespace: NAMESPACE, body: { metadata: { name: `${name}-secret`, finalizers: ['test/hold'], ownerReferences: [ownerRef] }, data: { a: 'Yg==' } } });
    const release = () => core.patchNamespacedSecret({ name: `${name}-secret`, namespace: NAMESPACE, body: [{ op: 'remove', path: '/metadata/finalizers' }] }, setHeaderOptions('Content-Type', PatchStrategy.JsonPatch));
    return { secret: () => fake.get('', 'v1', 'secrets', NAMESPACE, `${name}-secret`), owner: () => fake.get(GROUP, VERSION, INSTANCES, NAMESPACE, name), release };
  }

  it('collects garbage after the delete, by its propagation policy: Background, Foreground or Orphan', async () => {
    // Background (the default): the owner goes at once, its dependents after it.
    const background = await ownerWithHeldSecret('gc-background');
    await custom.deleteNamespacedCustomObject({ ...ref, name: 'gc-background' });
    assert.equal(background.owner(), undefined);
    await eventually(() => background.secret()?.metadata.deletionTimestamp !== undefined);
    await background.release();
    await eventually(() => background.secret() === undefined);

    // Foreground: the owner stays, deleting, until its dependents are gone.
    const foreground = await ownerWithHeldSecret('gc-foreground');
    await custom.deleteNamespacedCustomObject({ ...ref, name: 'gc-foreground', propagationPolicy: 'Foreground' });
    assert.deepEqual(foreground.owner()?.metadata.finalizers, ['foregroundDeletion']);
    await eventually(() => foreground.secret()?.metadata.deletionTimestamp !== undefined);
    await new Promise((r) => setTimeout(r, 200));
    assert.ok(foreground.owner()?.metadata.deletionTimestamp, 'the owner waits for its dependent');
    await foreground.release();
    await eventually(() => foreground.secret() === undefined && foreground.owner() === undefined);

    // Orphan: the owner goes once its dependents no longer name it; they stay.
    const orphan = await ownerWithHeldSecret('gc-orphan');
    await custom.deleteNamespacedCustomObject({ ...ref, name: 'gc-orphan', propagationPolicy: 'Orphan' });
    await eventually(() => orphan.owner() === undefined);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(orphan.secret()?.metadata.deletionTimestamp, undefined);
    assert.equal(orphan.secret()?.metadata.ownerReferences, undefined);
    await orphan.release();
    await core.deleteNamespacedSecret({ name: 'gc-orphan-secret', namespace: NAMESPACE });

    await custom.createNamespacedCustomObject({ ...ref, body: body('gc-policy') });
    await assert.rejects(custom.deleteNamespacedCustomObject({ ...ref, name: 'gc-policy', propagationPolicy: 'Later' }), (e: { code?: number }) => e.code === 422);
  });

  it('holds a token given a Role to its rules (403 otherwise), names included', async () => {
    const restricted = await startFake({ roles: { reader: [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'create'], resourceNames: [] }, { apiGroups: [GROUP], resources: ['instances'], verbs: ['get'], resourceNames: ['only-this'] }] } });
    try {
      const reader = kubeConfigFor(restricted.url, 'reader');
      const secrets = reader.makeApiClient(CoreV1Api);
      await secrets.createNamespacedSecret({ namespace: NAMESPACE, body: { metadata: { name: 'rbac-secret' }, data: { a: 'Yg==' } } });
      assert.ok(await secrets.readNamespacedSecret({ name: 'rbac-secret', namespace: NAMESPACE }));
      const forbidden = (e: { code?: number }) => e.code === 403;
      await assert.rejects(secrets.listNamespacedSecret({ namespace: NAMESPACE }), forbidden);
      await assert.rejects(secrets.deleteNamespacedSecret({ name: 'rbac-secret', namespace: NAMESPACE }), forbidden);
      await assert.rejects(secrets.createNamespacedPod({ namespace: NAMESPACE, body: { metadata: { name: 'p' }, spec: { containers: [{ name: 'c', image: 'i' }] } } }), forbidden);
      const instances = reader.makeApiClient(CustomObjectsApi);
      await assert.rejects(instances.getNamespacedCustomObject({ ...ref, name: 'not-this' }), forbidden);
      await assert.rejects(instances.getNamespacedCustomObject({ ...ref, name: 'only-this' }), (e: { code?: number }) => e.code === 404, 'allowed, and absent');
      await kubeConfigFor(restricted.url).makeApiClient(CoreV1Api).deleteNamespacedSecret({ name: 'rbac-secret', namespace: NAMESPACE }); // any other token may
    } finally {
      await restricted.stop();
    }
  });

  it('streams watch events and bookmarks, and answers a compacted resourceVersion with 410 Gone', async () => {
    const list = await custom.listNamespacedCustomObject(ref);
    const seen: { type: string; rv: string; code?: number }[] = [];
    const watch = new Watch(kubeConfigFor(fake.url));
    const path = `/apis/${GROUP}/${VERSION}/namespaces/${NAMESPACE}/instances`;
    const ctl = await watch.watch(path, { resourceVersion: list.metadata.resourceVersion, allowWatchBookmarks: true }, (type, o) => seen.push({ type, rv: o.metadata?.resourceVersion }), () => {});
    await custom.createNamespacedCustomObject({ ...ref, body: body('watched') });
    await eventually(() => assert.ok(seen.some((e) => e.type === 'ADDED') && seen.some((e) => e.type === 'BOOKMARK'), 'an ADDED and a BOOKMARK event'));
    ctl.abort();

    fake.compact();
    const gone: { type: string; code?: number }[] = [];
    let ended = false;
    await watch.watch(path, { resourceVersion: list.metadata.resourceVersion }, (type, o) => gone.push({ type, code: o.code }), () => (ended = true));
    await eventually(() => ended);
    assert.deepEqual(gone, [{ type: 'ERROR', code: 410 }]);
  });

  it('answers a watch that would need an event dropped from its bounded history with 410 Gone, never a gap', async () => {
    const small = await startFake({ historyLimit: 3 });
    try {
      const api = kubeConfigFor(small.url).makeApiClient(CustomObjectsApi);
      const from = (await api.listNamespacedCustomObject(ref)).metadata.resourceVersion;
      for (const name of ['h1', 'h2', 'h3', 'h4']) await api.createNamespacedCustomObject({ ...ref, body: body(name) });
      const got: { type: string; code?: number }[] = [];
      let ended = false;
      const path = `/apis/${GROUP}/${VERSION}/namespaces/${NAMESPACE}/instances`;
      await new Watch(kubeConfigFor(small.url)).watch(path, { resourceVersion: from }, (type, o) => got.push({ type, code: o.code }), () => (ended = true));
      await eventually(() => ended);
      assert.deepEqual(got, [{ type: 'ERROR', code: 410 }], 'the first of four events is gone');
    } finally {
      await small.stop();
    }
  });

  it('enforces the CRDs\' CEL rules: name length and form, resetRequestedAt only moving forward', async () => {
    const invalid = (e: { code?: number; body?: unknown }) => e.code === 422;
    await assert.rejects(custom.createNamespacedCustomObject({ ...ref, body: body('i'.repeat(41)) }), invalid);
    await assert.rejects(custom.createNamespacedCustomObject({ ...ref, body: body('Bad_Name') }), invalid);
    await custom.createNamespacedCustomObject({ ...ref, body: body('i'.repeat(40)) });
    await custom.createNamespacedCustomObject({ ...ref, body: body('cel-reset', { displayName: 'Rr', resetRequestedAt: '2030-01-01T00:00:00Z' }) });
    const patch = (spec: Record<string, unknown>) =>
      custom.patchNamespacedCustomObject({ ...ref, name: 'cel-reset', body: { spec } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    await assert.rejects(patch({ resetRequestedAt: '2029-12-31T23:59:59Z' }), invalid);
    await assert.rejects(patch({ resetRequestedAt: null }), invalid);
    await patch({ resetRequestedAt: '2030-01-02T00:00:00Z' });
    assert.equal(fake.get(GROUP, VERSION, INSTANCES, NAMESPACE, 'cel-reset')!.spec.resetRequestedAt, '2030-01-02T00:00:00Z');
  });
});
