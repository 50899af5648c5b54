// Minimal JSON schemas of the Kubernetes kinds the chart renders, written from the Kubernetes
// API reference (no network here to fetch the official ones). They are strict where mistakes
// hide — unknown fields in metadata, pod specs, containers and probes are errors — and check
// the required fields and value shapes the API server would reject.

type Schema = Record<string, unknown>;

const str = { type: 'string' };
const int = { type: 'integer' };
const bool = { type: 'boolean' };
const stringMap = { type: 'object', additionalProperties: str };
const dnsLabel = { type: 'string', maxLength: 63, pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$' };
const dnsSubdomain = { type: 'string', maxLength: 253, pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$' };
const intOrString = { type: ['integer', 'string'] };
const quantity = { type: ['string', 'number'], pattern: '^[0-9.]+(m|Ki|Mi|Gi|Ti|k|M|G|T)?$' };

const objectMeta = {
  type: 'object',
  additionalProperties: false,
  required: ['name'],
  properties: {
    name: dnsSubdomain,
    namespace: dnsLabel,
    labels: { type: 'object', additionalProperties: { type: 'string', maxLength: 63, pattern: '^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$' } },
    annotations: stringMap,
    finalizers: { type: 'array', items: str },
    ownerReferences: { type: 'array', items: { type: 'object', additionalProperties: false, required: ['apiVersion', 'kind', 'name', 'uid'], properties: { apiVersion: str, kind: str, name: str, uid: str, controller: bool, blockOwnerDeletion: bool } } },
  },
};

const templateMeta = { ...objectMeta, required: [] };

const labelSelector = {
  type: 'object',
  additionalProperties: false,
  properties: {
    matchLabels: stringMap,
    matchExpressions: {
      type: 'array',
      items: { type: 'object', additionalProperties: false, required: ['key', 'operator'], properties: { key: str, operator: { enum: ['In', 'NotIn', 'Exists', 'DoesNotExist'] }, values: { type: 'array', items: str } } },
    },
  },
};

const resources = {
  type: 'object',
  additionalProperties: false,
  properties: { requests: { type: 'object', additionalProperties: quantity }, limits: { type: 'object', additionalProperties: quantity } },
};

const probe = {
  type: 'object',
  additionalProperties: false,
  properties: {
    httpGet: { type: 'object', additionalProperties: false, required: ['port'], properties: { path: str, port: intOrString, scheme: { enum: ['HTTP', 'HTTPS'] } } },
    exec: { type: 'object', additionalProperties: false, properties: { command: { type: 'array', items: str } } },
    tcpSocket: { type: 'object', additionalProperties: false, required: ['port'], properties: { port: intOrString } },
    initialDelaySeconds: int, periodSeconds: int, timeoutSeconds: int, failureThreshold: int, successThreshold: int,
  },
};

const envVar = {
  type: 'object',
  additionalProperties: false,
  required: ['name'],
  properties: {
    name: { type: 'string', minLength: 1 },
    value: str,
    valueFrom: {
      type: 'object',
      additionalProperties: false,
      properties: {
        fieldRef: { type: 'object', additionalProperties: false, required: ['fieldPath'], properties: { fieldPath: str, apiVersion: str } },
        secretKeyRef: { type: 'object', required: ['key'], properties: { name: str, key: str } },
        configMapKeyRef: { type: 'object', required: ['key'], properties: { name: str, key: str } },
      },
    },
  },
};

const securityContext = {
  type: 'object',
  additionalProperties: false,
  properties: {
    allowPrivilegeEscalation: bool, readOnlyRootFilesystem: bool, runAsNonRoot: bool, runAsUser: int, runAsGroup: int, privileged: bool,
    capabilities: { type: 'object', additionalProperties: false, properties: { drop: { type: 'array', items: str }, add: { type: 'array', items: str } } },
    seccompProfile: { type: 'object', additionalProperties: false, required: ['type'], properties: { type: { enum: ['RuntimeDefault', 'Localhost', 'Unconfined'] } } },
  },
};

const container = {
  type: 'object',
  additionalProperties: false,
  required: ['name', 'image'],
  properties: {
    name: dnsLabel,
    image: { type: 'string', minLength: 1 },
    imagePullPolicy: { enum: ['Always', 'IfNotPresent', 'Never'] },
    command: { type: 'array', items: str },
    args: { type: 'array', items: str },
    env: { type: 'array', items: envVar },
    envFrom: {
      type: 'array',
      items: { type: 'object', additionalProperties: false, properties: { configMapRef: { type: 'object', required: ['name'] }, secretRef: { type: 'object', required: ['name'] }, prefix: str } },
    },
    ports: {
      type: 'array',
      items: { type: 'object', additionalProperties: false, required: ['containerPort'], properties: { name: { type: 'string', maxLength: 15 }, containerPort: { type: 'integer', minimum: 1, maximum: 65535 }, protocol: { enum: ['TCP', 'UDP', 'SCTP'] } } },
    },
    livenessProbe: probe, readinessProbe: probe, startupProbe: probe,
    resources,
    securityContext,
    volumeMounts: { type: 'array', items: { type: 'object', additionalProperties: false, required: ['name', 'mountPath'], properties: { name: str, mountPath: str, readOnly: bool, subPath: str } } },
  },
};

const podSecurityContext = {
  type: 'object',
  additionalProperties: false,
  properties: { runAsNonRoot: bool, runAsUser: int, runAsGroup: int, fsGroup: int, seccompProfile: securityContext.properties.seccompProfile },
};

const podSpec = {
  type: 'object',
  additionalProperties: false,
  required: ['containers'],
  properties: {
    containers: { type: 'array', minItems: 1, items: container },
    initContainers: { type: 'array', items: container },
    serviceAccountName: dnsSubdomain,
    automountServiceAccountToken: bool,
    securityContext: podSecurityContext,
    restartPolicy: { enum: ['Always', 'OnFailure', 'Never'] },
    terminationGracePeriodSeconds: int,
    imagePullSecrets: { type: 'array', items: { type: 'object', required: ['name'] } },
    nodeSelector: stringMap,
    tolerations: { type: 'array' },
    affinity: { type: 'object' },
    volumes: { type: 'array', items: { type: 'object', required: ['name'], properties: { name: dnsLabel, emptyDir: { type: 'object' }, secret: { type: 'object' }, configMap: { type: 'object' }, persistentVolumeClaim: { type: 'object' } }, additionalProperties: false } },
  },
};

const podTemplate = { type: 'object', additionalProperties: false, required: ['spec'], properties: { metadata: templateMeta, spec: podSpec } };

function kind(apiVersion: string, kindName: string, extra: Schema, required: string[] = []): Schema {
  return {
    type: 'object',
    additionalProperties: false,
    required: ['apiVersion', 'kind', 'metadata', ...required],
    properties: { apiVersion: { const: apiVersion }, kind: { const: kindName }, metadata: objectMeta, ...extra },
  };
}

const policyRule = {
  type: 'object',
  additionalProperties: false,
  required: ['verbs'],
  properties: {
    apiGroups: { type: 'array', items: str },
    resources: { type: 'array', items: str },
    resourceNames: { type: 'array', items: str },
    verbs: { type: 'array', minItems: 1, items: { enum: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete', 'deletecollection', '*'] } },
  },
};

export const K8S_SCHEMAS: Record<string, Schema> = {
  'v1/ConfigMap': kind('v1', 'ConfigMap', { data: stringMap }),
  'v1/Secret': kind('v1', 'Secret', { type: str, data: stringMap, stringData: stringMap }),
  'v1/ServiceAccount': kind('v1', 'ServiceAccount', { automountServiceAccountToken: bool }),
  'v1/Service': kind('v1', 'Service', {
    spec: {
      type: 'object',
      additionalProperties: false,
      required: ['ports'],
      properties: {
        type: { enum: ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName'] },
        clusterIP: str,
        selector: stringMap,
        ports: { type: 'array', minItems: 1, items: { type: 'object', additionalProperties: false, required: ['port'], properties: { name: dnsLabel, port: { type: 'integer', minimum: 1, maximum: 65535 }, targetPort: intOrString, protocol: { enum: ['TCP', 'UDP', 'SCTP'] }, nodePort: int } } },
      },
    },
  }, ['spec']),
  'apps/v1/Deployment': kind('apps/v1', 'Deployment', {
    spec: { type: 'object', additionalProperties: false, required: ['selector', 'template'], properties: { replicas: { type: 'integer', minimum: 0 }, selector: labelSelector, template: podTemplate, strategy: { type: 'object' } } },
  }, ['spec']),
  'apps/v1/StatefulSet': kind('apps/v1', 'StatefulSet', {
    spec: {
      type: 'object',
      additionalProperties: false,
      required: ['selector', 'template', 'serviceName'],
      properties: {
        replicas: { type: 'integer', minimum: 0 }, serviceName: str, selector: labelSelector, template: podTemplate,
        volumeClaimTemplates: { type: 'array', items: { type: 'object', required: ['metadata', 'spec'], properties: { metadata: templateMeta, spec: { type: 'object', required: ['accessModes', 'resources'] } } } },
      },
    },
  }, ['spec']),
  'rbac.authorization.k8s.io/v1/Role': kind('rbac.authorization.k8s.io/v1', 'Role', { rules: { type: 'array', items: policyRule } }),
  'rbac.authorization.k8s.io/v1/RoleBinding': kind('rbac.authorization.k8s.io/v1', 'RoleBinding', {
    roleRef: { type: 'object', additionalProperties: false, required: ['apiGroup', 'kind', 'name'], properties: { apiGroup: { const: 'rbac.authorization.k8s.io' }, kind: { enum: ['Role', 'ClusterRole'] }, name: str } },
    subjects: { type: 'array', items: { type: 'object', additionalProperties: false, required: ['kind', 'name'], properties: { kind: { enum: ['ServiceAccount', 'User', 'Group'] }, name: str, namespace: str, apiGroup: str } } },
  }, ['roleRef']),
  'policy/v1/PodDisruptionBudget': kind('policy/v1', 'PodDisruptionBudget', {
    spec: { type: 'object', additionalProperties: false, required: ['selector'], properties: { minAvailable: intOrString, maxUnavailable: intOrString, selector: labelSelector } },
  }, ['spec']),
  'networking.k8s.io/v1/NetworkPolicy': kind('networking.k8s.io/v1', 'NetworkPolicy', {
    spec: {
      type: 'object',
      additionalProperties: false,
      required: ['podSelector'],
      properties: {
        podSelector: labelSelector,
        policyTypes: { type: 'array', items: { enum: ['Ingress', 'Egress'] } },
        ingress: { type: 'array', items: { type: 'object', additionalProperties: false, properties: { from: { type: 'array' }, ports: { type: 'array', items: { type: 'object', additionalProperties: false, properties: { port: intOrString, protocol: { enum: ['TCP', 'UDP', 'SCTP'] } } } } } } },
        egress: { type: 'array' },
      },
    },
  }, ['spec']),
  'monitoring.coreos.com/v1/ServiceMonitor': kind('monitoring.coreos.com/v1', 'ServiceMonitor', {
    spec: {
      type: 'object',
      required: ['selector', 'endpoints'],
      properties: { selector: labelSelector, endpoints: { type: 'array', minItems: 1, items: { type: 'object', additionalProperties: false, properties: { port: str, path: str, interval: { type: 'string', pattern: '^[0-9]+(ms|s|m|h)$' }, scheme: str } } } },
    },
  }, ['spec']),
  'monitoring.coreos.com/v1/PodMonitor': kind('monitoring.coreos.com/v1', 'PodMonitor', {
    spec: {
      type: 'object',
      required: ['selector', 'podMetricsEndpoints'],
      properties: { selector: labelSelector, podMetricsEndpoints: { type: 'array', minItems: 1, items: { type: 'object', additionalProperties: false, properties: { port: str, path: str, interval: { type: 'string', pattern: '^[0-9]+(ms|s|m|h)$' }, scheme: str } } } },
    },
  }, ['spec']),
  'monitoring.coreos.com/v1/PrometheusRule': kind('monitoring.coreos.com/v1', 'PrometheusRule', {
    spec: {
      type: 'object',
      additionalProperties: false,
      required: ['groups'],
      properties: {
        groups: {
          type: 'array',
          minItems: 1,
          items: {
            type: 'object',
            additionalProperties: false,
            required: ['name', 'rules'],
            properties: {
              name: str,
              interval: { type: 'string', pattern: '^[0-9]+(ms|s|m|h)$' },
              rules: {
                type: 'array',
                items: {
                  type: 'object',
                  additionalProperties: false,
                  required: ['expr'],
                  oneOf: [{ required: ['alert'] }, { required: ['record'] }],
                  properties: { alert: str, record: str, expr: { type: 'string', minLength: 1 }, for: { type: 'string', pattern: '^([0-9]+(ms|s|m|h|d|w|y))+$' }, labels: stringMap, annotations: stringMap },
                },
              },
            },
          },
        },
      },
    },
  }, ['spec']),
  'apiextensions.k8s.io/v1/CustomResourceDefinition': kind('apiextensions.k8s.io/v1', 'CustomResourceDefinition', {
    spec: { type: 'object', required: ['group', 'names', 'scope', 'versions'], properties: { group: dnsSubdomain, scope: { enum: ['Namespaced', 'Cluster'] }, names: { type: 'object', required: ['plural', 'kind'] }, versions: { type: 'array', minItems: 1, items: { type: 'object', required: ['name', 'served', 'storage', 'schema'] } } } },
  }, ['spec']),
  'v1/Pod': kind('v1', 'Pod', { spec: podSpec }, ['spec']),
};
