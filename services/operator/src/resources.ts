// The custom resources (crds/*.yaml) as TypeScript types, and the names the operator gives to
// the objects it owns. The names the gateway uses too live in core (kubernetes-names.ts).
import type { V1ObjectMeta } from '@kubernetes/client-node';
import { CRD_GROUP, CRD_VERSION } from '@switchboard/core';

export { CRD_GROUP as GROUP, CRD_VERSION as VERSION, INSTANCES_PLURAL as INSTANCES, ORIGIN_API, ORIGIN_LABEL } from '@switchboard/core';
export const API_VERSION = `${CRD_GROUP}/${CRD_VERSION}`;
export const PROJECTS = 'projects';

/** Blocks deletion of an Instance until its session is stopped and its records are deleted. */
export const SESSION_FINALIZER = 'switchboard.dev/session';
/** Blocks deletion of a Project until its record is deleted. */
export const PROJECT_FINALIZER = 'switchboard.dev/project';

/** Label on every object the operator creates; selects them in its informers. */
export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY = 'switchboard-operator';
export const INSTANCE_LABEL = 'switchboard.dev/instance';
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
