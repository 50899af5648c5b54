// Reconciles one Instance: level-triggered (it looks at the whole current state, never at what
// changed) and idempotent (running it twice in a row changes nothing the second time).
//
//   deleting? → stop the session pod, delete the records, remove the finalizer
//   otherwise → finalizer · database row (adopt kubectl-created instances) · token Secret ·
//               reset (pod gone → erase pairing → lastResetAt) · pod up or down per `paused` ·
//               status mirrored from the session's state, with Ready/Connected conditions.
// A pod or Secret that has the name of ours but that the operator did not make for this Instance
// is never replaced or deleted: the Instance says so (Ready False, PodNameTaken; a Warning event)
// and waits for someone to remove it.
import { PatchStrategy, setHeaderOptions, type CoreV1Api, type CustomObjectsApi, type V1Pod, type V1Secret } from '@kubernetes/client-node';
import { isNewerSpec, specStampOf } from '@switchboard/core';
import { sameStatus, setCondition } from './conditions.ts';
import type { EventRecorder } from './event-recorder.ts';
import type { InstanceRow, InstanceStore } from './instance-store.ts';
import { isStatus } from './kube-errors.ts';
import {
  GROUP, INSTANCES, INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL, ORIGIN_API, ORIGIN_LABEL, SESSION_FINALIZER, TEMPLATE_HASH_ANNOTATION, VERSION,
  sessionPodName, tokenSecretName, type Instance, type InstanceStatus,
} from './resources.ts';
import type { OutdatedPod, RolloutBudget } from './rollout-budget.ts';
import { isMadeFor, isOwnedBy, ownerReference, sessionPod, type SessionPodSettings } from './session-pod.ts';

export interface InstanceReconcilerDeps {
  custom: CustomObjectsApi;
  core: CoreV1Api;
  store: InstanceStore;
  events: EventRecorder;
  session: SessionPodSettings;
  /** How soon to look again while waiting for a pod to terminate (pod watch events usually come first). */
  pollMs?: number;
  /** How long past its grace period a terminating pod may stay before it counts as stuck (60 s). */
  stuckPodAfterMs?: number;
  /** How soon to look again while a foreign pod or Secret has the name of ours (30 s): the pod
   *  watch sees only the operator's own pods and there is no Secret watch, so its removal brings
   *  no event. */
  nameTakenPollMs?: number;
  /** Told the hash of the token each reconcile read for an instance's Secret (a reconcile that
   *  fails after it is retried): a record holding another token needs another reconcile. */
  onTokenRead?: (instanceId: string, tokenHash: string) => void;
  /** How many outdated session pods may be down at once; without one, each is replaced at once. */
  rollout?: RolloutBudget;
  /** How soon to look again at an outdated pod the rollout budget kept (60 s): a pod that becomes
   *  Ready or goes away wakes the waiting ones first. */
  rolloutPollMs?: number;
}

/** `starting`: the pod of the current template, not Ready (scheduling, pulling its image,
 *  crash-looping, or failing its readiness probe); `running`: that pod, Ready; `foreign`: a pod
 *  with the session pod's name that the operator did not make for this Instance. */
type PodState = 'absent' | 'terminating' | 'starting' | 'running' | 'outdated' | 'foreign';
/** What podState saw besides the state: why the pod is not Ready (undefined: it is), and for an
 *  outdated pod whether it ended (Failed, Succeeded) and will never be again. */
interface PodSeen {
  state: PodState;
  notReady?: string;
  ended?: boolean;
}

export class InstanceReconciler {
  /** When this operator first saw each session pod terminating, on its own monotonic clock (the
   *  pod's deletionTimestamp is on the API server's, which may be skewed from ours). */
  private readonly terminatingSince = new Map<string, { uid: string; at: number }>();
  /** Instances (uid) whose token Secret name was found taken and said so with an event. */
  private readonly secretNameTakenWarned = new Set<string>();

  constructor(private readonly d: InstanceReconcilerDeps) {}

