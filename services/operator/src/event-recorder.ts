// Kubernetes Events on our resources (what `kubectl describe` shows). Best effort: a failure to
// record an event is logged and never fails a reconcile.
import { randomBytes } from 'node:crypto';
import type { CoreV1Api } from '@kubernetes/client-node';
import type { Logger } from '@switchboard/core';
import { rfc3339 } from './conditions.ts';

interface EventTarget {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; namespace: string; uid?: string; resourceVersion?: string };
}

export class EventRecorder {
  constructor(
    private readonly core: CoreV1Api,
    private readonly component: string,
    private readonly logger?: Logger,
  ) {}

  async record(target: EventTarget, type: 'Normal' | 'Warning', reason: string, message: string): Promise<void> {
    const now = rfc3339(new Date());
    const { name, namespace, uid, resourceVersion } = target.metadata;
    try {
      await this.core.createNamespacedEvent({
        namespace,
        body: {
          metadata: { name: `${name}.${randomBytes(8).toString('hex')}`, namespace },
          involvedObject: { apiVersion: target.apiVersion, kind: target.kind, name, namespace, uid, resourceVersion },
          type,
          reason,
          message,
          source: { component: this.component },
          reportingComponent: this.component,
          firstTimestamp: new Date(now),
          lastTimestamp: new Date(now),
          count: 1,
        },
      });
    } catch (err) {
      this.logger?.warn({ reason, object: `${namespace}/${name}`, err: String(err) }, 'could not record event');
    }
  }
}
