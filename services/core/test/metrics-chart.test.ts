// The chart's Grafana dashboard and alert rules against the metrics the code really registers:
// rendered with `helm template`, every metric name in every PromQL expression must exist (a renamed
// metric would otherwise leave a silent dashboard panel or an alert that can never fire).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { createLogger } from '../src/logger.ts';
import { MemoryBus } from '../src/bus/index.ts';
import { createMetrics } from '../src/metrics.ts';
import { layerBinary } from '../../operator/test/k8s-tools.ts';

const CHART = join(import.meta.dirname, '..', '..', '..', 'charts', 'switchboard');
const REQUIRED = ['secrets.encryptionKey=MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=', 'secrets.adminApiKey=admin-key-of-16-chars'];
type Obj = { kind: string; metadata: { name: string; labels?: Record<string, string> }; data?: Record<string, string>; spec?: any };

/** Every series name the code can expose (histograms with their suffixes). */
async function knownMetricNames(): Promise<Set<string>> {
  const bus = new MemoryBus({ log: createLogger({ level: 'silent' }) });
  const fakeDb = (() => {
    throw new Error('not used: names only');
  }) as any;
  const metrics = createMetrics({ db: fakeDb, bus });
  const names = new Set<string>();
  for (const m of metrics.registry.getMetricsAsArray()) {
    names.add(m.name);
    if (String(m.type) === 'histogram') for (const suffix of ['_bucket', '_count', '_sum']) names.add(m.name + suffix);
  }
  await bus.close();
  return names;
}

function metricNamesIn(expr: string): string[] {
  return [...expr.matchAll(/\b(switchboard_[a-z0-9_]+)/g)].map((m) => m[1]);
}

describe('chart: dashboard and alert rules', function () {
  this.timeout(60_000);
  let helm: string;
  before(() => (helm = layerBinary('helm')));
  const render = (sets: string[]): Obj[] => {
    const out = execFileSync(helm, ['template', 'sb', CHART, '--namespace', 'switchboard', ...[...REQUIRED, ...sets].flatMap((s) => ['--set', s])], { encoding: 'utf8' });
    return parseAllDocuments(out).map((d) => d.toJS()).filter(Boolean);
  };

  it('renders neither by default', () => {
    const kinds = render([]).map((o) => `${o.kind}/${o.metadata.name}`);
    assert.ok(!kinds.some((k) => k.startsWith('PrometheusRule/') || k.endsWith('-grafana-dashboard')), kinds.join(', '));
  });

  it('ships a dashboard and alert rules that use only real metrics', async () => {
    const objs = render(['metrics.prometheusRule.enabled=true', 'grafana.dashboards.enabled=true']);
    const known = await knownMetricNames();

    const dashboardMap = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name === 'sb-switchboard-grafana-dashboard');
    assert.ok(dashboardMap, 'dashboard ConfigMap rendered');
    assert.equal(dashboardMap.metadata.labels?.grafana_dashboard, '1');
    const dashboard = JSON.parse(dashboardMap.data!['switchboard.json']);
    assert.equal(dashboard.uid, 'switchboard-overview');
    const exprs: string[] = dashboard.panels.flatMap((p: any) => (p.targets ?? []).map((t: any) => t.expr));
    assert.ok(exprs.length >= 15);

    const rule = objs.find((o) => o.kind === 'PrometheusRule');
    assert.ok(rule, 'PrometheusRule rendered');
    const alerts = rule.spec.groups.flatMap((g: any) => g.rules);
    const names = alerts.map((a: any) => a.alert);
    for (const wanted of ['SwitchboardWebhooksExhausted', 'SwitchboardSendQueueStuck', 'SwitchboardSessionsDisconnected', 'SwitchboardMetricsSourceDown']) assert.ok(names.includes(wanted), wanted);
    exprs.push(...alerts.map((a: any) => String(a.expr)));

    for (const expr of exprs) {
      const used = metricNamesIn(expr);
      assert.ok(used.length > 0, `no metric in ${expr}`);
      for (const name of used) assert.ok(known.has(name), `${name} (in "${expr}") is not a metric the code exposes`);
    }
  });
});
