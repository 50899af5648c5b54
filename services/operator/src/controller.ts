// The operator's control loop: informers on Instances, Projects and the session pods feed one
// work queue of keys; workers run the reconcilers. A poller compares the database (where the
// sessions write their state) with the resources, so status follows the session within a poll
// interval, and gives every instance record that has no resource one (the gateway creates them,
// this repairs a create that happened while the Kubernetes API was unavailable).
import { CoreV1Api, CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig, type KubernetesListObject, type V1Pod } from '@kubernetes/client-node';
import type { Logger } from '@switchboard/core';
import { EventRecorder } from './event-recorder.ts';
import { ResilientInformer } from './informer.ts';
import { InstanceReconciler, isAvailable } from './instance-reconciler.ts';
import type { InstanceStore } from './instance-store.ts';
import { describe } from './kube-errors.ts';
import { ProjectReconciler } from './project-reconciler.ts';
import { RolloutBudget, type MaxUnavailable } from './rollout-budget.ts';
import { API_VERSION, GROUP, INSTANCES, INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, ORIGIN_API, ORIGIN_LABEL, PROJECTS, VERSION, type Instance, type Project } from './resources.ts';
import type { SessionPodSettings } from './session-pod.ts';
import { WorkQueue } from './work-queue.ts';

export interface ControllerOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  store: InstanceStore;
  session: SessionPodSettings;
  logger: Logger;
  resyncMs?: number;
  statePollMs?: number;
  /** How long a record may say a session is up while none holds the instance before it is
   *  recorded as lost (default 15 s: a restarting session takes its lock again well within it). */
  sessionLostAfterMs?: number;
  podPollMs?: number;
  /** See InstanceReconcilerDeps.stuckPodAfterMs and nameTakenPollMs. */
  stuckPodAfterMs?: number;
  nameTakenPollMs?: number;
  /** SESSION_ROLLOUT_MAX_UNAVAILABLE (default 10 %); see RolloutBudget. */
  rolloutMaxUnavailable?: MaxUnavailable;
  rolloutPollMs?: number;
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  informerRestartMinMs?: number;
  concurrency?: number;
}

export const FIELD_MANAGER = 'switchboard-operator';

export class Controller {
  private readonly custom: CustomObjectsApi;
  private readonly queue: WorkQueue;
  private readonly instances: ResilientInformer<Instance>;
  private readonly projects: ResilientInformer<Project>;
  private readonly pods: ResilientInformer<V1Pod>;
  private readonly instanceReconciler: InstanceReconciler;
  private readonly projectReconciler: ProjectReconciler;
  private readonly rollout: RolloutBudget;
  private pollTimer?: NodeJS.Timeout;
  /** Instances whose record says a session is up while none holds them, since when. */
  private readonly unheldSince = new Map<string, number>();
  /** The hash of the token this process last read for each instance's Secret. */
  private readonly tokenHashesRead = new Map<string, string>();
  private stopped = false;

