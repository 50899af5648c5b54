// Probes (health, readiness, metrics) answer whoever asks: load balancers, kubelets and Prometheus
// are neither rate limited nor checked as browsers.
export const PROBE_PATHS: ReadonlySet<string> = new Set(['/health', '/ready', '/metrics']);
