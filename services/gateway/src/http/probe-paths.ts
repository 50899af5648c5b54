// Probes (health, readiness, metrics) answer whoever asks: load balancers, kubelets and Prometheus
// are neither rate limited nor checked as browsers.
const PROBE_PATHS: ReadonlySet<string> = new Set(['/health', '/ready', '/metrics']);

/** The probe a path names as the router matches it (in any case, with one trailing slash), or
 *  undefined. Every probe answers each of its spellings, so none of them is exempt for nothing. */
export function probePath(path: string): string | undefined {
  const normal = path.toLowerCase().replace(/\/$/, '');
  return PROBE_PATHS.has(normal) ? normal : undefined;
}

export function isProbePath(path: string): boolean {
  return probePath(path) !== undefined;
}
