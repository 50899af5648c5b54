// metav1.Condition bookkeeping: lastTransitionTime only moves when the status itself changes,
// so watchers see a stable history.
import { isDeepStrictEqual } from 'node:util';
import type { Condition } from './resources.ts';

export function setCondition(list: Condition[] | undefined, next: Omit<Condition, 'lastTransitionTime'>, now = new Date()): Condition[] {
  const current = (list ?? []).find((c) => c.type === next.type);
  const lastTransitionTime = current && current.status === next.status ? current.lastTransitionTime : rfc3339(now);
  return [...(list ?? []).filter((c) => c.type !== next.type), { ...next, lastTransitionTime }].sort((a, b) => a.type.localeCompare(b.type));
}

/** Kubernetes metav1.Time: RFC 3339 with second precision. */
export function rfc3339(d: Date): string {
  return d.toISOString().replace(/\.\d+Z$/, 'Z');
}

/** Whether the status computed equals the one stored, whatever the order of keys: the API server
 *  keeps custom resources with their keys sorted, so comparing JSON text would always differ and
 *  every reconcile would write. */
export function sameStatus(computed: object, stored: object | undefined): boolean {
  return isDeepStrictEqual(JSON.parse(JSON.stringify(computed)), stored ?? {});
}
