// Cluster mode: the gateway writes the desired run state of each instance to its Instance
// resource (crds/instances.switchboard.dev.yaml); the operator does the rest. The resource is
// created by server-side apply with field manager `gateway`, then each operation merge-patches
// only its own fields; neither ever overwrites the operator's status. When the Kubernetes API
// cannot be reached the operations fail fast with a 503 problem `kubernetes_unavailable`;
// everything else the gateway does keeps working.
import { readFileSync } from 'node:fs';
import { CustomObjectsApi, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { CRD_GROUP as GROUP, CRD_VERSION as VERSION, INSTANCES_PLURAL as PLURAL, ORIGIN_API, ORIGIN_LABEL, Problem, specStampOf, withDeadline, type SpecStamp } from '@switchboard/core';

export const FIELD_MANAGER = 'gateway';

export interface InstanceDesiredState {
  id: string;
  name: string;
  projectId: string | null;
  paused: boolean;
}

/** The fields one operation changes (rename: name and/or project; connect, disconnect: paused). */
export type InstanceChanges = Partial<Omit<InstanceDesiredState, 'id'>>;

export interface InstanceResourcesOptions {
  /** Give up on a call after this long (an unreachable API server may not refuse, just hang). */
  timeoutMs?: number;
}

export class KubernetesInstanceResources {
  private readonly timeoutMs: number;

  constructor(
    private readonly api: CustomObjectsApi,
    readonly namespace: string,
    options: InstanceResourcesOptions = {},
  ) {
    this.timeoutMs = options.timeoutMs ?? 5000;
  }

  /** In-cluster service account, or KUBECONFIG; namespace from KUBERNETES_NAMESPACE. */
  static fromEnvironment(env: Record<string, string | undefined> = process.env, options?: InstanceResourcesOptions): KubernetesInstanceResources {
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromDefault();
    const namespace =
      env.KUBERNETES_NAMESPACE?.trim() ||
      readIfPresent('/var/run/secrets/kubernetes.io/serviceaccount/namespace') ||
      kubeConfig.getContextObject(kubeConfig.getCurrentContext())?.namespace ||
      'default';
    return new KubernetesInstanceResources(kubeConfig.makeApiClient(CustomObjectsApi), namespace, options);
  }

  /** Creates the Instance, or sets every field the gateway owns (on create). */
  async apply(instance: InstanceDesiredState): Promise<void> {
    const body = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'Instance',
      metadata: { name: instance.id, namespace: this.namespace, labels: { [ORIGIN_LABEL]: ORIGIN_API } },
      spec: { displayName: instance.name, paused: instance.paused, ...(instance.projectId ? { projectRef: instance.projectId } : {}) },
    };
    // force: the gateway is the authority for these fields even if the operator applied them first.
    await this.call(() =>
      this.api.patchNamespacedCustomObject(
        { group: GROUP, version: VERSION, namespace: this.namespace, plural: PLURAL, name: instance.id, body, fieldManager: FIELD_MANAGER, force: true },
        setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply),
      ),
    );
  }

  /**
   * Changes only the fields an operation changed. A whole apply would also write the other fields
   * as the request read them, so a rename racing a disconnect could set `paused` back to false,
   * and the operator would follow the resource. A resource that does not exist is not made here:
   * 503 until the operator, which makes one for every instance row without, has made it (a
   * request racing the instance's delete would otherwise bring the resource back for a moment).
   */
  async update(id: string, changes: InstanceChanges): Promise<SpecStamp | undefined> {
    const spec: Record<string, unknown> = {};
    if (changes.name !== undefined) spec.displayName = changes.name;
    if (changes.projectId !== undefined) spec.projectRef = changes.projectId; // null removes it
    if (changes.paused !== undefined) spec.paused = changes.paused;
    if (!Object.keys(spec).length) return undefined;
    const patched = await this.mergePatch(id, { spec });
    if (!patched) throw notYetCreated();
    return specStampOf(patched);
  }

  /** Asks the operator to erase the pairing and restart the session (spec.resetRequestedAt = now). */
  async requestReset(id: string, now = new Date()): Promise<void> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const current = (await this.call(() => this.api.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: this.namespace, plural: PLURAL, name: id }), [404])) as
        | { metadata?: { resourceVersion?: string }; spec?: { resetRequestedAt?: string } }
        | undefined;
      if (!current) throw notYetCreated();
      // Later than the last request even when a clock ahead of ours stamped it (the CRD refuses a
      // step back); milliseconds kept, so a second reset within a second is still a new request.
      const previous = Date.parse(current.spec?.resetRequestedAt ?? '') || 0;
      const at = new Date(Math.max(now.getTime(), previous + 1));
      // The resourceVersion read: a concurrent request gets 409 and reads again.
      const body = { metadata: { resourceVersion: current.metadata?.resourceVersion }, spec: { resetRequestedAt: at.toISOString() } };
      if (await this.mergePatch(id, body, [404, 409])) return;
    }
    throw unavailable();
  }

  /** Deletes the Instance; the operator stops the session and removes the records. Idempotent. */
  async delete(id: string): Promise<void> {
    await this.call(() => this.api.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: this.namespace, plural: PLURAL, name: id }), [404]);
  }

  /** A merge patch, not an apply: an apply of some fields would drop the others the gateway owns
   *  (`null` removes a field). The patched resource; undefined when it does not exist. */
  private mergePatch(id: string, body: { metadata?: { resourceVersion?: string }; spec: Record<string, unknown> }, ignore = [404]): Promise<unknown> {
    return this.call(
      () =>
        this.api.patchNamespacedCustomObject(
          { group: GROUP, version: VERSION, namespace: this.namespace, plural: PLURAL, name: id, body, fieldManager: FIELD_MANAGER },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        ),
      ignore,
    );
  }

  /** The call's answer; undefined when it failed with one of the `ignore` statuses. */
  private async call<T>(op: () => Promise<T>, ignore: number[] = []): Promise<T | undefined> {
    try {
      return await withDeadline(op(), this.timeoutMs, unavailable);
    } catch (err) {
      if (err instanceof Problem) throw err;
      const status = statusOf(err);
      if (status !== undefined && ignore.includes(status)) return undefined;
      if (status === undefined || status === 429 || status >= 500) throw unavailable();
      if (status === 404) throw notYetCreated();
      throw new Problem(500, 'kubernetes_error', `The Kubernetes API refused the change (HTTP ${status}).`);
    }
  }
}

function unavailable(): Problem {
  return new Problem(503, 'kubernetes_unavailable', 'The Kubernetes API is not reachable right now; retry shortly.', undefined, { 'Retry-After': '5' });
}

function notYetCreated(): Problem {
  return new Problem(503, 'kubernetes_unavailable', 'The instance resource does not exist in the cluster yet; retry shortly.', undefined, { 'Retry-After': '5' });
}

function statusOf(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

function readIfPresent(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}
