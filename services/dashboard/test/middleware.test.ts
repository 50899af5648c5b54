// The static-file middleware on its own Koa app: content types, security and cache headers,
// conditional requests, problem documents for unknown files, and that every file the page loads
// (stylesheet, modules and their imports) is really served.
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { request, type Server } from 'node:http';
import Koa from 'koa';
import { dashboardMiddleware, CONTENT_SECURITY_POLICY } from '../src/index.ts';
import { loadAssets } from '../src/assets.ts';

describe('dashboard middleware', () => {
  let server: Server;
  let base: string;

  before(async () => {
    const app = new Koa();
    app.use(dashboardMiddleware());
    app.use((ctx) => {
      ctx.body = 'next middleware';
    });
    server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise((resolve) => server.close(resolve)));

  for (const path of ['/ui', '/ui/']) {
    it(`serves the page at ${path} with strict security headers`, async () => {
      const res = await fetch(base + path);
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('content-type'), 'text/html; charset=utf-8');
      assert.equal(res.headers.get('content-security-policy'), CONTENT_SECURITY_POLICY);
      assert.match(CONTENT_SECURITY_POLICY, /script-src 'self'(;|$)/);
      assert.doesNotMatch(CONTENT_SECURITY_POLICY, /unsafe-inline|unsafe-eval/);
      assert.equal(res.headers.get('x-frame-options'), 'DENY');
      assert.equal(res.headers.get('referrer-policy'), 'no-referrer');
      assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
      assert.equal(res.headers.get('cache-control'), 'no-cache');
      assert.ok(res.headers.get('etag'));
      const html = await res.text();
      assert.match(html, /<script type="module" src="\/ui\/js\/app.js"><\/script>/);
    });
  }

  it('answers the right content type for each kind of file', async () => {
    const expected: Record<string, string> = {
      '/ui/app.css': 'text/css; charset=utf-8',
      '/ui/js/app.js': 'text/javascript; charset=utf-8',
      '/ui/js/views/instances.js': 'text/javascript; charset=utf-8',
      '/ui/favicon.svg': 'image/svg+xml',
    };
    for (const [path, type] of Object.entries(expected)) {
      const res = await fetch(base + path);
      assert.equal(res.status, 200, path);
      assert.equal(res.headers.get('content-type'), type, path);
      assert.equal(res.headers.get('content-security-policy'), CONTENT_SECURITY_POLICY, path);
    }
  });

  it('answers 304 to a matching If-None-Match and the full file otherwise', async () => {
    const first = await fetch(`${base}/ui/app.css`);
    const etag = first.headers.get('etag')!;
    const again = await fetch(`${base}/ui/app.css`, { headers: { 'if-none-match': etag } });
    assert.equal(again.status, 304);
    assert.equal(await again.text(), '');
    const stale = await fetch(`${base}/ui/app.css`, { headers: { 'if-none-match': '"something-else"' } });
    assert.equal(stale.status, 200);
    assert.equal(await stale.text(), await first.text());
  });

  it('answers HEAD with headers only', async () => {
    const res = await fetch(`${base}/ui/js/api.js`, { method: 'HEAD' });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'text/javascript; charset=utf-8');
    assert.equal(await res.text(), '');
  });

  // Sent raw (node:http), because fetch would normalise the dot segments away before sending.
  for (const path of ['/ui/missing.js', '/ui/js/../../src/index.ts', '/ui/%2e%2e/package.json', '/ui/..%2fpackage.json', '/ui/js/', '/ui/.hidden']) {
    it(`answers a 404 problem document for ${path}`, async () => {
      const res = await rawGet(base, path);
      assert.equal(res.status, 404);
      assert.equal(res.contentType, 'application/problem+json');
      const body = JSON.parse(res.body);
      assert.equal(body.status, 404);
      assert.equal(body.code, 'not_found');
      assert.equal(typeof body.detail, 'string');
    });
  }

  it('refuses writes with a 405 problem document', async () => {
    const res = await fetch(`${base}/ui/app.css`, { method: 'POST', body: 'x' });
    assert.equal(res.status, 405);
    assert.equal(res.headers.get('allow'), 'GET, HEAD');
    assert.equal((await res.json()).code, 'method_not_allowed');
    const options = await fetch(`${base}/ui`, { method: 'OPTIONS' });
    assert.equal(options.status, 200, 'OPTIONS says what is allowed, as on the API paths');
    assert.equal(options.headers.get('allow'), 'GET, HEAD');
  });

  it('leaves every other path to the next middleware', async () => {
    for (const path of ['/api/instances', '/uix', '/', '/health']) {
      const res = await fetch(base + path);
      assert.equal(await res.text(), 'next middleware', path);
    }
  });

  it('serves every module the page imports, and no file carries inline script or style', () => {
    const assets = loadAssets();
    const html = assets.get('index.html')!.body.toString();
    assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, 'inline <script>');
    assert.doesNotMatch(html, /\sstyle=|<style|\son[a-z]+=/i, 'inline style or handler');
    for (const [, ref] of html.matchAll(/(?:src|href)="\/ui\/([^"]+)"/g)) assert.ok(assets.has(ref), `index.html references missing ${ref}`);
    for (const [name, asset] of assets) {
      if (!name.endsWith('.js')) continue;
      const dir = name.split('/').slice(0, -1);
      for (const [, spec] of asset.body.toString().matchAll(/^import[^'"]*['"]([^'"]+)['"]/gm)) {
        const target = new URL(spec, `http://x/${dir.join('/')}/`).pathname.slice(1);
        assert.ok(assets.has(target), `${name} imports missing ${spec}`);
      }
      assert.doesNotMatch(asset.body.toString(), /\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML\(|document\.write\(|\beval\(/, `${name} builds markup from strings`);
    }
  });
});

function rawGet(base: string, path: string): Promise<{ status: number; contentType: string; body: string }> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ hostname, port, path, method: 'GET' }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, contentType: String(res.headers['content-type']), body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end();
  });
}
