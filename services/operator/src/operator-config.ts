// Operator settings from the environment (besides the common ones of core's loadConfig).
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { KubeConfig } from '@kubernetes/client-node';
import { ConfigError, EnvReader } from '@switchboard/core';
import { parseMaxUnavailable, type MaxUnavailable } from './rollout-budget.ts';
import { SESSION_POD_TEMPLATE_KEYS, type SessionPodSettings, type SessionPodTemplate } from './session-pod.ts';

export interface OperatorConfig {
  namespace: string;
  identity: string;
  leaseName: string;
  healthPort: number;
  session: SessionPodSettings;
  /** SESSION_ROLLOUT_MAX_UNAVAILABLE (default 10 %). */
  rolloutMaxUnavailable: MaxUnavailable;
}

const SERVICE_ACCOUNT_NAMESPACE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';

export function loadOperatorConfig(env: Record<string, string | undefined> = process.env): OperatorConfig {
  const problems: string[] = [];
  const namespace = env.KUBERNETES_NAMESPACE?.trim() || readIfPresent(SERVICE_ACCOUNT_NAMESPACE);
  if (!namespace) problems.push('KUBERNETES_NAMESPACE: required outside a cluster (the namespace whose Instances the operator manages)');
  else if (!DNS_LABEL.test(namespace)) problems.push(`KUBERNETES_NAMESPACE: must be a namespace name: lowercase letters, digits and "-", at most 63 (got "${namespace}")`);
  const leaseName = env.LEADER_ELECTION_LEASE?.trim() || 'switchboard-operator';
  if (!DNS_SUBDOMAIN.test(leaseName)) problems.push(`LEADER_ELECTION_LEASE: must be a Lease name: lowercase letters, digits, "-" and ".", at most 253 (got "${leaseName}")`);
  const pullPolicy = env.SESSION_IMAGE_PULL_POLICY?.trim() || undefined;
  if (pullPolicy && !PULL_POLICIES.includes(pullPolicy)) problems.push(`SESSION_IMAGE_PULL_POLICY: must be one of ${PULL_POLICIES.join(', ')} (got "${pullPolicy}")`);
  const image = env.SESSION_IMAGE?.trim();
  if (!image) problems.push('SESSION_IMAGE: required (the Switchboard image the session pods run)');
  const healthPort = new EnvReader(env, problems).int('HEALTH_PORT', 8080, 0, 65535);
  const resources = sessionResources(env.SESSION_RESOURCES, problems);
  const template = sessionPodTemplate(env.SESSION_POD_TEMPLATE, problems);
  const rollout = env.SESSION_ROLLOUT_MAX_UNAVAILABLE?.trim() || '10%';
  const rolloutMaxUnavailable = parseMaxUnavailable(rollout);
  if (!rolloutMaxUnavailable) problems.push(`SESSION_ROLLOUT_MAX_UNAVAILABLE: must be a whole number of session pods (at least 1) or a percentage of them, 1% to 100% (got "${rollout}")`);
  if (problems.length) throw new ConfigError(problems);
  return {
    namespace: namespace!,
    identity: env.POD_NAME?.trim() || hostname(),
    leaseName,
    healthPort,
    rolloutMaxUnavailable: rolloutMaxUnavailable!,
    session: {
      image: image!,
      imagePullPolicy: pullPolicy,
      envSecretName: env.SESSION_ENV_SECRET?.trim() || undefined,
      envConfigMapName: env.SESSION_ENV_CONFIGMAP?.trim() || undefined,
      configRevision: env.SESSION_CONFIG_REVISION?.trim() || undefined,
      serviceAccountName: env.SESSION_SERVICE_ACCOUNT?.trim() || undefined,
      resources,
      template,
    },
  };
}

