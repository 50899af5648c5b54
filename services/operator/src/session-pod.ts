// The session workload of one instance: a single pod with a fixed name, created only when no pod
// of that name exists, so there is never more than one session pod per instance (the session's
// own owner lock guards the rest). The pod carries a hash of its template and of the settings it is
// given: when the image or the settings change (an upgrade), the operator deletes the pod and
// creates the new one once it is gone.
import { createHash } from 'node:crypto';
import type { V1Affinity, V1EnvVar, V1LocalObjectReference, V1ObjectMeta, V1Pod, V1PodSecurityContext, V1ResourceRequirements, V1SecurityContext, V1Toleration } from '@kubernetes/client-node';
import { SESSION_STOP_TIMEOUT_MS } from '@switchboard/core';
import { API_VERSION, INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, TEMPLATE_HASH_ANNOTATION, sessionPodName, type Instance } from './resources.ts';

export interface SessionPodSettings {
  image: string;
  imagePullPolicy?: string;
  /** Secret with DATABASE_URL, NATS_URL and ENCRYPTION_KEY for the session process (its other
   *  keys, such as ADMIN_API_KEY, are not passed on). */
  envSecretName?: string;
  /** ConfigMap with the non-secret settings (NETWORK_DRIVER, LOG_LEVEL…). */
  envConfigMapName?: string;
  /** A digest of what that ConfigMap and the chart's Secret hold (the chart's checksum/config):
   *  the pod names them only, so without it a changed setting would never reach a running session. */
  configRevision?: string;
  serviceAccountName?: string;
  resources?: V1ResourceRequirements;
  /** Arguments of the image's entrypoint (tini) that start the session process. */
  args?: string[];
  /** What the cluster asks of every pod of the release (the chart's values of the same names). */
  template?: SessionPodTemplate;
}

/** Pod settings a cluster decides for all its workloads: a private registry's pull secret, where
 *  pods may run, and under which user. */
export interface SessionPodTemplate {
  imagePullSecrets?: V1LocalObjectReference[];
  nodeSelector?: Record<string, string>;
  tolerations?: V1Toleration[];
  affinity?: V1Affinity;
  podSecurityContext?: V1PodSecurityContext;
  containerSecurityContext?: V1SecurityContext;
  /** The chart's `session.extraEnv` (OTEL_*, NODE_EXTRA_CA_CERTS, …), after the session's own. */
  extraEnv?: V1EnvVar[];
}

export const SESSION_POD_TEMPLATE_KEYS = ['imagePullSecrets', 'nodeSelector', 'tolerations', 'affinity', 'podSecurityContext', 'containerSecurityContext', 'extraEnv'] as const;

// Arguments, not a command: the image's entrypoint (tini) stays PID 1, reaping what the session's
// children leave and passing on signals. dist/ is built into the image (scripts/build.ts).
const DEFAULT_ARGS = ['node', 'dist/session.mjs'];
/** The session's HEALTH_PORT: /health (liveness) and /ready (database and bus). */
const HEALTH_PORT = 8080;
/** The Secret's keys a session process reads. */
const SESSION_SECRET_KEYS = ['DATABASE_URL', 'NATS_URL', 'ENCRYPTION_KEY'];
const probe = (path: string, periodSeconds: number, failureThreshold: number) => ({
  httpGet: { path, port: 'http' },
  periodSeconds,
  timeoutSeconds: 3,
  failureThreshold,
});

