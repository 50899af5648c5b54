// The gateway's Koa application: a small core of middleware (problems, request id, rate limit,
// origin) and a router built from the route list, which also produces the OpenAPI document.
import Koa, { type Context } from 'koa';
import Router from '@koa/router';
import { randomUUID } from 'node:crypto';
import type { GatewayDeps } from './deps.ts';
import { problemResponder } from './http/errors.ts';
import { rateLimiter } from './http/rate-limit.ts';
import { originPolicy } from './http/origin.ts';
import { dashboardMiddleware } from '@switchboard/dashboard';
import { authorize, bearerToken, resolvePrincipal, type Principal } from './http/auth.ts';
import { DEFAULT_BODY_LIMIT, readJsonBody } from './http/body.ts';
import { parseOrThrow } from './http/validate.ts';
import { checkedBeforeHandler, type CredentialAuth, type Route } from './http/route.ts';
import { allRoutes } from './routes/index.ts';
import { assertStorableInput, assertStorableParams } from './storable-input.ts';
import { metricsEndpoint, observeRequests } from './http/observability.ts';
import { createMetrics, problems } from '@switchboard/core';

/** A client's own request id is kept when it is one token of visible ASCII: it is echoed in a
 *  header and quoted in logs and support tickets, where spaces or odd bytes would mislead. */
const CLIENT_REQUEST_ID = /^[\x21-\x7e]{1,128}$/;
/** How old a credential check may be when the handler runs; a body that took longer to arrive
 *  is followed by a second check, so a revoked key cannot finish a request it began before. */
const CREDENTIAL_MAX_AGE_MS = 100;
/** Headers a request may carry once (see repeatedHeader). */
const SINGLE_HEADERS = new Set(['host', 'authorization']);

export function createGatewayApp(deps: GatewayDeps, routes: Route[] = allRoutes(deps)): Koa {
  const app = new Koa();
  app.proxy = deps.config.trustProxy;
  app.silent = true; // errors are logged by problemResponder, once
  const metrics = deps.metrics ?? createMetrics({ db: deps.db, bus: deps.bus });
  app.use(observeRequests(metrics, deps.log, [deps.adminKey])); // outermost: sees the final status of every request
  app.use(problemResponder(deps.log));
  app.use(routeHeaders(routes));
  app.use(async (ctx, next) => {
    const given = ctx.get('x-request-id');
    const requestId = CLIENT_REQUEST_ID.test(given) ? given : randomUUID();
    ctx.state.requestId = requestId;
    ctx.set('X-Request-Id', requestId);
    // RFC 9112 §3.2 (the server lets requests without Host through, so they get a problem document).
    if (ctx.req.httpVersion === '1.1' && ctx.req.headers.host === undefined) throw problems.badRequest('host_required', 'An HTTP/1.1 request must carry a Host header.');
    // Node keeps the first of repeated Host or Authorization lines; a proxy in front may use the
    // last, and the two would disagree on where the request goes or who sent it.
    const repeated = repeatedHeader(ctx.req.rawHeaders);
    if (repeated) throw problems.badRequest('duplicate_header', `Send one ${repeated} header, not several.`);
    await next();
  });
  // Around the rate limiter (see origin.ts): CORS headers before it, so an allowed page can read a
  // 429; the origin's verdict after it, so a refused or preflight request is counted too.
  const origins = originPolicy(deps.config.publicBaseUrl, deps.config.allowedOrigins);
  app.use(origins.shareWithAllowedPages);
  app.use(rateLimiter({ limit: deps.config.rateLimitPerMinute, trustProxy: deps.config.trustProxy, windows: deps.rateWindows }));
  app.use(origins.enforce);
  app.use(dashboardMiddleware());

  const router = new Router();
  router.get('/metrics', metricsEndpoint(metrics));
  for (const r of routes) router[r.method](koaPath(r.path), (ctx: Context) => handle(ctx, r, deps));
  app.use(router.routes());
  app.use(router.allowedMethods({ throw: false }));
  return app;
}

async function handle(ctx: Context, r: Route, deps: GatewayDeps): Promise<void> {
  const params = (ctx as any).params as Record<string, string>;
  let principal: Principal | undefined;
  if (checkedBeforeHandler(r.auth)) {
    principal = await resolvePrincipal(deps, bearerToken(ctx));
    authorize(r.auth, principal, params.id);
  }
  // After authorization: a caller without access gets 401/403, never a 400 or 404 about an id.
  // The media route authorizes in its handler (a signed link), and checks them there.
  if (r.auth !== 'any-or-link') assertStorableParams(params);
  const bodyStarted = performance.now();
  const rawBody = r.body ? await readJsonBody(ctx, r.bodyLimit ?? DEFAULT_BODY_LIMIT) : undefined;
  if (principal && performance.now() - bodyStarted > CREDENTIAL_MAX_AGE_MS) {
    // The body took a while (a slow link, or a client holding it back): the credential may have
    // been revoked or renewed meanwhile, and the instance paused. Looked up again, as it is now.
    principal = await resolvePrincipal(deps, bearerToken(ctx));
    authorize(r.auth as CredentialAuth, principal, params.id);
  }
  if (r.bodyRequired && rawBody === undefined) throw problems.badRequest('body_required', 'This operation needs a JSON body.');
  assertStorableInput(rawBody, 'body');
  // Only a missing body means "no fields"; a JSON null is a body, and not an object.
  const body = r.body ? parseOrThrow(r.body, rawBody === undefined ? {} : rawBody, 'body') : undefined;
  const query = r.query ? parseOrThrow(r.query, ctx.query, 'query') : undefined;
  // The parameters the route reads: others are ignored, whatever they hold.
  if (query && !r.queryNotStored) assertStorableInput(query, 'query');
  const result = await r.handler({ ctx, deps, principal, params, body, query });
  for (const [k, v] of Object.entries(result.headers ?? {})) ctx.set(k, v);
  ctx.status = result.status ?? 200;
  if (result.body !== undefined) ctx.body = result.body;
}

/** Sets each route's own `headers` on every answer to its path, whatever the method, before
 *  anything can refuse the request: a malformed request, a rate limit, a foreign origin or a
 *  wrong method too. A
 *  router used only to match paths, so the app's router still sees only its own matches. */
function routeHeaders(routes: Route[]): Koa.Middleware {
  const paths = new Router();
  const headersByPath = new Map<string, Record<string, string>>();
  for (const r of routes) {
    if (!r.headers) continue;
    paths[r.method](koaPath(r.path), () => undefined);
    headersByPath.set(koaPath(r.path), r.headers);
  }
  return async (ctx, next) => {
    if (headersByPath.size > 0) {
      for (const layer of paths.match(ctx.path, ctx.method).path) ctx.set(headersByPath.get(layer.path as string) ?? {});
    }
    await next();
  };
}

export function koaPath(openApiPath: string): string {
  return openApiPath.replace(/\{(\w+)\}/g, ':$1');
}

/** The first of SINGLE_HEADERS the request repeats, read off the raw header lines (not
 *  `headersDistinct`, which builds a list for every header of every request). */
function repeatedHeader(raw: string[]): string | undefined {
  let seen: Set<string> | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    if (!SINGLE_HEADERS.has(name)) continue;
    if (seen?.has(name)) return name;
    (seen ??= new Set()).add(name);
  }
  return undefined;
}
