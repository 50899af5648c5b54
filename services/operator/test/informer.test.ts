// The operator's informer (src/informer.ts) against the fake API server: periodic resync hands
// every cached object to the handler again, and watches the API server ends (timeoutSeconds) or
// that break are resumed without losing events.
import assert from 'node:assert/strict';
import { CustomObjectsApi } from '@kubernetes/client-node';
import { ResilientInformer, type InformerOptions } from '../src/informer.ts';
import { GROUP, INSTANCES, VERSION, type Instance } from '../src/resources.ts';
import type { FakeApiServer } from './fake-apiserver.ts';
import { NAMESPACE, eventually, kubeConfigFor, startFake } from './helpers.ts';

describe('operator: informer', function () {
  this.timeout(15_000);
  let fake: FakeApiServer;
  let custom: CustomObjectsApi;
  let informer: ResilientInformer<Instance> | undefined;
  const ref = { group: GROUP, version: VERSION, namespace: NAMESPACE, plural: INSTANCES };
  const create = (name: string) => custom.createNamespacedCustomObject({ ...ref, body: { apiVersion: `${GROUP}/${VERSION}`, kind: 'Instance', metadata: { name }, spec: { displayName: name } } });
  const path = `/apis/${GROUP}/${VERSION}/namespaces/${NAMESPACE}/instances`;

  beforeEach(async () => {
    fake = await startFake();
    custom = kubeConfigFor(fake.url).makeApiClient(CustomObjectsApi);
  });
  afterEach(async () => {
    await informer?.stop();
    await fake.stop();
  });

  function start(seen: string[], options: Partial<InformerOptions<Instance>> = {}) {
    informer = new ResilientInformer<Instance>({
      kubeConfig: kubeConfigFor(fake.url),
      path,
      list: () => custom.listNamespacedCustomObject(ref) as never,
      onObject: (o, deleted) => seen.push(`${deleted ? 'deleted' : 'seen'} ${o.metadata.name}`),
      restartMinMs: 50,
      ...options,
    });
    return informer.start();
  }

  it('resyncs: hands every cached object to the handler again at the interval, with no change made', async () => {
    await create('inst-quiet');
    const seen: string[] = [];
    await start(seen, { resyncMs: 100 });
    await eventually(() => assert.ok(seen.filter((s) => s === 'seen inst-quiet').length >= 4, 'inst-quiet seen again on each resync'));
    assert.equal(fake.requests.filter((r) => r === `GET ${path}`).length, 1, 'from the cache: no relisting');
  });

  it('resumes watches the API server ends at their timeout, from the last resourceVersion', async () => {
    const seen: string[] = [];
    await start(seen, { resyncMs: 60_000, watchTimeoutSeconds: () => 1 });
    // The first watch ends after 1 s: wait for the second one rather than guess when it starts.
    await eventually(() => assert.ok(fake.requests.filter((r) => r === `GET ${path}?watch`).length >= 2, 'watched again'), 8000);
    await create('inst-late');
    await eventually(() => assert.ok(seen.includes('seen inst-late'), 'inst-late seen'));
    assert.ok(fake.requests.filter((r) => r === `GET ${path}?watch`).length >= 2, 'watched again');
    assert.equal(fake.requests.filter((r) => r === `GET ${path}`).length, 1, 'resumed, not relisted');
  });

  it('restarts after the watch breaks while the API server refuses, and sees what changed meanwhile', async () => {
    await create('inst-kept');
    const seen: string[] = [];
    await start(seen);
    await eventually(() => assert.ok(seen.includes('seen inst-kept'), 'inst-kept seen'));
    fake.setUnavailable(true);
    fake.breakWatches();
    await new Promise((r) => setTimeout(r, 200)); // restarts fail and back off
    fake.setUnavailable(false);
    await custom.deleteNamespacedCustomObject({ ...ref, name: 'inst-kept' });
    await create('inst-new');
    await eventually(() => assert.ok(seen.includes('deleted inst-kept') && seen.includes('seen inst-new'), 'inst-kept deleted and inst-new seen'));
    assert.equal(informer!.get('inst-kept', NAMESPACE), undefined);
  });

  it('backs off further with every failed restart while the API server refuses, up to its cap', async () => {
    await create('inst-patient');
    const seen: string[] = [];
    const delays: number[] = [];
    await start(seen, { restartMaxMs: 400, onError: (_err, delay) => delays.push(delay) });
    fake.setUnavailable(true);
    fake.breakWatches();
    await new Promise((r) => setTimeout(r, 1500));
    assert.deepEqual(delays.slice(0, 4), [50, 100, 200, 400], 'each failed restart waits twice as long');
    assert.ok(delays.length <= 7 && delays.every((d) => d <= 400), `restarts in 1.5 s: ${delays.join(', ')}`);
    fake.setUnavailable(false);
    await create('inst-after');
    await eventually(() => assert.ok(seen.includes('seen inst-after'), 'inst-after seen'));

    // A run that then stays up longer than the longest wait starts the backoff over.
    await new Promise((r) => setTimeout(r, 600));
    const before = delays.length;
    fake.breakWatches();
    await eventually(() => assert.ok(delays.length > before, 'the broken watch restarts'));
    assert.equal(delays[before], 50);
  });
});
