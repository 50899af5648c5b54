// The gateway's cluster-mode writer (services/gateway/src/kubernetes/instance-resources.ts)
// against the fake API server: server-side apply with field manager `gateway`, per-operation merge
// patches, reset and delete, and a clear 503 problem while the Kubernetes API is unavailable.
import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { Problem } from '@switchboard/core';
import { KubernetesInstanceResources } from '../../gateway/src/kubernetes/instance-resources.ts';
import { GROUP, INSTANCES, VERSION } from '../src/resources.ts';
import type { FakeApiServer } from './fake-apiserver.ts';
import { NAMESPACE, kubeConfigFor, startFake } from './helpers.ts';

describe('gateway: KubernetesInstanceResources', () => {
  let fake: FakeApiServer;
  let resources: KubernetesInstanceResources;
  const get = (name: string) => fake.get(GROUP, VERSION, INSTANCES, NAMESPACE, name);

  before(async () => {
    fake = await startFake();
    resources = new KubernetesInstanceResources(kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi), NAMESPACE, { timeoutMs: 1000 });
  });
  after(() => fake.stop());

  it('creates and updates the resource by server-side apply as field manager "gateway"', async () => {
    await resources.apply({ id: 'inst-a', name: 'First', projectId: 'proj-1', paused: false });
    let o = get('inst-a')!;
    assert.deepEqual(o.spec, { displayName: 'First', projectRef: 'proj-1', paused: false });
    assert.equal(o.metadata.labels['switchboard.dev/origin'], 'api');
    assert.deepEqual(o.metadata.managedFields.map((f: { manager: string }) => f.manager), ['gateway']);
    assert.ok(fake.requests.includes(`PATCH /apis/${GROUP}/${VERSION}/namespaces/${NAMESPACE}/instances/inst-a`));

    await resources.apply({ id: 'inst-a', name: 'Renamed', projectId: null, paused: true });
    o = get('inst-a')!;
    assert.deepEqual(o.spec, { displayName: 'Renamed', paused: true }, 'a field no longer applied is removed');
    assert.equal(o.metadata.generation, 2);
  });

  it('wins over fields another manager applied (force), which a plain apply would not', async () => {
    const other = kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi);
    const body = { apiVersion: `${GROUP}/${VERSION}`, kind: 'Instance', metadata: { name: 'inst-a' }, spec: { displayName: 'Kubectl name' } };
    await assert.rejects(
      other.patchNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES, name: 'inst-a', body, fieldManager: 'kubectl' }, setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply)),
      (err: { code?: number }) => err.code === 409,
    );
    await resources.apply({ id: 'inst-a', name: 'Gateway name', projectId: null, paused: true });
    assert.equal(get('inst-a')!.spec.displayName, 'Gateway name');
  });

  it('updates only the fields an operation changed, and never makes a missing resource', async () => {
    await resources.apply({ id: 'inst-u', name: 'Before', projectId: 'proj-1', paused: false });
    // Concurrent operations, each writing only its own change: none writes back another's field.
    await resources.update('inst-u', { paused: true });
    await resources.update('inst-u', { name: 'After' });
    assert.deepEqual(get('inst-u')!.spec, { displayName: 'After', projectRef: 'proj-1', paused: true });
    await resources.update('inst-u', { projectId: null });
    await resources.update('inst-u', { paused: false });
    assert.deepEqual(get('inst-u')!.spec, { displayName: 'After', paused: false });
    const generation = get('inst-u')!.metadata.generation;
    await resources.update('inst-u', {}); // nothing changed: no request
    assert.equal(get('inst-u')!.metadata.generation, generation);

    // Gone (a delete won the race): no resource is made again.
    await assert.rejects(resources.update('inst-gone', { paused: false }), (err: unknown) => err instanceof Problem && err.status === 503);
    assert.equal(get('inst-gone'), undefined);
    await resources.delete('inst-u');
  });

  it('requests a reset without touching the other fields, and deletes idempotently', async () => {
    await resources.requestReset('inst-a', new Date('2031-02-03T04:05:06.100Z'));
    await resources.requestReset('inst-a', new Date('2031-02-03T04:05:06.789Z')); // same second: still a new request
    assert.deepEqual(get('inst-a')!.spec, { displayName: 'Gateway name', paused: true, resetRequestedAt: '2031-02-03T04:05:06.789Z' });
    assert.equal(get('inst-a')!.metadata.generation, 5);
    // Stamped by a clock ahead of ours (kubectl, another replica): the CRD refuses a step back, so
    // the request comes after it.
    await resources.requestReset('inst-a', new Date('2031-02-03T04:05:05.000Z'));
    assert.equal(get('inst-a')!.spec.resetRequestedAt, '2031-02-03T04:05:06.790Z');
    await resources.delete('inst-a');
    assert.equal(get('inst-a'), undefined);
    await resources.delete('inst-a'); // already gone: fine
  });

  it('answers 503 kubernetes_unavailable while the API is down or failing, and works again after', async () => {
    const expect503 = (err: unknown) => err instanceof Problem && err.status === 503 && err.code === 'kubernetes_unavailable' && err.headers['Retry-After'] === '5';
    fake.setUnavailable(true);
    await assert.rejects(resources.apply({ id: 'inst-b', name: 'Bb', projectId: null, paused: false }), expect503);
    fake.setUnavailable(false);
    await fake.stop();
    await assert.rejects(resources.apply({ id: 'inst-b', name: 'Bb', projectId: null, paused: false }), expect503);
    await assert.rejects(resources.delete('inst-b'), expect503);
    await fake.start();
    await resources.apply({ id: 'inst-b', name: 'Bb', projectId: null, paused: false });
    assert.equal(get('inst-b')!.spec.displayName, 'Bb');
  });

  it('answers 503 when the API hangs instead of refusing', async () => {
    // A loopback listener that accepts connections and never answers, like a wedged API server.
    const sockets = new Set<Socket>();
    const silent = createServer((socket) => sockets.add(socket.on('error', () => undefined)));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
      const hanging = new KubernetesInstanceResources(kubeConfigFor(url).makeApiClient(CustomObjectsApi), NAMESPACE, { timeoutMs: 200 });
      await assert.rejects(hanging.requestReset('inst-x'), (err: unknown) => err instanceof Problem && err.status === 503);
    } finally {
      for (const socket of sockets) socket.destroy();
      silent.close();
    }
  });
});
