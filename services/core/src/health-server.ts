// /health and /ready for processes that serve no other HTTP (dispatcher, operator, session), so
// Kubernetes probes and the chart work the same for every service.
import { createServer, type Server } from 'node:http';
import type { Metrics } from './metrics.ts';
import { Problem } from './problem.ts';
import { ConfigError } from './config.ts';

export interface HealthServer {
  /** Settles once the port is bound; rejects naming HEALTH_PORT when it cannot be. */
  listening: Promise<void>;
  close(): Promise<void>;
}

/** Runs every check of a readiness probe at once; rejects naming each that failed ("database, bus
 *  did not answer"), so the probe's answer says where to look. */
export async function checkReadiness(checks: Record<string, () => Promise<unknown>>): Promise<void> {
  const names = Object.keys(checks);
  const settled = await Promise.allSettled(names.map((name) => checks[name]()));
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
  const raw = env.HEALTH_PORT?.trim();
  if (!raw) return undefined;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new ConfigError([`HEALTH_PORT: must be a port number (got "${raw}")`]);
  return port;
}