export function sessionPod(instance: Instance, settings: SessionPodSettings): V1Pod {
  const id = instance.metadata.name;
  const template = settings.template ?? {};
  const spec: V1Pod['spec'] = {
    restartPolicy: 'Always',
    serviceAccountName: settings.serviceAccountName,
    automountServiceAccountToken: false,
    // The session's own stop time-out (what the network handed over is recorded first), and a margin.
    terminationGracePeriodSeconds: SESSION_STOP_TIMEOUT_MS / 1000 + 10,
    imagePullSecrets: nonEmpty(template.imagePullSecrets),
    nodeSelector: nonEmpty(template.nodeSelector),
    affinity: nonEmpty(template.affinity),
    // Evicted 30 s after its node stops answering (the default is 5 minutes): a session is one
    // WhatsApp account offline, and its owner lock keeps a replacement from connecting twice.
    tolerations: [
      ...['node.kubernetes.io/unreachable', 'node.kubernetes.io/not-ready'].map((key) => ({ key, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 30 })),
      ...(template.tolerations ?? []),
    ],
    securityContext: template.podSecurityContext ?? { runAsNonRoot: true, runAsUser: 10001, fsGroup: 10001, seccompProfile: { type: 'RuntimeDefault' } },
    containers: [
      {
        name: 'session',
        image: settings.image,
        imagePullPolicy: settings.imagePullPolicy,
        args: settings.args ?? DEFAULT_ARGS,
        env: [
          { name: 'INSTANCE_ID', value: id },
          { name: 'HEALTH_PORT', value: String(HEALTH_PORT) },
          // Only the keys a session uses: a pod that parses media from strangers must not hold the
          // administrative key.
          ...(settings.envSecretName ? SESSION_SECRET_KEYS.map((key) => ({ name: key, valueFrom: { secretKeyRef: { name: settings.envSecretName!, key } } })) : []),
          ...(template.extraEnv ?? []),
        ],
        ports: [{ name: 'http', containerPort: HEALTH_PORT }],
        // A wedged session is restarted; a slow start (database, bus, lock) gets two minutes.
        startupProbe: probe('/health', 2, 60),
        livenessProbe: probe('/health', 10, 3),
        readinessProbe: probe('/ready', 10, 2),
        envFrom: [
          ...(settings.envConfigMapName ? [{ configMapRef: { name: settings.envConfigMapName } }] : []),
        ],
        resources: settings.resources ?? { requests: { cpu: '50m', memory: '128Mi' }, limits: { memory: '512Mi' } },
        securityContext: template.containerSecurityContext ?? { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
        volumeMounts: [{ name: 'tmp', mountPath: '/tmp' }],
      },
    ],
    volumes: [{ name: 'tmp', emptyDir: {} }],
  };
  const hash = createHash('sha256').update(JSON.stringify(spec)).update(settings.configRevision ?? '').digest('hex').slice(0, 16);
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: sessionPodName(id),
      namespace: instance.metadata.namespace,
      labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [INSTANCE_LABEL]: id, 'app.kubernetes.io/name': 'switchboard', 'app.kubernetes.io/component': 'session' },
      annotations: { [TEMPLATE_HASH_ANNOTATION]: hash },
      ownerReferences: [ownerReference(instance)],
    },
    spec,
  };
}

/** An empty list or object means "none" (the chart's defaults): left out of the pod and its hash.
 *  The security contexts are not passed through this: an empty one is a choice (OpenShift assigns
 *  the user itself). */
function nonEmpty<T extends object>(value: T | undefined): T | undefined {
  return value && Object.keys(value).length ? value : undefined;
}

/** Whether the object is one the operator made for this Instance (its controlling owner is an
 *  Instance of that name). A pod or Secret of the same name made by someone else is never
 *  replaced or deleted. The uid is not compared: one an earlier Instance of the same name owned
 *  is this instance's too, and is taken over (isOwnedBy). */
function isControlledBy(object: { metadata?: V1ObjectMeta }, instance: Instance): boolean {
  return (object.metadata?.ownerReferences ?? []).some((r) => r.controller && r.apiVersion === API_VERSION && r.kind === 'Instance' && r.name === instance.metadata.name);
}

/** Whether this very Instance (its uid) controls the object. One controlled by an earlier Instance
 *  of the same name is garbage the collector deletes soon after, unless it is given to this one. */
export function isOwnedBy(object: { metadata?: V1ObjectMeta }, instance: Instance): boolean {
  return (object.metadata?.ownerReferences ?? []).some((r) => r.controller && r.uid === instance.metadata.uid);
}

/** Whether the operator made the object for an Instance of this name: controlled by it, or left
 *  without a controller by an orphaning delete (`kubectl delete --cascade=orphan` strips the owner
 *  reference) while still labelled as the operator's for that instance. Such a session pod must
 *  still be stopped before the records go, and such a token Secret is taken over by a new
 *  Instance of the same name. */
export function isMadeFor(object: { metadata?: V1ObjectMeta }, instance: Instance): boolean {
  if (isControlledBy(object, instance)) return true;
  const labels = object.metadata?.labels ?? {};
  const uncontrolled = !(object.metadata?.ownerReferences ?? []).some((r) => r.controller);
  return uncontrolled && labels[MANAGED_BY_LABEL] === MANAGED_BY && labels[INSTANCE_LABEL] === instance.metadata.name;
}

/** Makes the Instance the controlling owner: deleting it garbage-collects the object. */
export function ownerReference(instance: Instance) {
  return {
    apiVersion: API_VERSION,
    kind: 'Instance',
    name: instance.metadata.name,
    uid: instance.metadata.uid!,
    controller: true,
    blockOwnerDeletion: true,
  };
}
