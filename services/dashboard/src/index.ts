// The operator dashboard: static files served by the gateway at /ui (GET /ui, /ui/, /ui/<asset>).
// The browser code lives in ../public (plain ES modules, no build step) and talks to the API of
// the same origin with the administrative key held in session storage.
import type { Context, Middleware, Next } from 'koa';
import { Problem } from '@switchboard/core';
import { loadAssets, PUBLIC_DIR, type Asset } from './assets.ts';

export const DASHBOARD_PREFIX = '/ui';

/**
 * No inline script or style anywhere; images only from the app itself and data: URLs (the QR code
 * arrives as a data URL); fetch only to the same origin; never framed.
 */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "manifest-src 'self'",
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join('; ');

const SECURITY_HEADERS: Record<string, string> = {
  'Content-Security-Policy': CONTENT_SECURITY_POLICY,
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'X-Content-Type-Options': 'nosniff',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Resource-Policy': 'same-origin',
  'Permissions-Policy': 'camera=(), microphone=(), geolocation=(), payment=()',
};

// Files are small and change only with a release: the browser may keep them but must revalidate
// (a cheap 304 thanks to the ETag), so an upgrade never mixes old and new modules.
const CACHE_CONTROL = 'no-cache';

export interface DashboardOptions {
  /** Folder with the files to serve (tests point it elsewhere). */
  publicDir?: string;
}

export function dashboardMiddleware(options: DashboardOptions = {}): Middleware {
  const assets = loadAssets(options.publicDir ?? PUBLIC_DIR);
  return async function serveDashboard(ctx: Context, next: Next): Promise<void> {
    const assetPath = assetPathOf(ctx.path);
    if (assetPath === undefined) return next();
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) ctx.set(name, value);
    if (ctx.method !== 'GET' && ctx.method !== 'HEAD') {
      ctx.set('Allow', 'GET, HEAD');
      // What may be asked here, as the API's router answers it (a preflight was answered before).
      if (ctx.method === 'OPTIONS') {
        ctx.status = 200;
        ctx.body = '';
        return;
      }
      return respondProblem(ctx, 405, 'method_not_allowed', `${ctx.method} is not allowed here; the dashboard is read-only.`);
    }
    const asset = assets.get(assetPath);
    if (!asset) return respondProblem(ctx, 404, 'not_found', 'This dashboard file does not exist.');
    serveAsset(ctx, asset);
  };
}

/** "/ui" and "/ui/" mean the page itself; "/ui/<file>" a file; anything else is not ours. */
function assetPathOf(path: string): string | undefined {
  if (path === DASHBOARD_PREFIX || path === `${DASHBOARD_PREFIX}/`) return 'index.html';
  if (path.startsWith(`${DASHBOARD_PREFIX}/`)) return path.slice(DASHBOARD_PREFIX.length + 1);
  return undefined;
}

function serveAsset(ctx: Context, asset: Asset): void {
  ctx.set('Cache-Control', CACHE_CONTROL);
  ctx.set('ETag', asset.etag);
  ctx.type = asset.contentType;
  if (ctx.get('if-none-match') === asset.etag) {
    ctx.status = 304;
    return;
  }
  ctx.status = 200;
  ctx.length = asset.body.length;
  if (ctx.method === 'GET') ctx.body = asset.body;
}

/** The API's problem document (DESIGN §5), answered here so it holds in any Koa app. */
function respondProblem(ctx: Context, status: number, code: string, detail: string): void {
  ctx.status = status;
  ctx.set('Cache-Control', 'no-store');
  ctx.type = 'application/problem+json';
  ctx.body = JSON.stringify(new Problem(status, code, detail).toJSON());
}
