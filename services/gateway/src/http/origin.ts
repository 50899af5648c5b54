// Browser requests must come from the service's own origin or an allowed one (403 otherwise).
// Requests without an Origin header (servers, curl) are not browser requests and pass, and so do
// the probes, which reveal nothing and must answer whatever page asks.
import type { Context, Next } from 'koa';
import { problems } from '@switchboard/core';
import { isProbePath } from './probe-paths.ts';

/** Response headers a page's script may read besides the basic ones: when to retry, how much of
 *  the rate limit is left, the id to quote, a download's file name. */
const EXPOSED_HEADERS = 'Retry-After, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, X-Request-Id, Content-Disposition';

export function originGuard(publicBaseUrl: string, allowedOrigins: string[]) {
  const allowed = new Set([new URL(publicBaseUrl).origin, ...allowedOrigins]);
  return async function checkOrigin(ctx: Context, next: Next): Promise<void> {
    const origin = ctx.get('origin');
    if (!origin || isProbePath(ctx.path)) return next();
    if (!allowed.has(origin)) throw problems.forbidden('This origin is not allowed; add it to ALLOWED_ORIGINS.');
    ctx.set('Access-Control-Allow-Origin', origin);
    ctx.set('Vary', 'Origin');
    ctx.set('Access-Control-Expose-Headers', EXPOSED_HEADERS);
    if (ctx.method === 'OPTIONS') {
      ctx.set('Access-Control-Allow-Methods', 'GET, POST, PUT, PATCH, DELETE');
      ctx.set('Access-Control-Allow-Headers', 'Authorization, Content-Type, Idempotency-Key');
      ctx.set('Access-Control-Max-Age', '600');
      ctx.status = 204;
      return;
    }
    return next();
  };
}