  /**
   * A reachable kubelet removes a deleted pod within its grace period (SIGKILL at the end of it).
   * One still there a minute after that is on a node that no longer answers, and no kubelet will
   * ever confirm: waiting would keep the instance offline until someone deletes the node. The
   * session's owner lock (its holder gives up when cut off from the database, and PostgreSQL
   * releases it once the holder stops answering its probes) keeps a replacement from connecting
   * while the old session still does.
   */
  private isStuck(pod: V1Pod): boolean {
    const name = pod.metadata!.name!;
    const uid = pod.metadata!.uid ?? '';
    let seen = this.terminatingSince.get(name);
    if (seen?.uid !== uid) this.terminatingSince.set(name, (seen = { uid, at: performance.now() }));
    const graceMs = (pod.metadata!.deletionGracePeriodSeconds ?? 30) * 1000;
    return performance.now() - seen.at > graceMs + (this.d.stuckPodAfterMs ?? 60_000);
  }

  /** Returns a delay when the instance must be looked at again (waiting for a pod to go away). */
  async reconcile(namespace: string, name: string): Promise<number | void> {
    let instance = await this.read(namespace, name);
    if (!instance) return; // gone; its pod and Secret are garbage-collected through their owner reference
    if (instance.metadata.deletionTimestamp) return this.finalize(instance);
    if (!(instance.metadata.finalizers ?? []).includes(SESSION_FINALIZER)) instance = await this.addFinalizer(instance);

    const row = await this.ensureRecord(instance);
    if (row === 'deleted') return; // deleted through the API: the resource is being deleted too
    // The API changed the resource after it was read here: its watch event brings the new spec,
    // and nothing is started or stopped from the old one meanwhile.
    if (row === 'overtaken') return this.d.pollMs ?? 1000;
    if (row === 'held') {
      // The earlier resource's session still runs (a pod nobody stops: an etcd restore brought it
      // back, or its delete orphaned it): stopped now, it unlinks, as that delete had asked.
      await this.stopPod(instance, (await this.podState(instance)).state);
      return this.d.pollMs ?? 1000;
    }
    const secretNameTaken = !(await this.ensureTokenSecret(instance));

    const observed = await this.podState(instance);
    let pod = observed.state;
    let waiting = false;
    if (resetPending(instance)) {
      if (pod !== 'absent' && pod !== 'foreign') {
        // The session stopping for this logs out first, as the gateway's reset does.
        await this.d.store.markUnlinkRequested(name, 'reset');
        await this.stopPod(instance, pod);
        waiting = true;
      } else if (!(await this.d.store.resetSession(name))) {
        waiting = true; // its pod is gone, but its session still runs somewhere (see removeStuckPod)
      } else {
        // Recorded before a new pod starts: were this write lost after the pod started, the retry
        // would stop the fresh session and erase the pairing the user may be scanning by then.
        const done = { ...(instance.status ?? {}), lastResetAt: instance.spec.resetRequestedAt };
        const afterReset = (await this.d.store.find(name)) ?? row;
        instance = await this.writeStatus(instance, this.statusFor(instance, done, afterReset, pod, false, { secretNameTaken }));
        await this.d.events.record(instance, 'Normal', 'SessionReset', 'Pairing erased; the session starts fresh and needs a new scan.');
      }
    }
    const status: InstanceStatus = { ...(instance.status ?? {}) };
    const wantRunning = !instance.spec.paused && !waiting;
    let waitingForRollout = false;
    if (wantRunning && pod === 'absent') {
      pod = await this.startPod(instance);
    } else if (wantRunning && pod === 'outdated') {
      const serving: OutdatedPod = observed.ended ? 'ended' : observed.notReady === undefined ? 'up' : 'down';
      waitingForRollout = this.d.rollout?.tryReplace(name, serving) === false;
      if (!waitingForRollout) {
        await this.stopPod(instance, pod);
        waiting = true;
      }
    } else if (!wantRunning && (pod === 'starting' || pod === 'running' || pod === 'outdated')) {
      await this.stopPod(instance, pod);
    }
    if (pod === 'terminating') waiting = true;
    if (pod === 'running' || !wantRunning) this.d.rollout?.settled(name);
    if (wantRunning && pod === 'foreign' && readyReason(instance) !== POD_NAME_TAKEN) {
      await this.d.events.record(instance, 'Warning', POD_NAME_TAKEN, `Pod ${sessionPodName(name)} exists but was not made by the operator for this Instance; it is left alone and the session starts once it is deleted or renamed.`);
    }

    const fresh = (await this.d.store.find(name)) ?? row;
    await this.writeStatus(instance, this.statusFor(instance, status, fresh, pod, waiting, { notReady: observed.notReady, secretNameTaken, waitingForRollout }));
    if (waiting) return this.d.pollMs ?? 1000;
    if ((wantRunning && pod === 'foreign') || secretNameTaken) return this.d.nameTakenPollMs ?? 30_000;
    if (waitingForRollout) return this.d.rolloutPollMs ?? 60_000;
  }

