// Probes (health, readiness, metrics) answer whoever asks: load balancers, kubelets and Prometheus
// are neither rate limited nor checked as browsers.
const PROBE_PATHS: ReadonlySet<string> = new Set(['/health', '/ready', '/metrics']);

/** Whether a path names a probe as the router matches it (in any case, with one trailing slash):
 *  every probe answers each of the spellings exempted, so none is exempt for nothing. */
export function isProbePath(path: string): boolean {
  return PROBE_PATHS.has(path.toLowerCase().replace(/\/$/, ''));
}