  constructor(private readonly o: ControllerOptions) {
    const { kubeConfig, namespace, logger } = o;
    this.custom = kubeConfig.makeApiClient(CustomObjectsApi);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const events = new EventRecorder(core, FIELD_MANAGER, logger);
    this.rollout = new RolloutBudget({
      max: o.rolloutMaxUnavailable ?? { percent: 10 },
      down: () => this.sessionsDown(),
      pods: () => this.pods.list(namespace).length,
      wake: (ids) => ids.forEach((id) => this.queue.add(`instance/${id}`)),
    });
    this.instanceReconciler = new InstanceReconciler({
      custom: this.custom, core, store: o.store, events, session: o.session, pollMs: o.podPollMs, stuckPodAfterMs: o.stuckPodAfterMs, nameTakenPollMs: o.nameTakenPollMs,
      rollout: this.rollout, rolloutPollMs: o.rolloutPollMs, onTokenRead: (id, hash) => this.tokenHashesRead.set(id, hash),
    });
    this.projectReconciler = new ProjectReconciler(this.custom, o.store);
    this.queue = new WorkQueue({
      handler: (key) => this.process(key),
      concurrency: o.concurrency ?? 4,
      baseDelayMs: o.backoffBaseMs ?? 200,
      maxDelayMs: o.backoffMaxMs ?? 60_000,
      onError: (key, err, retryInMs) => logger.warn({ key, retryInMs, err: describe(err) }, 'reconcile failed; retrying'),
    });
    const informer = <T extends { metadata?: { name?: string; namespace?: string; labels?: Record<string, string> } }>(path: string, list: () => Promise<unknown>, onObject: (o: T) => void, labelSelector?: string) =>
      new ResilientInformer<T & object>({
        kubeConfig,
        path,
        list: list as () => Promise<KubernetesListObject<T & object>>,
        labelSelector,
        onObject,
        resyncMs: o.resyncMs,
        restartMinMs: o.informerRestartMinMs,
        onError: (err, restartInMs) => logger.warn({ path, restartInMs, err: describe(err) }, 'watch failed; restarting'),
      });
    const base = `/apis/${GROUP}/${VERSION}/namespaces/${namespace}`;
    this.instances = informer<Instance>(`${base}/${INSTANCES}`, () => this.custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: INSTANCES }), (i) => this.queue.add(`instance/${i.metadata.name}`));
    this.projects = informer<Project>(`${base}/${PROJECTS}`, () => this.custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: PROJECTS }), (p) => this.queue.add(`project/${p.metadata.name}`));
    const selector = `${MANAGED_BY_LABEL}=${MANAGED_BY}`;
    this.pods = informer<V1Pod>(`/api/v1/namespaces/${namespace}/pods`, () => core.listNamespacedPod({ namespace, labelSelector: selector }), (p) => {
      const id = p.metadata?.labels?.[INSTANCE_LABEL];
      if (id) this.queue.add(`instance/${id}`);
      // A pod Ready or gone may free room for outdated ones the rollout budget kept.
      this.rollout.wakeWaiting();
    }, selector);
  }

  async start(): Promise<void> {
    this.stopped = false;
    await Promise.all([this.instances.start(), this.projects.start(), this.pods.start()]);
    if (this.stopped) return; // stopped while listing (leadership lost): start nothing more
    const poll = () => {
      void this.pollDatabase().finally(() => {
        if (this.pollTimer) this.pollTimer = setTimeout(poll, this.o.statePollMs ?? 5000);
      });
    };
    this.pollTimer = setTimeout(poll, this.o.statePollMs ?? 5000);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.pollTimer);
    this.pollTimer = undefined;
    this.queue.stop();
    await Promise.all([this.instances.stop(), this.projects.stop(), this.pods.stop()]);
  }

  /** Instances whose session pod is down now: terminating, ended, or not Ready. */
  private sessionsDown(): Set<string> {
    const down = new Set<string>();
    for (const pod of this.pods.list(this.o.namespace)) {
      const id = pod.metadata?.labels?.[INSTANCE_LABEL];
      if (id && !isAvailable(pod)) down.add(id);
    }
    return down;
  }

  /** Resolves once nothing is queued or being reconciled (tests). */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  private async process(key: string): Promise<number | void> {
    const [kind, name] = key.split('/');
    if (kind === 'instance') return this.instanceReconciler.reconcile(this.o.namespace, name);
    // Instances that name a project whose record was just created link to it now (an Instance
    // applied before its Project would otherwise wait for the next resync). Only then: every
    // status write brings the Project back here, and a big project's instances would follow.
    if (!(await this.projectReconciler.reconcile(this.o.namespace, name))) return;
    for (const instance of this.instances.list(this.o.namespace)) {
      if (instance.spec?.projectRef === name) this.queue.add(`instance/${instance.metadata.name}`);
    }
  }

  /** Queues instances whose recorded state differs from their status, whose recorded `paused`
   *  from their resource's (two API calls that raced can leave the record on the older one, and
   *  no watch event would come), or whose token was renewed (its Secret holds the revoked one);
   *  creates resources for records without one, or deletes the records whose delete had begun. */
  private async pollDatabase(): Promise<void> {
    try {
      if (!this.instances.hasSynced) return;
      const rows = await this.o.store.listStates();
      await this.recordLostSessions(rows).catch((err) => this.o.logger.warn({ err: describe(err) }, 'looking for lost sessions failed'));
      for (const row of rows) {
        const instance = this.instances.get(row.id, this.o.namespace);
        if (!instance) {
          // One resource the API refuses (a quota, an admission policy) must not hold up the rest.
          await (row.deleting ? this.finishDeletion(row.id) : this.createResourceFor(row.id)).catch((err) =>
            this.o.logger.warn({ instanceId: row.id, err: describe(err) }, `could not ${row.deleting ? 'delete the records' : 'create the Instance resource'} of a record`),
          );
          continue;
        }
        const status = instance.status ?? {};
        const state = instance.spec.paused ? 'stopped' : row.state;
        const diverged = row.paused !== Boolean(instance.spec.paused);
        const renewed = this.tokenRenewed(row.id, row.tokenHash);
        if (diverged || renewed || status.state !== state || (status.phone ?? null) !== (row.phone ?? null)) this.queue.add(`instance/${row.id}`);
      }
      const ids = new Set(rows.map((r) => r.id));
      for (const id of this.tokenHashesRead.keys()) if (!ids.has(id) && !this.instances.get(id, this.o.namespace)) this.tokenHashesRead.delete(id);
    } catch (err) {
      this.o.logger.warn({ err: describe(err) }, 'database poll failed');
    }
  }

  /** A token renewed through the API changes no resource, so no watch event says so: the record's
   *  token differs from the one the last reconcile read for its Secret. (An instance this process
   *  has not reconciled yet is queued already: the informer's first sync queues every one.) */
  private tokenRenewed(id: string, tokenHash: string): boolean {
    const lastRead = this.tokenHashesRead.get(id);
    return lastRead !== undefined && lastRead !== tokenHash;
  }

  /** A session process that died without recording it (kill -9, a crash, a lost node) leaves its
   *  record connected: sends would be taken for an instance that cannot send, `disableOfflineQueue`
   *  would not refuse them and no webhook would say so. Recorded as lost once it lasts. */
  private async recordLostSessions(rows: Awaited<ReturnType<InstanceStore['listStates']>>): Promise<void> {
    const unheld = new Set(await this.o.store.withoutLiveSession(rows));
    const now = Date.now();
    for (const id of this.unheldSince.keys()) if (!unheld.has(id)) this.unheldSince.delete(id);
    for (const id of unheld) {
      const since = this.unheldSince.get(id) ?? now;
      this.unheldSince.set(id, since);
      if (now - since < (this.o.sessionLostAfterMs ?? 15_000)) continue;
      this.unheldSince.delete(id);
      if (await this.o.store.recordSessionLost(id)) this.o.logger.warn({ instanceId: id }, 'the session of an instance ended without recording it (killed or crashed); recorded as lost');
    }
  }

  /** The finalizer had begun deleting the instance (its session unlinked from the phone) when its
   *  resource went without it (the finalizer removed by hand): the records go too, once no session
   *  holds the instance, rather than coming back as a resource with an unlinked session. Asked of
   *  the API first: a resource created again meanwhile may not have reached the informer yet (its
   *  reconcile then finishes the delete itself, see ensureRecord). */
  private async finishDeletion(id: string): Promise<void> {
    if (await this.instanceReconciler.exists(this.o.namespace, id)) return;
    if (await this.o.store.delete(id, true)) this.o.logger.info({ instance: id }, 'finished the delete of an instance whose resource was removed before its finalizer finished');
  }

  private async createResourceFor(id: string): Promise<void> {
    const row = await this.o.store.find(id);
    if (!row || row.deleting) return; // gone, or marked since the poll's read: finishDeletion's
    const body = {
      apiVersion: API_VERSION,
      kind: 'Instance',
      metadata: { name: id, namespace: this.o.namespace, labels: { [ORIGIN_LABEL]: ORIGIN_API } },
      spec: { displayName: row.name, paused: row.paused, ...(row.projectId ? { projectRef: row.projectId } : {}) },
    };
    await this.custom.patchNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace: this.o.namespace, plural: INSTANCES, name: id, body, fieldManager: FIELD_MANAGER },
      setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply),
    );
    this.o.logger.info({ instance: id }, 'created the missing Instance resource of a record');
  }
}
