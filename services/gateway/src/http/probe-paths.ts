// Probes (health, readiness, metrics) answer whoever asks: load balancers, kubelets and Prometheus
// are neither rate limited nor checked as browsers.
const PROBE_PATHS: ReadonlySet<string> = new Set(['/health', '/ready', '/metrics']);

/** True for a probe's path as the router matches it: in any case, with trailing slashes. */
export function isProbePath(path: string): boolean {
  return PROBE_PATHS.has(path.toLowerCase().replace(/\/+$/, ''));
}
