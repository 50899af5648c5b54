// Reconciles one Project: a project created with kubectl gets its record (id = resource name,
// name = spec.displayName); deleting the resource deletes the record (its instances keep running
// without a project, as when a project is deleted through the API).
import type { CustomObjectsApi } from '@kubernetes/client-node';
import { sameStatus, setCondition } from './conditions.ts';
import type { InstanceStore } from './instance-store.ts';
import { isStatus } from './kube-errors.ts';
import { GROUP, PROJECTS, PROJECT_FINALIZER, VERSION, type Project } from './resources.ts';

export class ProjectReconciler {
  constructor(
    private readonly custom: CustomObjectsApi,
    private readonly store: InstanceStore,
  ) {}

  /** True when this reconcile created the project record (the instances naming it can link now). */
  async reconcile(namespace: string, name: string): Promise<boolean> {
    let project: Project;
    try {
      project = (await this.custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: PROJECTS, name })) as Project;
    } catch (err) {
      if (isStatus(err, 404)) return false;
      throw err;
    }
    const finalizers = project.metadata.finalizers ?? [];
    if (project.metadata.deletionTimestamp) {
      if (!finalizers.includes(PROJECT_FINALIZER)) return false;
      await this.store.deleteProject(name);
      project.metadata.finalizers = finalizers.filter((f) => f !== PROJECT_FINALIZER);
      await this.replace(project);
      return false;
    }
    if (!finalizers.includes(PROJECT_FINALIZER)) {
      project.metadata.finalizers = [...finalizers, PROJECT_FINALIZER];
      project = await this.replace(project);
    }
    const created = await this.store.ensureProject(name, project.spec.displayName);
    const generation = project.metadata.generation ?? 1;
    const status = {
      ...(project.status ?? {}),
      observedGeneration: generation,
      conditions: setCondition(project.status?.conditions, { type: 'Ready', status: 'True', observedGeneration: generation, reason: 'RecordInSync', message: 'The project record matches this resource.' }),
    };
    if (!sameStatus(status, project.status)) {
      await this.custom.replaceNamespacedCustomObjectStatus({ group: GROUP, version: VERSION, namespace, plural: PROJECTS, name, body: { ...project, status } });
    }
    return created;
  }

  private async replace(project: Project): Promise<Project> {
    const { namespace, name } = project.metadata;
    return (await this.custom.replaceNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: PROJECTS, name, body: project })) as Project;
  }
}
