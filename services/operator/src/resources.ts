// The custom resources (crds/*.yaml) as TypeScript types, and the names the operator gives to
// the objects it owns. One place for these names, so the operator, the gateway and the chart agree.
import type { V1ObjectMeta } from '@kubernetes/client-node';

export const GROUP = 'switchboard.dev';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}`;
export const INSTANCES = 'instances';
export const PROJECTS = 'projects';

/** Blocks deletion of an Instance until its session is stopped and its records are deleted. */
export const SESSION_FINALIZER = 'switchboard.dev/session';
/** Blocks deletion of a Project until its record is deleted. */
export const PROJECT_FINALIZER = 'switchboard.dev/project';

/** Label on every object the operator creates; selects them in its informers. */
export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY = 'switchboard-operator';
export const INSTANCE_LABEL = 'switchboard.dev/instance';
/** Set by the gateway on the resources it creates: such an Instance without a database row was
 * deleted through the API and must not be adopted (re-created) by the operator. */
export const ORIGIN_LABEL = 'switchboard.dev/origin';
export const ORIGIN_API = 'api';
/** Pod annotation with the hash of the pod template; a different hash means "recreate". */
export const TEMPLATE_HASH_ANNOTATION = 'switchboard.dev/template-hash';

export type SessionState = 'stopped' | 'starting' | 'awaiting_scan' | 'connected' | 'reconnecting' | 'logged_out';

/** metav1.Condition */
export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  observedGeneration?: number;
  lastTransitionTime: string;
  reason: string;
  message: string;
}

export interface InstanceSpec {
  displayName: string;
  projectRef?: string;
  paused?: boolean;
  resetRequestedAt?: string;
}

export interface InstanceStatus {
  state?: SessionState;
  phone?: string;
  tokenSecretName?: string;
  lastResetAt?: string;
  observedGeneration?: number;
  conditions?: Condition[];
}

export interface Instance {
  apiVersion?: string;
  kind?: string;
  metadata: V1ObjectMeta & { name: string; namespace: string };
  spec: InstanceSpec;
  status?: InstanceStatus;
}

export interface Project {
  apiVersion?: string;
  kind?: string;
  metadata: V1ObjectMeta & { name: string; namespace: string };
  spec: { displayName: string };
  status?: { observedGeneration?: number; conditions?: Condition[] };
}

export function tokenSecretName(instanceId: string): string {
  return `${instanceId}-token`;
}

/** Fixed name: a second pod for the same instance cannot exist while the first one does. */
export function sessionPodName(instanceId: string): string {
  return `session-${instanceId}`;
}
