// /health and /ready for processes that serve no other HTTP (dispatcher, operator, session), so
// Kubernetes probes and the chart work the same for every service.
import { createServer, type Server } from 'node:http';
import type { Metrics } from './metrics.ts';
import { Problem } from './problem.ts';
import { ConfigError, EnvReader } from './config.ts';
import { withDeadline } from './deadline.ts';

export interface HealthServer {
  /** Settles once the port is bound; rejects naming HEALTH_PORT when it cannot be. */
  listening: Promise<void>;
  close(): Promise<void>;
}

/** How long a readiness check may take: a database that stops answering on an open connection
 *  would otherwise hold every probe open (and they pile up). */
const READINESS_CHECK_MS = 2_000;

/** Runs every check of a readiness probe at once; rejects naming each that failed or did not
 *  answer in time ("database, bus did not answer"), so the probe's answer says where to look. */
export async function checkReadiness(checks: Record<string, () => Promise<unknown>>, timeoutMs = READINESS_CHECK_MS): Promise<void> {
  const names = Object.keys(checks);
  const settled = await Promise.allSettled(names.map((name) => withDeadline(checks[name](), timeoutMs, () => new Error(`${name} timed out`))));
  const failed = names.filter((_, i) => settled[i].status === 'rejected');
  if (failed.length) throw new Error(`${failed.join(', ')} did not answer`);
}

/** `ready` resolves with extra details when ready and rejects when not. With `metrics`, it also serves GET /metrics (Prometheus) for the process. */
export function startHealthServer(port: number, ready: () => Promise<Record<string, unknown> | void>, metrics?: Metrics): HealthServer {
  const server: Server = createServer((req, res) => {
    const reply = (status: number, body: unknown) => res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
    // Errors are problem documents here too, as on the gateway (DESIGN §5).
    const fail = (problem: Problem) => res.writeHead(problem.status, { 'Content-Type': 'application/problem+json' }).end(JSON.stringify(problem));
    if (req.url === '/health') return reply(200, { status: 'ok' });
    if (req.url === '/ready') {
      ready().then(
        (details) => reply(200, { status: 'ready', ...(details ?? {}) }),
        (err) => fail(new Problem(503, 'not_ready', `Not ready: ${err instanceof Error ? err.message : String(err)}`)),
      );
      return;
    }
    if (req.url === '/metrics' && metrics) {
      metrics.render().then(
        (body) => res.writeHead(200, { 'Content-Type': metrics.contentType }).end(body),
        () => fail(new Problem(500, 'metrics_unavailable', 'The metrics could not be collected; try again.')),
      );
      return;
    }
    fail(new Problem(404, 'not_found', `This path is not served here; try /health${metrics ? ', /ready or /metrics' : ' or /ready'}.`));
  });
  const listening = new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', (err) => reject(new Error(`HEALTH_PORT: cannot listen on ${port} (${err.message})`)));
  });
  server.listen(port);
  return { listening, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

/** HEALTH_PORT of a worker process, when set. */
export function healthPortFrom(env: NodeJS.ProcessEnv): number | undefined {
  if (!env.HEALTH_PORT?.trim()) return undefined;
  const problems: string[] = [];
  const port = new EnvReader(env, problems).int('HEALTH_PORT', 0, 0, 65535);
  if (problems.length) throw new ConfigError(problems);
  return port;
}
