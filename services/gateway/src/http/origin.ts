// Browser requests must come from the service's own origin or an allowed one (403 otherwise).
// Requests without an Origin header (servers, curl) are not browser requests and pass, and so do
// the probes, which reveal nothing and must answer whatever page asks.
//
// Two steps around the rate limiter: an allowed page gets its CORS headers first, so it can read
// a 429 too; the verdict (403, or the answer to a preflight) comes after the request was counted,
// since any client can send an Origin header, and such answers count like every other.
import type { Context, Next } from 'koa';
import { problems } from '@switchboard/core';
import { isProbePath } from './probe-paths.ts';

/** Response headers a page's script may read besides the basic ones: when to retry, how much of
 *  the rate limit is left, the id to quote, a download's file name. */
const EXPOSED_HEADERS = 'Retry-After, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, X-Request-Id, Content-Disposition';

export interface OriginPolicy {
  /** Sets the CORS headers for an allowed page's request. */
  shareWithAllowedPages(ctx: Context, next: Next): Promise<void>;
  /** Refuses a page of another origin (403); answers an allowed page's preflight (204). */
  enforce(ctx: Context, next: Next): Promise<void>;
}

export function originPolicy(publicBaseUrl: string, allowedOrigins: string[]): OriginPolicy {
  const allowed = new Set([new URL(publicBaseUrl).origin, ...allowedOrigins]);
  /** The page's origin, when the request comes from one the check applies to. */
  const pageOrigin = (ctx: Context) => (isProbePath(ctx.path) ? '' : ctx.get('origin'));
  return {
    async shareWithAllowedPages(ctx, next) {
      const origin = pageOrigin(ctx);
      if (origin && allowed.has(origin)) {
        ctx.set('Access-Control-Allow-Origin', origin);
        ctx.set('Vary', 'Origin');
        ctx.set('Access-Control-Expose-Headers', EXPOSED_HEADERS);
      }
      return next();
    },
    async enforce(ctx, next) {
      const origin = pageOrigin(ctx);
      if (!origin) return next();
      if (!allowed.has(origin)) throw problems.forbidden('This origin is not allowed; add it to ALLOWED_ORIGINS.');
      if (ctx.method === 'OPTIONS') {
        ctx.set('Access-Control-Allow-Methods', 'GET, POST, PUT, PATCH, DELETE');
        ctx.set('Access-Control-Allow-Headers', 'Authorization, Content-Type, Idempotency-Key');
        ctx.set('Access-Control-Max-Age', '600');
        ctx.status = 204;
        return;
      }
      return next();
    },
  };
}