// Kubernetes' own rules for these names and values, checked at start: a wrong one would otherwise
// fail at every reconcile or campaign, in the API server's words, long after the start looked fine.
const DNS_LABEL = /^(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const PULL_POLICIES = ['Always', 'IfNotPresent', 'Never'];
const QUANTITY = /^[+]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?$/;
const RESOURCES_EXAMPLE = '{"requests":{"cpu":"50m","memory":"128Mi"},"limits":{"memory":"512Mi"}}';

/** SESSION_RESOURCES: JSON of the session container's requests and limits, each a map of quantities. */
function sessionResources(raw: string | undefined, problems: string[]): SessionPodSettings['resources'] {
  if (!raw?.trim()) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    parsed = undefined;
  }
  if (parsed === null) return {}; // `--set session.resources=null`: none, as for the chart's other pods (unset would mean the defaults)
  const isMap = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  const fits =
    isMap(parsed) &&
    Object.entries(parsed).every(([key, value]) => (key === 'requests' || key === 'limits') && isMap(value) && Object.values(value).every((q) => QUANTITY.test(String(q))));
  if (!fits) {
    problems.push(`SESSION_RESOURCES: must be JSON of requests and limits with quantities, such as ${RESOURCES_EXAMPLE}`);
    return undefined;
  }
  return parsed as SessionPodSettings['resources'];
}

/**
 * In a pod its service account; outside one KUBECONFIG or ~/.kube/config. The client's last resort
 * when there is none, an unauthenticated http://localhost:8080, is refused at start: it only fails,
 * every two seconds, in words that name neither.
 */
export function loadKubeConfig(): KubeConfig {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromDefault();
  const cluster = kubeConfig.getCurrentCluster();
  if (!cluster || (cluster.name === 'cluster' && cluster.server === 'http://localhost:8080')) {
    throw new ConfigError(['KUBECONFIG: no Kubernetes cluster to manage: not in a pod, and neither KUBECONFIG nor ~/.kube/config names one']);
  }
  return kubeConfig;
}

/** An environment entry: an object with a non-empty string `name`. */
function isNamed(entry: unknown): boolean {
  const name = (entry as { name?: unknown } | null)?.name;
  return typeof name === 'string' && name.length > 0;
}

/** The SESSION_POD_TEMPLATE keys whose values are lists (the others are objects). */
const LIST_KEYS = new Set(['imagePullSecrets', 'tolerations', 'extraEnv']);

/** SESSION_POD_TEMPLATE: JSON of the pod settings every workload of the release shares. */
function sessionPodTemplate(raw: string | undefined, problems: string[]): SessionPodTemplate | undefined {
  if (!raw?.trim()) return undefined;
  const expected = `SESSION_POD_TEMPLATE: must be a JSON object with any of ${SESSION_POD_TEMPLATE_KEYS.join(', ')}`;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    problems.push(expected);
    return undefined;
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
    problems.push(expected);
    return undefined;
  }
  const unknown = Object.keys(parsed).filter((k) => !(SESSION_POD_TEMPLATE_KEYS as readonly string[]).includes(k));
  if (unknown.length) problems.push(`${expected} (not ${unknown.join(', ')})`);
  // Lists where the pod spec has lists, objects elsewhere: a wrong shape fails here, not in every
  // reconcile. A null (Helm's `--set key=null`) is an empty one: none, as the chart's other pods
  // render it (no security context at all, not the session's default).
  const template: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(parsed)) {
    const list = LIST_KEYS.has(key);
    template[key] = value ?? (list ? [] : {});
    const fits = list ? Array.isArray(template[key]) : typeof template[key] === 'object' && !Array.isArray(template[key]);
    if (!fits) problems.push(`SESSION_POD_TEMPLATE: ${key} must be ${list ? 'a list' : 'an object'}`);
  }
  const env = Array.isArray(template.extraEnv) ? (template.extraEnv as unknown[]) : [];
  if (!env.every(isNamed)) problems.push('SESSION_POD_TEMPLATE: every extraEnv entry must be an object with a name');
  return template as SessionPodTemplate;
}

function readIfPresent(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}