  async exists(namespace: string, name: string): Promise<boolean> {
    return (await this.read(namespace, name)) !== undefined;
  }

  private async read(namespace: string, name: string): Promise<Instance | undefined> {
    try {
      return (await this.d.custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: INSTANCES, name })) as Instance;
    } catch (err) {
      if (isStatus(err, 404)) return undefined;
      throw err;
    }
  }

  private async replace(instance: Instance): Promise<Instance> {
    const { namespace, name } = instance.metadata;
    return (await this.d.custom.replaceNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: INSTANCES, name, body: instance })) as Instance;
  }

  private async addFinalizer(instance: Instance): Promise<Instance> {
    const next = structuredClone(instance);
    next.metadata.finalizers = [...(next.metadata.finalizers ?? []), SESSION_FINALIZER];
    return this.replace(next); // carries resourceVersion: a concurrent change → 409 → retried with backoff
  }

  /** Finds the instance's row, in line with the resource; a kubectl-created instance is adopted
   *  (row created). 'overtaken' when the record follows a newer spec than this read of the resource;
   *  'held' while an earlier resource's begun delete waits for a session that still holds it. */
  private async ensureRecord(instance: Instance): Promise<InstanceRow | 'deleted' | 'overtaken' | 'held'> {
    const id = instance.metadata.name;
    const desired = { id, name: instance.spec.displayName, projectId: instance.spec.projectRef ?? null, paused: Boolean(instance.spec.paused), stamp: specStampOf(instance) };
    let row = await this.d.store.find(id);
    // Left by an earlier resource whose delete had begun (its finalizer removed by hand): that
    // delete is finished first (its session has unlinked the phone, and the record's marks would
    // unlink the next session too); this resource then starts as a new one.
    if (row?.deleting) {
      if (!(await this.d.store.delete(id, true))) return 'held';
      row = await this.d.store.find(id); // none, unless another path adopted one meanwhile
      await this.d.events.record(instance, 'Warning', 'EarlierDeleteFinished', 'The records of an earlier resource of this name, whose delete had begun, were deleted; this one starts as a new instance.');
    }
    if (row) {
      // Checked even when the row matches this read: the API may have changed the resource and
      // stamped the record without having written its new values yet.
      if (isNewerSpec(row.specStamp, desired.stamp)) return this.overtaken(instance, row);
      if (!(await this.d.store.applyDesired(desired, row))) return 'overtaken';
      return (await this.d.store.find(id)) ?? row;
    }
    if (instance.metadata.labels?.[ORIGIN_LABEL] === ORIGIN_API) {
      // Created through the API and its record is gone: it was deleted through the API. Never resurrect it.
      const { namespace, name } = instance.metadata;
      await this.d.custom.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: INSTANCES, name });
      return 'deleted';
    }
    const { created } = await this.d.store.adopt(desired);
    if (created) await this.d.events.record(instance, 'Normal', 'Adopted', 'Instance record and API token created for this resource.');
    return (await this.d.store.find(id)) ?? 'deleted';
  }

  /**
   * The record follows a later spec than this read: an API call changed the resource since, and
   * the next reconcile reads that. Unless the resource went back in time (restored from an etcd
   * backup): a read made now, after the stamp was written, would then still be older, and the
   * stamp could never be reached, so it is dropped and the resource followed as it is.
   */
  private async overtaken(instance: Instance, row: InstanceRow): Promise<'overtaken'> {
    const now = await this.read(instance.metadata.namespace, instance.metadata.name);
    if (now && isNewerSpec(row.specStamp, specStampOf(now))) {
      await this.d.store.forgetSpecStamp(row.id);
      const message = `The record followed generation ${row.specStamp!.generation} of this resource, which is at ${now.metadata.generation} (restored from a backup?); it follows the resource as it is now.`;
      await this.d.events.record(now, 'Warning', 'SpecGenerationWentBack', message);
    }
    return 'overtaken';
  }

  /** False when a Secret of that name exists that the operator did not make for this Instance:
   *  it is left as it is (never overwritten with the token), and the status names no Secret. */
  private async ensureTokenSecret(instance: Instance): Promise<boolean> {
    const id = instance.metadata.name;
    const namespace = instance.metadata.namespace;
    const recorded = await this.d.store.token(id);
    if (!recorded) return true;
    this.d.onTokenRead?.(id, recorded.hash);
    const data = { apiToken: Buffer.from(recorded.token).toString('base64'), instanceId: Buffer.from(id).toString('base64') };
    let existing: V1Secret | undefined;
    try {
      existing = await this.d.core.readNamespacedSecret({ name: tokenSecretName(id), namespace });
    } catch (err) {
      if (!isStatus(err, 404)) throw err;
    }
    if (existing && !isMadeFor(existing, instance)) {
      await this.warnSecretNameTaken(instance);
      return false;
    }
    this.secretNameTakenWarned.delete(instance.metadata.uid ?? id);
    const same = existing?.data?.apiToken === data.apiToken && existing?.data?.instanceId === data.instanceId;
    if (existing && same && isOwnedBy(existing, instance)) return true; // else re-owned below, before the collector takes it
    const body: V1Secret = {
      apiVersion: 'v1',
      kind: 'Secret',
      type: 'Opaque',
      metadata: {
        name: tokenSecretName(id),
        namespace,
        labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [INSTANCE_LABEL]: id },
        ownerReferences: [ownerReference(instance)],
        resourceVersion: existing?.metadata?.resourceVersion,
      },
      data,
    };
    if (existing) await this.d.core.replaceNamespacedSecret({ name: tokenSecretName(id), namespace, body }); // token renewed through the API
    else await this.d.core.createNamespacedSecret({ namespace, body });
    return true;
  }

  /** Once per Instance while the name stays taken (an event at every reconcile would flood it). */
  private async warnSecretNameTaken(instance: Instance): Promise<void> {
    const key = instance.metadata.uid ?? instance.metadata.name;
    if (this.secretNameTakenWarned.has(key)) return;
    this.secretNameTakenWarned.add(key);
    const name = tokenSecretName(instance.metadata.name);
    await this.d.events.record(instance, 'Warning', 'SecretNameTaken', `Secret ${name} exists but was not made by the operator for this Instance; it is left as it is and the instance's API token is not written to it. Delete or rename it to get the token Secret.`);
  }

  private async readPod(instance: Instance): Promise<V1Pod | undefined> {
    try {
      return await this.d.core.readNamespacedPod({ name: sessionPodName(instance.metadata.name), namespace: instance.metadata.namespace });
    } catch (err) {
      if (isStatus(err, 404)) return undefined;
      throw err;
    }
  }

  /** The session pod's state, and why a `starting` one is not Ready; a pod stuck terminating (see
   *  isStuck) is removed first. */
  private async podState(instance: Instance): Promise<PodSeen> {
    const pod = await this.readPod(instance);
    if (!pod?.metadata?.deletionTimestamp) this.terminatingSince.delete(sessionPodName(instance.metadata.name));
    if (!pod) return { state: 'absent' };
    if (!isMadeFor(pod, instance)) return { state: 'foreign' };
    if (pod.metadata?.deletionTimestamp) return { state: this.isStuck(pod) ? await this.removeStuckPod(instance, pod) : 'terminating' };
    if (!isOwnedBy(pod, instance) && !instance.metadata.deletionTimestamp) await this.takeOverPod(instance, pod);
    const wanted = sessionPod(instance, this.d.session).metadata!.annotations![TEMPLATE_HASH_ANNOTATION];
    const finished = hasEnded(pod);
    const notReady = finished ? `it ended (${pod.status!.phase}).` : whyNotReady(pod);
    if (finished || pod.metadata?.annotations?.[TEMPLATE_HASH_ANNOTATION] !== wanted) return { state: 'outdated', notReady, ended: finished };
    return notReady === undefined ? { state: 'running' } : { state: 'starting', notReady };
  }

  private async startPod(instance: Instance): Promise<PodState> {
    try {
      await this.d.core.createNamespacedPod({ namespace: instance.metadata.namespace, body: sessionPod(instance, this.d.session) });
    } catch (err) {
      if (isStatus(err, 409)) return 'starting'; // created meanwhile (our cache was behind); the next round checks it
      throw err;
    }
    await this.d.events.record(instance, 'Normal', 'SessionStarted', `Session pod ${sessionPodName(instance.metadata.name)} created.`);
    return 'starting'; // its watch event brings it back here when Ready
  }

  /** The session pod of an earlier Instance of this name (the same instance id: a resource created
   *  again for its record), or one an orphaning delete left without owner, is given to this one:
   *  the garbage collector, if it has not acted yet, does not stop a session that serves it, and
   *  this resource's delete takes it along. A 409 (the pod changed) or 404 (collected first) makes
   *  the retry look again. */
  private async takeOverPod(instance: Instance, pod: V1Pod): Promise<void> {
    const body = { metadata: { ownerReferences: [ownerReference(instance)], resourceVersion: pod.metadata!.resourceVersion } };
    await this.d.core.patchNamespacedPod({ name: pod.metadata!.name!, namespace: instance.metadata.namespace, body }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
  }

  /** Deletes the pod judged stuck (that very pod: its uid) without waiting for its kubelet, so the
   *  session can start elsewhere. */
  private async removeStuckPod(instance: Instance, pod: V1Pod): Promise<'absent'> {
    const name = pod.metadata!.name!;
    try {
      await this.d.core.deleteNamespacedPod({ name, namespace: instance.metadata.namespace, gracePeriodSeconds: 0, body: { preconditions: { uid: pod.metadata!.uid } } });
    } catch (err) {
      if (isStatus(err, 404)) return 'absent';
      throw err; // 409: another pod has the name now; the retry looks again
    }
    this.terminatingSince.delete(name);
    await this.d.events.record(instance, 'Warning', 'SessionPodForceDeleted', `Session pod ${name} was still terminating a minute after its grace period (its node does not answer); removed so the session can start on another node.`);
    return 'absent';
  }

  private async stopPod(instance: Instance, state: PodState): Promise<void> {
    if (state === 'absent' || state === 'terminating' || state === 'foreign') return;
    try {
      await this.d.core.deleteNamespacedPod({ name: sessionPodName(instance.metadata.name), namespace: instance.metadata.namespace });
    } catch (err) {
      if (!isStatus(err, 404)) throw err;
    }
    await this.d.events.record(instance, 'Normal', 'SessionStopped', `Session pod ${sessionPodName(instance.metadata.name)} is stopping.`);
  }

  private async finalize(instance: Instance): Promise<number | void> {
    this.d.rollout?.settled(instance.metadata.name);
    if (!(instance.metadata.finalizers ?? []).includes(SESSION_FINALIZER)) return;
    const pod = (await this.podState(instance)).state;
    if (pod !== 'absent' && pod !== 'foreign') {
      // The session stopping for this unlinks the device from the phone; the records go only after
      // it stopped, so it cannot write to them again.
      await this.d.store.markUnlinkRequested(instance.metadata.name, 'delete');
      await this.stopPod(instance, pod);
      return this.d.pollMs ?? 1000;
    }
    // The pod is gone, but a force-deleted one may still run on its node: wait for its session.
    if (!(await this.d.store.delete(instance.metadata.name))) return this.d.pollMs ?? 1000;
    const next = structuredClone(instance);
    next.metadata.finalizers = (next.metadata.finalizers ?? []).filter((f) => f !== SESSION_FINALIZER);
    await this.replace(next);
  }

  private statusFor(instance: Instance, base: InstanceStatus, row: InstanceRow, pod: PodState, waiting: boolean, seen: { notReady?: string; secretNameTaken: boolean; waitingForRollout?: boolean }): InstanceStatus {
    const generation = instance.metadata.generation ?? 1;
    const paused = Boolean(instance.spec.paused);
    const resetting = resetPending(instance) && base.lastResetAt !== instance.spec.resetRequestedAt;
    const state = paused ? 'stopped' : row.state;
    let ready: { status: 'True' | 'False'; reason: string; message: string };
    if (resetting) ready = { status: 'False', reason: 'Resetting', message: 'Waiting for the session pod to stop before erasing the pairing.' };
    else if (paused) ready = waiting || (pod !== 'absent' && pod !== 'foreign')
      ? { status: 'False', reason: 'Stopping', message: 'Paused; the session pod is stopping.' }
      : { status: 'True', reason: 'Paused', message: 'Paused as requested; no session pod runs.' };
    else if (waiting) ready = { status: 'False', reason: 'Restarting', message: 'Waiting for the previous session pod to terminate.' };
    else if (pod === 'foreign') ready = { status: 'False', reason: POD_NAME_TAKEN, message: `Pod ${sessionPodName(instance.metadata.name)} exists but was not made by the operator for this Instance; delete or rename it and the session starts.` };
    else if (pod === 'running') ready = { status: 'True', reason: 'SessionRunning', message: `Session pod ${sessionPodName(instance.metadata.name)} is ready.` };
    else if (seen.waitingForRollout) {
      // Still the older template's pod, kept for the rollout budget: it serves if it is Ready.
      const later = 'it runs an older template and is replaced once fewer session pods are down (SESSION_ROLLOUT_MAX_UNAVAILABLE).';
      ready = seen.notReady === undefined
        ? { status: 'True', reason: 'UpdatePending', message: `Session pod ${sessionPodName(instance.metadata.name)} is ready; ${later}` }
        : { status: 'False', reason: 'SessionNotReady', message: `Session pod ${sessionPodName(instance.metadata.name)} is not Ready: ${seen.notReady} ${later}` };
    }
    else if (pod === 'absent') ready = { status: 'False', reason: 'SessionNotReady', message: `Session pod ${sessionPodName(instance.metadata.name)} does not exist yet; it is created next.` };
    else ready = { status: 'False', reason: 'SessionNotReady', message: `Session pod ${sessionPodName(instance.metadata.name)} is not Ready: ${seen.notReady ?? 'it was just created.'}` };
    const connected = state === 'connected'
      ? { status: 'True' as const, reason: 'Connected', message: row.phone ? `Connected as ${row.phone}.` : 'Connected.' }
      : { status: 'False' as const, reason: camel(state), message: CONNECTED_MESSAGES[state] ?? `Session state: ${state}.` };
    let conditions = setCondition(base.conditions, { type: 'Ready', observedGeneration: generation, ...ready });
    conditions = setCondition(conditions, { type: 'Connected', observedGeneration: generation, ...connected });
    const status: InstanceStatus = { ...base, state, tokenSecretName: tokenSecretName(instance.metadata.name), observedGeneration: generation, conditions };
    if (seen.secretNameTaken) delete status.tokenSecretName;
    if (row.phone) status.phone = row.phone;
    else delete status.phone;
    return status;
  }

  /** Writes the status (with the resourceVersion read: a concurrent change → 409 → retry); returns the stored object. */
  private async writeStatus(instance: Instance, status: InstanceStatus): Promise<Instance> {
    if (sameStatus(status, instance.status)) return instance; // unchanged: no write, no event storm
    const { namespace, name } = instance.metadata;
    const body = { ...instance, status };
    return (await this.d.custom.replaceNamespacedCustomObjectStatus({ group: GROUP, version: VERSION, namespace, plural: INSTANCES, name, body })) as Instance;
  }
}

