// Properties over the whole API, driven by the server's own OpenAPI document: for every route,
// request bodies generated from its request schema (valid by construction) and arbitrary JSON
// (mostly invalid) never yield a 5xx, every status is one the document lists for the operation,
// and every body validates (ajv) against the document's schema for that status.
import assert from 'node:assert/strict';
import { Ajv2020 } from 'ajv/dist/2020.js';
import fc from 'fast-check';
import { startTestServer, type TestServer } from '../support/server.ts';
import { arbitraryFor, pointer } from './openapi-arbitrary.ts';

interface Operation {
  path: string;
  method: string;
  spec: Record<string, any>;
}

const DOC_ID = 'https://switchboard.test/openapi.json';

describe('API properties from the OpenAPI document', function () {
  this.timeout(180_000);
  let t: TestServer;
  let doc: Record<string, any>;
  let operations: Operation[];
  let instanceId: string;
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
  let validatedBodies = 0;

  before(async () => {
    t = await startTestServer({ storage: 'postgres' });
    instanceId = (await t.admin.post('/api/instances', { name: 'Property target' })).body.id;
    doc = (await t.client().get('/openapi.json')).body;
    ajv.addSchema({ ...doc, $id: DOC_ID });
    operations = Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([path, ops]) =>
      Object.entries(ops)
        .filter(([method]) => ['get', 'post', 'put', 'patch', 'delete'].includes(method))
        .map(([method, spec]) => ({ path, method, spec })),
    );
    assert.ok(operations.length > 30, 'the document lists every route');
  });
  after(async () => t?.stop());

  /** The documented response for `status`, and an ajv validator for its JSON body if it has one. */
  function documentedResponse(op: Operation, status: number) {
    const responses = op.spec.responses ?? {};
    const key = String(status) in responses ? String(status) : 'default' in responses ? 'default' : undefined;
    if (!key) return undefined;
    const content = responses[key].content ?? {};
    const mediaType = Object.keys(content)[0];
    const validate = mediaType && content[mediaType].schema ? ajv.getSchema(`${DOC_ID}#${pointer('paths', op.path, op.method, 'responses', key, 'content', mediaType, 'schema')}`) : undefined;
    return { mediaType, validate };
  }

  async function call(op: Operation, id: string, segment: string, body: unknown, request: { credential?: string | null; query?: string } = {}): Promise<void> {
    // Deleting or resetting the shared instance would only test 404s afterwards: use a fresh one.
    if (op.path === '/api/instances/{id}' && op.method === 'delete' && id === instanceId) {
      id = (await t.admin.post('/api/instances', { name: 'Throwaway' })).body.id;
    }
    const path = op.path.replace('{id}', encodeURIComponent(id)).replace(/\{\w+\}/g, encodeURIComponent(segment)) + (request.query ?? '');
    const withBody = !['get', 'delete'].includes(op.method) && body !== undefined;
    const credential = request.credential === undefined ? t.adminKey : request.credential;
    const res = await fetch(t.url + path, {
      method: op.method.toUpperCase(),
      headers: { ...(credential === null ? {} : { authorization: `Bearer ${credential}` }), ...(withBody ? { 'content-type': 'application/json' } : {}) },
      body: withBody ? JSON.stringify(body) : undefined,
    });
    const text = await res.text();
    const where = `${op.method.toUpperCase()} ${path} ${withBody ? JSON.stringify(body).slice(0, 300) : ''} → ${res.status} ${text.slice(0, 300)}`;
    assert.ok(res.status < 500, where);
    if (res.status === 401) assert.match(res.headers.get('www-authenticate') ?? '', /^Bearer/, where);
    const documented = documentedResponse(op, res.status);
    assert.ok(documented, `status ${res.status} is not in the document: ${where}`);
    if (documented.mediaType?.includes('json') && documented.validate) {
      assert.match(res.headers.get('content-type') ?? '', documented.mediaType === 'application/problem+json' ? /^application\/problem\+json/ : /json/, where);
      const ok = documented.validate(JSON.parse(text));
      validatedBodies++;
      assert.ok(ok, `${where}\nschema errors: ${JSON.stringify(documented.validate.errors)}`);
    }
  }

  function requestSchema(op: Operation) {
    return op.spec.requestBody?.content?.['application/json']?.schema;
  }

  it('valid bodies from the request schemas: documented statuses and bodies, never 5xx', async () => {
    const arbitrary = fc.constantFrom(...operations).chain((op) =>
      fc.tuple(
        fc.constant(op),
        fc.oneof({ weight: 4, arbitrary: fc.constant(instanceId) }, { weight: 1, arbitrary: fc.constant('inst-unknown') }),
        fc.stringMatching(/^[a-z0-9_-]{1,20}$/),
        requestSchema(op) ? arbitraryFor(requestSchema(op), doc) : fc.constant(undefined),
      ),
    );
    const runs = Number(process.env.PROPERTY_RUNS ?? 300);
    await fc.assert(fc.asyncProperty(arbitrary, ([op, id, segment, body]) => call(op, id, segment, body)), { numRuns: runs });
    assert.ok(validatedBodies > runs / 2, `most answers were checked against a schema (${validatedBodies} of ${runs})`);
  });

  it('arbitrary JSON bodies: documented problem documents, never 5xx', async () => {
    const arbitrary = fc.tuple(fc.constantFrom(...operations.filter((op) => requestSchema(op))), fc.jsonValue({ maxDepth: 3 }));
    await fc.assert(fc.asyncProperty(arbitrary, ([op, body]) => call(op, instanceId, 'x', body)), { numRuns: Number(process.env.PROPERTY_RUNS ?? 300) });
  });

  it('any credential and query on any route: documented statuses and bodies, never 5xx', async () => {
    // The shared instance's token, a key of it, another instance's token, and ones that are no credential.
    const other = (await t.admin.post('/api/instances', { name: 'Other tenant' })).body;
    const integrationKey = (await t.admin.post(`/api/instances/${instanceId}/apps`, { name: 'Property key' })).body.key;
    const ownToken = (await t.admin.get(`/api/instances/${instanceId}/credentials`)).body.apiToken;
    const credentials = [null, t.adminKey, ownToken, integrationKey, other.apiToken, 'sb_not_a_real_token', `${t.adminKey}x`, ''];
    const queryFor = (op: Operation) => {
      const declared = ((op.spec.parameters ?? []) as Array<Record<string, any>>).filter((p) => p.in === 'query');
      const value = (p: Record<string, any>) => fc.oneof(arbitraryFor(p.schema, doc).map(String), fc.string({ maxLength: 30 }));
      const pairs = fc.tuple(...declared.map((p) => fc.option(value(p).map((v) => `${p.name}=${encodeURIComponent(v)}`))), fc.option(fc.string({ maxLength: 10 }).map((v) => `unknown=${encodeURIComponent(v)}`)));
      return pairs.map((all) => {
        const given = all.filter((q): q is string => q !== null);
        return given.length ? `?${given.join('&')}` : '';
      });
    };
    const arbitrary = fc.constantFrom(...operations).chain((op) =>
      fc.tuple(
        fc.constant(op),
        fc.constantFrom(instanceId, other.id, 'inst-unknown'),
        requestSchema(op) ? arbitraryFor(requestSchema(op), doc) : fc.constant(undefined),
        fc.constantFrom(...credentials),
        queryFor(op),
      ),
    );
    await fc.assert(
      fc.asyncProperty(arbitrary, ([op, id, body, credential, query]) => call(op, id, 'x', body, { credential, query })),
      { numRuns: Number(process.env.PROPERTY_RUNS ?? 300) },
    );
  });
});
