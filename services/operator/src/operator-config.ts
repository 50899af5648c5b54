// Operator settings from the environment (besides the common ones of core's loadConfig).
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { ConfigError } from '@switchboard/core';
import { SESSION_POD_TEMPLATE_KEYS, type SessionPodSettings, type SessionPodTemplate } from './session-pod.ts';

export interface OperatorConfig {
  namespace: string;
  identity: string;
  leaseName: string;
  healthPort: number;
  session: SessionPodSettings;
}

const SERVICE_ACCOUNT_NAMESPACE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';

export function loadOperatorConfig(env: Record<string, string | undefined> = process.env): OperatorConfig {
  const problems: string[] = [];
  const namespace = env.KUBERNETES_NAMESPACE?.trim() || readIfPresent(SERVICE_ACCOUNT_NAMESPACE);
  if (!namespace) problems.push('KUBERNETES_NAMESPACE: required outside a cluster (the namespace whose Instances the operator manages)');
  const image = env.SESSION_IMAGE?.trim();
  if (!image) problems.push('SESSION_IMAGE: required (the Switchboard image the session pods run)');
  const healthPort = Number(env.HEALTH_PORT ?? '8080');
  if (!Number.isInteger(healthPort) || healthPort < 0 || healthPort > 65535) problems.push(`HEALTH_PORT: must be a port number (got "${env.HEALTH_PORT}")`);
  let resources;
  try {
    resources = env.SESSION_RESOURCES?.trim() ? JSON.parse(env.SESSION_RESOURCES) : undefined;
  } catch {
    problems.push('SESSION_RESOURCES: must be JSON such as {"requests":{"cpu":"50m","memory":"128Mi"}}');
  }
  const template = sessionPodTemplate(env.SESSION_POD_TEMPLATE, problems);
  if (problems.length) throw new ConfigError(problems);
  return {
    namespace: namespace!,
    identity: env.POD_NAME?.trim() || hostname(),
    leaseName: env.LEADER_ELECTION_LEASE?.trim() || 'switchboard-operator',
    healthPort,
    session: {
      image: image!,
      imagePullPolicy: env.SESSION_IMAGE_PULL_POLICY?.trim() || undefined,
      envSecretName: env.SESSION_ENV_SECRET?.trim() || undefined,
      envConfigMapName: env.SESSION_ENV_CONFIGMAP?.trim() || undefined,
      configRevision: env.SESSION_CONFIG_REVISION?.trim() || undefined,
      serviceAccountName: env.SESSION_SERVICE_ACCOUNT?.trim() || undefined,
      resources,
      template,
    },
  };
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