/** Serving: not being deleted, not ended, Ready. */
export function isAvailable(pod: V1Pod): boolean {
  return !pod.metadata?.deletionTimestamp && !hasEnded(pod) && whyNotReady(pod) === undefined;
}

/** Its containers ran to their end (Failed, Succeeded): it never serves again. */
function hasEnded(pod: V1Pod): boolean {
  return pod.status?.phase === 'Failed' || pod.status?.phase === 'Succeeded';
}

/** Undefined when the pod is Ready (the kubelet's condition); otherwise what holds it, as
 *  `kubectl describe pod` would say it: not scheduled, a container waiting (ImagePullBackOff,
 *  CrashLoopBackOff) or last ended, or a running container failing its readiness probe. */
function whyNotReady(pod: V1Pod): string | undefined {
  const conditions = pod.status?.conditions ?? [];
  if (conditions.some((c) => c.type === 'Ready' && c.status === 'True')) return undefined;
  const unscheduled = conditions.find((c) => c.type === 'PodScheduled' && c.status === 'False');
  if (unscheduled) return `not scheduled: ${[unscheduled.reason, unscheduled.message].filter(Boolean).join(': ') || 'no node fits'}.`;
  const containers = pod.status?.containerStatuses ?? [];
  const waiting = containers.find((c) => c.state?.waiting?.reason)?.state?.waiting;
  if (waiting) return [waiting.reason, waiting.message].filter(Boolean).join(': ') + '.';
  if (pod.status?.phase === 'Running' && containers.length && containers.every((c) => c.state?.running)) {
    const ended = containers.find((c) => c.lastState?.terminated)?.lastState?.terminated;
    const restarted = ended ? ` (restarted after ${ended.reason ?? 'exit'}, code ${ended.exitCode})` : '';
    return `running, but its readiness probe (/ready: database and bus) is not passing${restarted}.`;
  }
  return `phase ${pod.status?.phase ?? 'Pending'}; no container runs yet.`;
}

const CONNECTED_MESSAGES: Record<string, string> = {
  stopped: 'Paused; not connected.',
  starting: 'The session is starting.',
  awaiting_scan: 'Waiting for the QR code to be scanned or a pairing code to be entered.',
  reconnecting: 'The connection dropped; the session is reconnecting.',
  logged_out: 'Not linked to a phone (the phone logged it out, or nobody paired it in time); connect the instance and pair it.',
};

const POD_NAME_TAKEN = 'PodNameTaken';

function readyReason(instance: Instance): string | undefined {
  return instance.status?.conditions?.find((c) => c.type === 'Ready')?.reason;
}

/** A reset is pending while spec.resetRequestedAt is newer than status.lastResetAt. */
export function resetPending(instance: Instance): boolean {
  const requested = instance.spec.resetRequestedAt;
  if (!requested) return false;
  const done = instance.status?.lastResetAt;
  return !done || Date.parse(requested) > Date.parse(done);
}

function camel(state: string): string {
  return state.split('_').map((w) => w[0].toUpperCase() + w.slice(1)).join('');
}
