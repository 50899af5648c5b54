// Random and malformed requests at every route: never a 5xx, every error a problem document.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { request } from 'node:http';
import { startTestServer, type TestServer } from '../../../test/support/server.ts';

const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];

describe('fuzzing every route', function () {
  this.timeout(120_000);
  let t: TestServer;
  let paths: string[];
  let instanceId: string;
  let instanceToken: string;

  before(async () => {
    t = await startTestServer({ storage: 'postgres' });
    const inst = (await t.admin.post('/api/instances', { name: 'Fuzz target' })).body;
    instanceId = inst.id;
    instanceToken = inst.apiToken;
    const doc = (await t.client().get('/openapi.json')).body;
    paths = Object.keys(doc.paths);
    assert.ok(paths.length > 30, 'the OpenAPI document lists every route');
  });
  after(async () => t?.stop());

  const jsonish = fc.oneof(
    fc.jsonValue(),
    fc.record({ name: fc.oneof(fc.string(), fc.integer(), fc.constant(null)), projectId: fc.oneof(fc.string(), fc.constant(null)) }),
    fc.record({
      phone: fc.oneof(fc.constantFrom('5511999990000', '123-group', '1@g.us', '9@lid', '', '+55'), fc.string()),
      type: fc.oneof(fc.constantFrom('text', 'image', 'audio', 'video', 'document', 'sticker'), fc.string()),
      text: fc.oneof(fc.string(), fc.integer()),
      base64: fc.oneof(fc.base64String(), fc.string()),
      mimetype: fc.oneof(fc.constantFrom('image/png', 'audio/ogg', 'application/pdf', 'image/webp'), fc.string()),
      caption: fc.string(),
      ptt: fc.oneof(fc.boolean(), fc.string()),
    }, { requiredKeys: [] }),
    fc.record({ url: fc.oneof(fc.webUrl(), fc.string()), format: fc.string(), settings: fc.dictionary(fc.string(), fc.jsonValue()) }, { requiredKeys: [] }),
  );
  const rawBody = fc.oneof(
    jsonish.map((v) => JSON.stringify(v)),
    fc.string(),
    fc.constantFrom('{', '[]', 'null', '"x"', '{"name":', '\u0000', ''),
  );

  function fillPath(template: string, id: string, segment: string): string {
    return template.replace('{id}', id).replace(/\{\w+\}/g, segment);
  }

  it('answers 2xx/3xx/4xx with problem documents for errors, never 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...paths),
        fc.constantFrom(...METHODS),
        fc.oneof(fc.constant(instanceId), fc.constant('inst-unknown'), fc.string({ maxLength: 50 }).map(encodeURIComponent)),
        fc.string({ maxLength: 20 }).map(encodeURIComponent),
        rawBody,
        fc.constantFrom('admin', 'instance', 'none', 'garbage'),
        fc.option(fc.string({ maxLength: 200 }).filter((s) => /^[\x20-\x7e]*$/.test(s))),
        fc.constantFrom('application/json', 'text/plain', 'application/x-www-form-urlencoded', ''),
        async (template, method, id, segment, body, who, idemKey, contentType) => {
          const headers: Record<string, string> = {};
          if (who === 'admin') headers.authorization = `Bearer ${t.adminKey}`;
          if (who === 'instance') headers.authorization = `Bearer ${instanceToken}`;
          if (who === 'garbage') headers.authorization = 'Bearer \u00e9\u00e9';
          if (idemKey !== null) headers['idempotency-key'] = idemKey;
          if (contentType) headers['content-type'] = contentType;
          const path = fillPath(template, id, segment);
          const res = await fetch(t.url + path, { method, headers, body: method === 'GET' || method === 'DELETE' ? undefined : body }).catch((err) => {
            // A header value fetch refuses to send is the client's problem, not the server's.
            if (err instanceof TypeError) return undefined;
            throw err;
          });
          if (!res) return;
          const text = await res.text();
          assert.ok(res.status < 500, `${method} ${path} → ${res.status} ${text}`);
          if (res.status >= 400) {
            assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/, `${method} ${path}`);
            const problem = JSON.parse(text);
            assert.equal(problem.status, res.status);
            assert.ok(!/\bat .+:\d+:\d+/.test(text), 'no stack trace');
          }
        },
      ),
      { numRuns: Number(process.env.FUZZ_RUNS ?? 400) },
    );
  });

  it('survives malformed paths and headers', async () => {
    for (const path of ['/api/instances/%', '/api/instances/%E0%A4%A', '/api/../etc/passwd', '/api/instances/' + 'a'.repeat(5000), '//api//projects']) {
      const res = await fetch(t.url + path, { headers: { authorization: `Bearer ${t.adminKey}` } });
      assert.ok(res.status < 500, `${path} → ${res.status}`);
      if (res.status >= 400) assert.match(res.headers.get('content-type') ?? '', /problem\+json/);
    }
    // A declared body far over the limit is refused before it is sent.
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(`${t.url}/api/instances/${instanceId}/messages`, {
        method: 'POST',
        headers: { authorization: `Bearer ${t.adminKey}`, 'content-type': 'application/json', 'content-length': String(500 * 1024 * 1024) },
      });
      req.on('response', (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
        req.destroy();
      });
      req.on('error', reject);
      req.write('{"phone":');
    });
    assert.equal(status, 413);
  });
});
