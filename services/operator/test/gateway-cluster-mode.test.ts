// The gateway process in cluster mode (KUBECONFIG set) against the fake API server: the API's
// instance operations become Instance resources, and while the Kubernetes API is unavailable the
// operations that need it answer 503 and leave no half-made instance behind.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import knexFactory from 'knex';
import { join } from 'node:path';
import { startCluster, type Cluster } from '../../../test/support/cluster.ts';
import { ApiClient } from '../../../test/support/http.ts';
import { createTestDatabase, NATS_URL, testNamespace } from '../../../test/support/services.ts';
import { GROUP, INSTANCES, VERSION } from '../src/resources.ts';
import type { FakeApiServer } from './fake-apiserver.ts';
import { NAMESPACE, chartRoleRules, kubeConfigFor, startFake } from './helpers.ts';

describe('gateway process in cluster mode (fake Kubernetes API)', function () {
  this.timeout(60_000);
  let fake: FakeApiServer;
  let database: Awaited<ReturnType<typeof createTestDatabase>>;
  let cluster: Cluster;
  let admin: ApiClient;
  const dir = mkdtempSync(join(tmpdir(), 'sb-kubeconfig-'));
  const resource = (name: string) => fake.get(GROUP, VERSION, INSTANCES, NAMESPACE, name);

  before(async () => {
    fake = await startFake({ roles: { gateway: chartRoleRules('gateway') } }); // the chart's Role holds the gateway
    const kubeconfig = join(dir, 'config');
    writeFileSync(kubeconfig, kubeConfigFor(fake.url, 'gateway').exportConfig());
    database = await createTestDatabase();
    cluster = await startCluster({ databaseUrl: database.url, natsUrl: NATS_URL, namespace: testNamespace(), dispatchers: 0, env: { KUBECONFIG: kubeconfig } });
    admin = new ApiClient(cluster.url, cluster.adminKey);
  });
  after(async () => {
    await cluster?.stop();
    await database?.drop();
    await fake?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('creates, renames, pauses and deletes the Instance resource with the API', async () => {
    const created = await admin.post('/api/instances', { name: 'Cluster line' });
    assert.equal(created.status, 201);
    const id = created.body.id;
    assert.equal(resource(id)?.spec.displayName, 'Cluster line');

    assert.equal((await admin.patch(`/api/instances/${id}`, { name: 'Renamed line' })).status, 200);
    assert.equal(resource(id)?.spec.displayName, 'Renamed line');

    assert.equal((await admin.post(`/api/instances/${id}/disconnect`)).status, 200);
    assert.equal(resource(id)?.spec.paused, true);
    // The record follows that version of the resource: an operator reconcile holding an older
    // read cannot write it back (core/instance-spec-stamp.ts).
    const db = knexFactory({ client: 'pg', connection: database.url, pool: { min: 0, max: 1 } });
    try {
      const stamp = await db('instances').where({ id }).first('spec_uid', 'spec_generation');
      assert.deepEqual([stamp.spec_uid, Number(stamp.spec_generation)], [resource(id)!.metadata.uid, resource(id)!.metadata.generation]);
    } finally {
      await db.destroy();
    }

    assert.equal((await admin.delete(`/api/instances/${id}`)).status, 200);
    assert.equal(resource(id), undefined);
  });

  it('a rename racing a connect, a disconnect or a move changes no field the other set', async () => {
    const { id } = (await admin.post('/api/instances', { name: 'Racing line' })).body;
    for (let round = 0; round < 6; round++) {
      const paused = round % 2 === 0;
      const [renamed, toggled] = await Promise.all([admin.patch(`/api/instances/${id}`, { name: `Line ${round}` }), admin.post(`/api/instances/${id}/${paused ? 'disconnect' : 'connect'}`)]);
      assert.deepEqual([renamed.status, toggled.status], [200, 200]);
      assert.deepEqual(resource(id)?.spec, { displayName: `Line ${round}`, paused }, `round ${round}`);
      const record = (await admin.get(`/api/instances/${id}`)).body;
      assert.deepEqual([record.name, record.paused], [`Line ${round}`, paused]);
    }
    const project = (await admin.post('/api/projects', { name: 'Racing project' })).body;
    const [renamed, moved] = await Promise.all([admin.patch(`/api/instances/${id}`, { name: 'Last name' }), admin.patch(`/api/instances/${id}`, { projectId: project.id })]);
    assert.deepEqual([renamed.status, moved.status], [200, 200]);
    assert.deepEqual(resource(id)?.spec, { displayName: 'Last name', projectRef: project.id, paused: false });
    await admin.delete(`/api/instances/${id}`);
  });

  it('answers 503 while the Kubernetes API is unavailable and keeps the records unchanged', async () => {
    const kept = (await admin.post('/api/instances', { name: 'Kept line' })).body;
    fake.setUnavailable(true);
    try {
      const before = (await admin.get('/api/instances')).body.data.length;
      const refused = await admin.post('/api/instances', { name: 'Refused line' });
      assert.equal(refused.status, 503);
      assert.equal(refused.body.code, 'kubernetes_unavailable');
      assert.equal((await admin.get('/api/instances')).body.data.length, before, 'no half-made instance is left behind');

      assert.equal((await admin.patch(`/api/instances/${kept.id}`, { name: 'Not renamed' })).status, 503);
      assert.equal((await admin.get(`/api/instances/${kept.id}`)).body.name, 'Kept line');
    } finally {
      fake.setUnavailable(false);
    }
    assert.equal((await admin.post('/api/instances', { name: 'Accepted again' })).status, 201);
  });
});
