// How a namespace maps onto NATS: subjects get a `<namespace>.` prefix, stream names a
// `<NAMESPACE>_` prefix. Callers of the bus only ever see un-prefixed subjects, so several
// deployments (or test runs) can share one NATS server without seeing each other.
import type { StreamName } from './types.ts';

export class NatsNames {
  private readonly streamPrefix: string;

  constructor(readonly namespace: string) {
    if (namespace !== '' && !/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(namespace)) {
      throw new Error(`invalid bus namespace: ${JSON.stringify(namespace)}`);
    }
    // Stream names may not contain dots.
    this.streamPrefix = namespace === '' ? '' : `${namespace.replace(/\./g, '_').toUpperCase()}_`;
  }

  /** The subject on the wire for a caller's subject (`cmd.x` → `ns.cmd.x`). */
  subject(subject: string): string {
    return this.namespace === '' ? subject : `${this.namespace}.${subject}`;
  }

  /** The caller's subject for a subject on the wire (`ns.cmd.x` → `cmd.x`). */
  unprefixed(wireSubject: string): string {
    const prefix = `${this.namespace}.`;
    return this.namespace !== '' && wireSubject.startsWith(prefix) ? wireSubject.slice(prefix.length) : wireSubject;
  }

  stream(name: StreamName): string {
    return `${this.streamPrefix}${name.toUpperCase()}`;
  }
}
