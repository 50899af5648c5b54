// The management half of the API over real HTTP, on PGlite and on PostgreSQL.
import assert from 'node:assert/strict';
import { Problem, deleteOldReceived, deleteOldSends } from '@switchboard/core';
import { startTestServer, type StorageKind, type TestServer } from '../../../test/support/server.ts';
import { healthRoutes } from '../src/routes/health.ts';
import { eventually } from '../../../test/support/http.ts';
import { request } from 'node:http';
import { connect } from 'node:net';
import { gzipSync } from 'node:zlib';

const name = (n: number) => 'x'.repeat(n);

function assertProblem(res: { status: number; headers: Headers; body: any }, status: number, code?: string) {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/);
  assert.equal(res.body.status, status);
  assert.equal(typeof res.body.title, 'string');
  assert.equal(typeof res.body.detail, 'string');
  assert.equal(typeof res.body.type, 'string');
  if (code) assert.equal(res.body.code, code);
}

/** Writes bytes the HTTP parser must refuse and reads the whole answer. */
function rawRequest(url: string, bytes: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(bytes));
    let answer = '';
    socket.on('data', (d) => (answer += d.toString('utf8')));
    socket.on('end', () => resolve(answer));
    socket.on('error', reject);
  });
}

for (const storage of ['pglite', 'postgres'] as StorageKind[]) {
  describe(`management API (${storage})`, function () {
    this.timeout(60_000);
    let t: TestServer;

    before(async () => {
      t = await startTestServer({ storage });
    });
    after(async () => {
      await t?.stop();
    });

    const createInstance = async (n = 'Support line', projectId?: string | null) => {
      const res = await t.admin.post('/api/instances', { name: n, projectId });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      return res.body;
    };

    it('health needs no credential, ready checks storage and bus, openapi is served', async () => {
      const health = await t.client().get('/health');
      assert.equal(health.status, 200);
      assert.deepEqual(health.body, { status: 'ok' });
      assert.equal((await t.client().get('/ready')).status, 200);
      const doc = await t.client().get('/openapi.json');
      assert.equal(doc.status, 200);
      assert.equal(doc.body.openapi, '3.1.0');
      assert.ok(doc.body.paths['/api/instances/{id}/messages'].post);
      // Security as the spec's Auth column says: a Bearer credential, or for media a signed link instead.
      assert.deepEqual(doc.body.paths['/api/instances/{id}/messages'].post.security, [{ bearer: [] }]);
      assert.deepEqual(doc.body.paths['/api/instances/{id}/media/{mediaId}'].get.security, [{ bearer: [] }, {}]);
      assert.deepEqual(doc.body.paths['/health'].get.security, []);
      // A project id is a Kubernetes name of at most 40 characters, as the server enforces.
      const projectBody = doc.body.paths['/api/projects'].post.requestBody.content['application/json'].schema;
      assert.equal(projectBody.properties.projectId.anyOf[0].maxLength, 40);
      // A body is required where no body is not a valid request; an edit of optional fields may omit it.
      assert.equal(doc.body.paths['/api/instances/{id}/messages'].post.requestBody.required, true);
      assert.equal(doc.body.paths['/api/instances/{id}/webhook'].put.requestBody.required, true);
      assert.equal(doc.body.paths['/api/instances/{id}'].patch.requestBody.required, false);
      assert.equal(doc.body.paths['/api/instances/{id}/settings'].put.requestBody.required, false);
      // Every success answers a body, and says of what kind: JSON, or a media file's own type.
      for (const [path, operations] of Object.entries(doc.body.paths as Record<string, Record<string, any>>)) {
        for (const [method, op] of Object.entries(operations)) {
          for (const [status, response] of Object.entries(op.responses as Record<string, any>)) {
            if (Number(status) < 300) assert.ok(Object.keys(response.content ?? {}).length, `${method} ${path} ${status} declares its content`);
          }
        }
      }
      assert.deepEqual(Object.keys(doc.body.paths['/api/instances/{id}/media/{mediaId}'].get.responses['200'].content), ['*/*']);
      // Every API route may answer 503 while the database is away; a probe only what it declares.
      assert.ok(doc.body.paths['/api/instances/{id}/reset'].post.responses['503']);
      assert.deepEqual(Object.keys(doc.body.paths['/health'].get.responses), ['200']);
      assert.deepEqual(Object.keys(doc.body.paths['/ready'].get.responses), ['200', '503']);
      // Each operation names its credential (Admin or Any, as the spec's Auth column) and has a unique id.
      const operations = Object.values(doc.body.paths).flatMap((p: any) => Object.values(p)) as { operationId: string; description: string }[];
      assert.equal(new Set(operations.map((o) => o.operationId)).size, operations.length);
      assert.equal(doc.body.paths['/api/instances/{id}/messages'].post.operationId, 'postApiInstancesIdMessages');
      assert.match(doc.body.paths['/api/instances/{id}/connect'].post.description, /^Credential: the administrative key\.$/);
      assert.match(doc.body.paths['/api/instances/{id}/messages'].post.description, /instance's token/);
      assert.ok(doc.body.paths['/api/instances/{id}/media/{mediaId}'].get.responses['500'], 'a stored file failing its check is documented');
    });

    it('echoes a client X-Request-Id only when it is one plain token', async () => {
      const idFor = async (given: string) => (await t.client().get('/health', { 'x-request-id': given })).headers.get('x-request-id');
      const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
      assert.equal(await idFor('trace-42:abc/DEF=_.+@'), 'trace-42:abc/DEF=_.+@');
      assert.equal(await idFor('x'.repeat(128)), 'x'.repeat(128));
      // Logs and support tickets quote it: a new id instead of one with spaces or a cut-off one.
      for (const odd of ['two words', 'x'.repeat(129), 'tab\there']) assert.match((await idFor(odd)) ?? '', uuid, odd);
      assert.match((await t.client().get('/health')).headers.get('x-request-id') ?? '', uuid);
    });

    it('unknown routes and methods answer with problem documents', async () => {
      assertProblem(await t.admin.get('/api/nope'), 404, 'not_found');
      assertProblem(await t.admin.request('PATCH', '/api/stats'), 405);
      const wrongMethod = await t.admin.get('/api/instances/any/pairing-code');
      assertProblem(wrongMethod, 405, 'method_not_allowed');
      assert.equal(wrongMethod.headers.get('cache-control'), 'no-store', 'every answer to the pairing-code path');
      const malformed = await rawRequest(t.url, 'POST /api/instances/any/pairing-code HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
      assert.match(malformed, /^HTTP\/1\.1 400 /);
      assert.match(malformed, /\r\ncache-control: no-store\r\n/i, 'a malformed request to it too');
      // A method no route has is the client's fault too (the router's bare 501 before).
      const propfind = await t.admin.request('PROPFIND', '/api/projects');
      assertProblem(propfind, 405, 'method_not_allowed');
      assert.equal(propfind.headers.get('allow'), 'HEAD, GET, POST');
      const trace = await rawRequest(t.url, 'TRACE /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'); // fetch() refuses TRACE
      assert.match(trace, /^HTTP\/1\.1 405 /);
      assert.match(trace, /\r\nallow: HEAD, GET\r\n/i);
      // /metrics (served before the router) answers methods as the router's paths do.
      assert.equal((await t.client().request('HEAD', '/metrics')).status, 200);
      const postMetrics = await t.client().request('POST', '/metrics');
      assertProblem(postMetrics, 405, 'method_not_allowed');
      assert.equal(postMetrics.headers.get('allow'), 'HEAD, GET');
      const optionsMetrics = await t.client().request('OPTIONS', '/metrics');
      assert.equal(optionsMetrics.status, 200);
      assert.equal(optionsMetrics.headers.get('allow'), 'HEAD, GET');
    });

    it('answers requests the HTTP parser refuses with problem documents', async () => {
      const huge = await rawRequest(t.url, `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
      assert.match(huge, /^HTTP\/1\.1 431 /);
      assert.match(huge, /content-type: application\/problem\+json/i);
      assert.equal(JSON.parse(huge.slice(huge.indexOf('\r\n\r\n') + 4)).code, 'headers_too_large');
      const garbled = await rawRequest(t.url, 'GET /health HTTP/1.1\r\nHost x\r\n\r\n');
      assert.match(garbled, /^HTTP\/1\.1 400 /);
      assert.equal(JSON.parse(garbled.slice(garbled.indexOf('\r\n\r\n') + 4)).code, 'malformed_request');
      // What Node would answer with an empty body, or not at all.
      const problemOf = (answer: string) => {
        assert.match(answer, /content-type: application\/problem\+json/i, answer);
        const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
        assert.notEqual(body.title, 'Error', 'every status has its own title');
        return [Number(answer.slice(9, 12)), body.code];
      };
      assert.deepEqual(problemOf(await rawRequest(t.url, 'GET /health HTTP/1.1\r\nConnection: close\r\n\r\n')), [400, 'host_required']);
      // Repeated Host or Authorization lines: Node keeps the first, a proxy in front may keep the last.
      assert.deepEqual(problemOf(await rawRequest(t.url, 'GET /health HTTP/1.1\r\nHost: x\r\nHost: y\r\nConnection: close\r\n\r\n')), [400, 'duplicate_header']);
      const twoCredentials = `GET /api/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${t.adminKey}\r\nAuthorization: Bearer nope\r\nConnection: close\r\n\r\n`;
      assert.deepEqual(problemOf(await rawRequest(t.url, twoCredentials)), [400, 'duplicate_header']);
      assert.deepEqual(problemOf(await rawRequest(t.url, 'GET /health HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nConnection: close\r\n\r\n')), [417, 'expectation_failed']);
      assert.deepEqual(problemOf(await rawRequest(t.url, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n')), [405, 'method_not_allowed']);
      // A method no HTTP parser knows, on a well-formed line: named as such, and still the client's fault.
      assert.deepEqual(problemOf(await rawRequest(t.url, 'FETCHALL /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')), [400, 'unknown_method']);
    });

    it('answers the complete requests before refusing the bytes after them (pipelining)', async () => {
      const statuses = (answer: string) => [...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
      const get = 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n';
      assert.deepEqual(statuses(await rawRequest(t.url, `${get}${get}GARBAGE\r\n\r\n`)), [200, 200, 400]);
      assert.deepEqual(statuses(await rawRequest(t.url, `${get}FETCHALL /health HTTP/1.1\r\nHost: x\r\n\r\n`)), [200, 400]);
      const body = JSON.stringify({ name: 'Pipelined' });
      const post = `POST /api/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${t.adminKey}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
      const answer = await rawRequest(t.url, `${post}GARBAGE\r\n\r\n`);
      assert.deepEqual(statuses(answer), [201, 400], 'the project that was created is reported as created');
      // A request line right after a body (no line break between them) is judged from its method.
      const second = post.replace(body, JSON.stringify({ name: 'Pipelined' }).replace('d"', 'x"'));
      assert.deepEqual(statuses(await rawRequest(t.url, `${second}FETCHALL /health HTTP/1.1\r\nHost: x\r\n\r\n`)), [201, 400]);
      assert.match(answer, /"name":"Pipelined"/);
    });

    it('checks a credential again after a body that took long to arrive: a key revoked or an instance paused meanwhile counts', async () => {
      const inst = await createInstance('Slow body');
      const key = (await t.admin.post(`/api/instances/${inst.id}/apps`, { name: 'slow client' })).body;
      /** A send whose body arrives in two parts, `meanwhile` running between them. */
      const slowSend = (token: string, meanwhile: () => Promise<unknown>) =>
        new Promise<{ status: number; code?: string }>((resolve, reject) => {
          const body = JSON.stringify({ phone: '5511912345678', type: 'text', text: 'late' });
          const req = request(`${t.url}/api/instances/${inst.id}/messages`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
            let text = '';
            res.on('data', (chunk) => (text += chunk));
            res.on('end', () => resolve({ status: res.statusCode!, code: JSON.parse(text).code }));
          });
          req.on('error', reject);
          req.write(body.slice(0, 10));
          setTimeout(() => void meanwhile().then(() => req.end(body.slice(10)), reject), 300);
        });
      assert.deepEqual(await slowSend(key.key, () => t.admin.delete(`/api/instances/${inst.id}/apps/${key.appId}`)), { status: 401, code: 'unauthorized' });
      assert.deepEqual(await slowSend(inst.apiToken, () => t.admin.post(`/api/instances/${inst.id}/disconnect`)), { status: 409, code: 'instance_paused' });
      const renewed = await slowSend(inst.apiToken, () => t.admin.post(`/api/instances/${inst.id}/token`));
      assert.equal(renewed.status, 401);
    });

    it('refuses a JSON null body instead of reading it as no fields', async () => {
      const inst = await createInstance();
      await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: 'https://hooks.example.com/kept' });
      assertProblem(await t.admin.put(`/api/instances/${inst.id}/webhook`, 'null'), 400);
      assert.equal((await t.admin.get(`/api/instances/${inst.id}`)).body.webhook.url, 'https://hooks.example.com/kept');
    });

    it('reads request bodies as JSON only and says which fields are missing or mistyped', async () => {
      const post = (contentType: string, body: string) =>
        fetch(`${t.url}/api/projects`, { method: 'POST', headers: { authorization: `Bearer ${t.adminKey}`, 'content-type': contentType }, body });
      for (const [contentType, body] of [['text/plain', '{"name":"Plain"}'], ['application/x-www-form-urlencoded', 'name=Form'], [';;;', '{"name":"No type"}'], ['+json', '{"name":"No type"}'], ['application/+json', '{"name":"No subtype"}']]) {
        const res = await post(contentType, body);
        assertProblem({ status: res.status, headers: res.headers, body: await res.json() }, 400, 'unsupported_content_type');
      }
      assert.equal((await post('application/json; charset=utf-8', '{"name":"With charset"}')).status, 201);
      assert.equal((await post('application/merge-patch+json', '{"name":"A +json type"}')).status, 201);
      assert.equal((await post('application/json', '\ufeff{"name":"After a byte order mark"}')).status, 201);
      // Bytes that are not UTF-8 JSON are refused, not stored with their letters replaced.
      const raw = async (headers: Record<string, string>, bytes: Buffer, code: string) => {
        const res = await fetch(`${t.url}/api/projects`, { method: 'POST', headers: { authorization: `Bearer ${t.adminKey}`, 'content-type': 'application/json', ...headers }, body: new Uint8Array(bytes) as Uint8Array<ArrayBuffer> });
        assertProblem({ status: res.status, headers: res.headers, body: await res.json() }, 400, code);
      };
      const latin1 = Buffer.from('{"name":"Caf\xe9 latin1"}', 'latin1');
      await raw({ 'content-type': 'application/json; charset=iso-8859-1' }, latin1, 'invalid_json');
      await raw({}, latin1, 'invalid_json');
      // A charset parameter changes nothing (RFC 8259 §11): ASCII JSON labelled latin-1 is JSON.
      const labelled = await fetch(`${t.url}/api/projects`, { method: 'POST', headers: { authorization: `Bearer ${t.adminKey}`, 'content-type': 'application/json; charset=iso-8859-1' }, body: '{"name":"Labelled Latin-1"}' });
      assert.equal(labelled.status, 201);
      await raw({ 'content-encoding': 'gzip' }, gzipSync('{"name":"Compressed"}'), 'unsupported_content_encoding');
      await raw({ 'content-encoding': 'gzip' }, Buffer.from('{"name":"Said compressed"}'), 'unsupported_content_encoding');
      const chunk = '{"name":"Gzip in transfer"}';
      const gzipTransfer = `POST /api/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${t.adminKey}\r\nContent-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n${chunk.length.toString(16)}\r\n${chunk}\r\n0\r\n\r\n`;
      const transferAnswer = await rawRequest(t.url, gzipTransfer);
      assert.equal(JSON.parse(transferAnswer.slice(transferAnswer.indexOf('\r\n\r\n') + 4)).code, 'unsupported_content_encoding', transferAnswer);
      const names = ((await t.admin.get('/api/projects')).body.data as { name: string }[]).map((p) => p.name);
      assert.ok(!names.some((n) => /latin1|ompressed/.test(n)), `nothing refused was created: ${names.join(', ')}`);
      const mistyped = await t.admin.post('/api/projects', { name: 123 });
      assertProblem(mistyped, 400, 'validation_failed');
      assert.equal(mistyped.body.errors[0].path, 'name');
      assert.notEqual(mistyped.body.errors[0].message, 'required', 'a present value of the wrong type is not "required"');
      assert.equal((await t.admin.post('/api/projects', {})).body.errors[0].message, 'required');
    });

    it('refuses, before parsing it, a body nested deeper or with more values than any request has', async () => {
      const inst = await createInstance();
      const send = (body: string) => t.client(inst.apiToken).post(`/api/instances/${inst.id}/messages`, body);
      const text = '{"phone":"5511988887777","type":"text","text":"hi"';
      const nested = (levels: number) => `${text},"x":${'['.repeat(levels)}${']'.repeat(levels)}}`;
      // An unknown field is ignored when it is shallow; nested past 32 levels the body is refused.
      assert.equal((await send(nested(30))).status, 202);
      const deep = await send(nested(33));
      assertProblem(deep, 400, 'validation_failed');
      assert.match(deep.body.errors[0].message, /deeper than 32/);
      // Refused before parsing: what follows the 10,001st value is never read.
      const many = await send(`${text},"x":[${'0,'.repeat(10_001)} not json at all`);
      assertProblem(many, 400, 'validation_failed');
      assert.match(many.body.errors[0].message, /more than 10000 values/);
      // Brackets, commas and escaped quotes inside strings are text, not structure.
      const inString = ',[{'.repeat(5_000) + '\\"\\\\';
      const plain = await send(JSON.stringify({ phone: '5511988887777', type: 'text', text: inString }));
      assert.equal(plain.status, 202, JSON.stringify(plain.body).slice(0, 500));
    });

    describe('projects', () => {
      it('creates, lists, renames and deletes with name boundaries', async () => {
        assertProblem(await t.admin.post('/api/projects', { name: name(1) }), 400, 'validation_failed');
        assertProblem(await t.admin.post('/api/projects', { name: name(71) }), 400, 'validation_failed');
        assertProblem(await t.admin.post('/api/projects', {}), 400, 'validation_failed');
        const short = await t.admin.post('/api/projects', { name: name(2) });
        assert.equal(short.status, 201);
        const long = await t.admin.post('/api/projects', { name: name(70) });
        assert.equal(long.status, 201);
        assert.deepEqual(Object.keys(long.body).sort(), ['createdAt', 'id', 'name', 'updatedAt']);
        const list = await t.admin.get('/api/projects');
        assert.equal(list.status, 200);
        assert.ok(list.body.data.some((p: any) => p.id === short.body.id));
        assert.equal(list.body.data[0].id, long.body.id, 'newest first');

        const renamed = await t.admin.patch(`/api/projects/${short.body.id}`, { name: 'Renamed' });
        assert.equal(renamed.status, 200);
        assert.equal(renamed.body.name, 'Renamed');
        assertProblem(await t.admin.patch(`/api/projects/${short.body.id}`, { name: 'R' }), 400);
        assertProblem(await t.admin.patch(`/api/projects/${short.body.id}`, { name: 'Renamed', projectId: 'other' }), 400);
        assertProblem(await t.admin.patch('/api/projects/absent', { name: 'Whatever' }), 404);
        assert.equal((await t.admin.delete(`/api/projects/${short.body.id}`)).status, 200);
        assertProblem(await t.admin.delete(`/api/projects/${short.body.id}`), 404);
      });

      it('accepts a client-chosen projectId once', async () => {
        const first = await t.admin.post('/api/projects', { name: 'Acme', projectId: `acme-${storage}` });
        assert.equal(first.status, 201);
        assert.equal(first.body.id, `acme-${storage}`);
        assertProblem(await t.admin.post('/api/projects', { name: 'Acme', projectId: `acme-${storage}` }), 409, 'project_exists');
        assertProblem(await t.admin.post('/api/projects', { name: 'Acme', projectId: 'Not A Name!' }), 400);
      });

      it('deleting a project keeps its instances and integration keys, without project', async () => {
        const project = (await t.admin.post('/api/projects', { name: 'Temporary' })).body;
        const instance = await createInstance('In project', project.id);
        assert.equal(instance.projectId, project.id);
        assert.equal((await t.admin.post(`/api/instances/${instance.id}/apps`, { name: 'In project', projectId: project.id })).status, 201);
        await t.admin.delete(`/api/projects/${project.id}`);
        const after = await t.admin.get(`/api/instances/${instance.id}`);
        assert.equal(after.status, 200);
        assert.equal(after.body.projectId, null);
        assert.equal((await t.admin.get(`/api/instances/${instance.id}/apps`)).body.data[0].projectId, null);
        // As for instances, a key names only a project that exists (the database keeps the reference).
        assertProblem(await t.admin.post(`/api/instances/${instance.id}/apps`, { name: 'Orphan', projectId: project.id }), 404, 'not_found');
        assert.equal((await t.admin.get(`/api/instances/${instance.id}/apps`)).body.data.length, 1);
      });

      it('a project delete racing creates, moves and keys in it answers no 5xx and leaves nothing in it', async () => {
        for (let round = 0; round < 3; round++) {
          const project = (await t.admin.post('/api/projects', { name: `Racing ${round}` })).body;
          const instance = await createInstance(`Mover ${round}`);
          const inProject = { projectId: project.id };
          const [removed, ...others] = await Promise.all([
            t.admin.delete(`/api/projects/${project.id}`),
            t.admin.post('/api/instances', { name: `Child ${round}`, ...inProject }),
            t.admin.post('/api/instances', { name: `Child ${round}b`, ...inProject }),
            t.admin.patch(`/api/instances/${instance.id}`, inProject),
            t.admin.post(`/api/instances/${instance.id}/apps`, { name: 'Key', ...inProject }),
            t.admin.post(`/api/instances/${instance.id}/apps`, { name: 'Key b', ...inProject }),
          ]);
          assert.equal(removed.status, 200);
          for (const r of others) assert.ok(r.status < 500, `${r.status} ${JSON.stringify(r.body)}`);
          const instances = (await t.admin.get('/api/instances')).body.data;
          assert.ok(!instances.some((i: any) => i.projectId === project.id), 'no instance in the deleted project');
          const keys = (await t.admin.get(`/api/instances/${instance.id}/apps`)).body.data;
          assert.ok(!keys.some((k: any) => k.projectId === project.id), 'no key in the deleted project');
        }
      });
    });

    describe('instances and credentials', () => {
      it('creates with apiToken and returns the full record', async () => {
        assertProblem(await t.admin.post('/api/instances', { name: name(1) }), 400);
        assertProblem(await t.admin.post('/api/instances', { name: name(71) }), 400);
        const invisible = ['\u200e\u200f', '\u00ad\u00ad', '\u034f\u034f', '\ufe0f\ufe0f', '\u3164\u3164', '\u2800\u2800', '\u180e\u180e', '\u{E0020}\u{E0020}', '\u0001\u0002'];
        for (const blank of ['   ', '\n\n', '\u200b\u200b', '\u00a0\u00a0', ...invisible]) assertProblem(await t.admin.post('/api/instances', { name: blank }), 400);
        for (const visible of ['日本', '👍🏽', 'e\u0301\u200d']) assert.equal((await t.admin.post('/api/instances', { name: visible })).status, 201, visible);
        assert.equal((await t.admin.post('/api/instances', { name: name(70) })).status, 201);
        assertProblem(await t.admin.post('/api/instances', { name: 'No such project', projectId: 'missing' }), 404);
        // An id no project can have is bad input, as it is for projects and keys; a well-formed one that names nothing is absent.
        assertProblem(await t.admin.post('/api/instances', { name: 'Malformed project', projectId: 'BAD_ID' }), 400, 'validation_failed');
        const inst = await createInstance();
        assertProblem(await t.admin.patch(`/api/instances/${inst.id}`, { projectId: 'BAD_ID' }), 400, 'validation_failed');
        assertProblem(await t.admin.patch(`/api/instances/${inst.id}`, { projectId: 'missing' }), 404);
        assert.match(inst.apiToken, /^sbi_/);
        assert.match(inst.id, /^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$/);
        for (const key of ['id', 'name', 'projectId', 'state', 'connected', 'qrCode', 'qrImage', 'phone', 'paused', 'settings', 'webhook', 'createdAt', 'updatedAt']) {
          assert.ok(key in inst, `missing ${key}`);
        }
        // The session starts with the instance: its QR code is read by getting it.
        assert.ok(['starting', 'awaiting_scan'].includes(inst.state), inst.state);
        assert.equal(inst.paused, false);
        assert.equal(inst.connected, false);
        const waiting = await eventually(async () => {
          const got = (await t.admin.get(`/api/instances/${inst.id}`)).body;
          return got.state === 'awaiting_scan' && got;
        }, 10_000, 'the new instance to show a QR code');
        assert.equal(typeof waiting.qrCode, 'string');
        assert.equal(inst.settings.notifyFromMe, false);
        assert.deepEqual(inst.webhook, { url: '', received: '', delivery: '', status: '', connected: '', disconnected: '', presence: '', format: 'native', settings: inst.settings });
        const patched = await t.admin.patch(`/api/instances/${inst.id}`, { name: 'New name' });
        assert.equal(patched.body.name, 'New name');
        assertProblem(await t.admin.patch(`/api/instances/${inst.id}`, { name: 'N' }), 400);
        const listed = await t.admin.get('/api/instances');
        assert.ok(listed.body.data.some((i: any) => i.id === inst.id));
        assert.ok(!('apiToken' in listed.body.data[0]));
      });

      it('enforces 401 and 403 for every credential kind', async () => {
        const a = await createInstance('Instance A');
        const b = await createInstance('Instance B');
        const appKey = (await t.admin.post(`/api/instances/${a.id}/apps`, { name: 'CRM' })).body.key;
        const tokenA = t.client(a.apiToken);
        const keyA = t.client(appKey);

        assertProblem(await t.client().get(`/api/instances/${a.id}`), 401, 'unauthorized');
        assert.equal((await t.client().get(`/api/instances/${a.id}`)).headers.get('www-authenticate'), 'Bearer');
        assertProblem(await t.client('sbi_not-a-token').get(`/api/instances/${a.id}`), 401);
        assertProblem(await t.client('garbage').get(`/api/instances/${a.id}`), 401);
        // The scheme and the credential are separated by spaces or tabs (RFC 9110 §11.4), nothing else.
        const withAuthorization = (authorization: string) => fetch(`${t.url}/api/instances/${a.id}`, { headers: { authorization } });
        assert.equal((await withAuthorization(`bearer \t${a.apiToken} `)).status, 200);
        assert.equal((await withAuthorization(`Bearer\u00a0${a.apiToken}`)).status, 401);

        for (const c of [tokenA, keyA]) {
          assert.equal((await c.get(`/api/instances/${a.id}`)).status, 200);
          assert.equal((await c.get(`/api/instances/${a.id}/messages`)).status, 200);
          assert.equal((await c.get(`/api/instances/${a.id}/incoming`)).status, 200);
          assert.equal((await c.get(`/api/instances/${a.id}/events`)).status, 200);
          assertProblem(await c.get(`/api/instances/${b.id}`), 403, 'forbidden');
          assertProblem(await c.get('/api/instances/inst-does-not-exist'), 403, 'forbidden');
          assertProblem(await c.get('/api/instances'), 403);
          assertProblem(await c.post('/api/projects', { name: 'Nope' }), 403);
          assertProblem(await c.post(`/api/instances/${a.id}/connect`), 403);
          assertProblem(await c.get(`/api/instances/${a.id}/credentials`), 403);
          assertProblem(await c.put(`/api/instances/${a.id}/settings`, {}), 403);
          assertProblem(await c.delete(`/api/instances/${a.id}`), 403);
          assertProblem(await c.get('/api/stats'), 403);
        }
        assertProblem(await t.admin.get('/api/instances/inst-does-not-exist'), 404);
      });

      it('renews tokens, recovers credentials and revokes integration keys on the next request', async () => {
        const inst = await createInstance();
        const creds = await t.admin.get(`/api/instances/${inst.id}/credentials`);
        assert.equal(creds.status, 200);
        assert.deepEqual(Object.keys(creds.body).sort(), ['apiToken', 'apiUrl', 'instanceId']);
        assert.equal(creds.body.apiToken, inst.apiToken);
        assert.equal(creds.body.instanceId, inst.id);
        assert.match(creds.body.apiUrl, new RegExp(`/api/instances/${inst.id}$`));

        const renewed = await t.admin.post(`/api/instances/${inst.id}/token`);
        assert.equal(renewed.status, 200);
        assert.notEqual(renewed.body.apiToken, inst.apiToken);
        assertProblem(await t.client(inst.apiToken).get(`/api/instances/${inst.id}`), 401);
        assert.equal((await t.client(renewed.body.apiToken).get(`/api/instances/${inst.id}`)).status, 200);
        assert.equal((await t.admin.get(`/api/instances/${inst.id}/credentials`)).body.apiToken, renewed.body.apiToken);

        assertProblem(await t.admin.post(`/api/instances/${inst.id}/apps`, { name: 'x' }), 400);
        // A project id longer than any project's used to reach the database (500).
        const tooLong = await t.admin.post(`/api/instances/${inst.id}/apps`, { name: 'ERP', projectId: 'A'.repeat(41) });
        assertProblem(tooLong, 400);
        // Too long and of the wrong pattern: one entry for the field, not one per rule it breaks.
        assert.deepEqual(tooLong.body.errors.map((e: { path: string }) => e.path), ['projectId']);
        assertProblem(await t.admin.post(`/api/instances/${inst.id}/apps`, { name: name(71) }), 400);
        const app = await t.admin.post(`/api/instances/${inst.id}/apps`, { name: 'ERP', projectId: null });
        assert.equal(app.status, 201);
        assert.match(app.body.key, /^sbk_/);
        assert.ok(app.body.key.startsWith(app.body.keyPrefix));
        const apps = await t.admin.get(`/api/instances/${inst.id}/apps`);
        assert.equal(apps.body.data.length, 1);
        assert.deepEqual(Object.keys(apps.body.data[0]).sort(), ['appId', 'createdAt', 'keyPrefix', 'name', 'projectId']);
        assert.ok(!apps.text.includes(app.body.key), 'the key is shown only at creation');
        assert.equal((await t.client(app.body.key).get(`/api/instances/${inst.id}`)).status, 200);
        assert.equal((await t.admin.delete(`/api/instances/${inst.id}/apps/${app.body.appId}`)).status, 200);
        assertProblem(await t.client(app.body.key).get(`/api/instances/${inst.id}`), 401);
        assertProblem(await t.admin.delete(`/api/instances/${inst.id}/apps/${app.body.appId}`), 404);
      });

      it('marks every response that carries a secret as not to be cached', async () => {
        const created = await t.admin.post('/api/instances', { name: 'Cache check' });
        const id = created.body.id;
        const carriers = [
          created,
          await t.admin.post(`/api/instances/${id}/token`), // renews: carriers[1] holds the token
          await t.admin.get(`/api/instances/${id}/credentials`),
          await t.admin.post(`/api/instances/${id}/apps`, { name: 'ERP' }),
          await t.admin.put(`/api/instances/${id}/webhook`, { url: 'https://hooks.example.com/all' }),
          await t.admin.get(`/api/instances/${id}/webhook/secret`),
          await t.admin.post(`/api/instances/${id}/webhook/secret`),
          // Instance records may carry a QR code: scanning it links a phone to the instance.
          await t.admin.get(`/api/instances/${id}`),
          await t.admin.get('/api/instances'),
          await t.admin.patch(`/api/instances/${id}`, { name: 'Cache check 2' }),
          await t.admin.post(`/api/instances/${id}/connect`),
        ];
        carriers.push(await t.client(carriers[1].body.apiToken).get(`/api/instances/${id}`));
        carriers.forEach((res, i) => {
          assert.ok(res.status < 300, `response ${i}: ${res.status}`);
          assert.equal(res.headers.get('cache-control'), 'no-store', `response ${i}`);
        });
      });

      it('deletes an instance and its credentials', async () => {
        const inst = await createInstance();
        assert.equal((await t.admin.delete(`/api/instances/${inst.id}`)).status, 200);
        assertProblem(await t.admin.get(`/api/instances/${inst.id}`), 404);
        assertProblem(await t.client(inst.apiToken).get(`/api/instances/${inst.id}`), 401);
        assertProblem(await t.admin.delete(`/api/instances/${inst.id}`), 404);
      });

      it('of concurrent deletes of one instance, one is 200 and the others 404', async () => {
        const inst = await createInstance();
        const statuses = (await Promise.all([1, 2, 3, 4, 5].map(() => t.admin.delete(`/api/instances/${inst.id}`)))).map((r) => r.status);
        assert.deepEqual(statuses.sort(), [200, 404, 404, 404, 404]);
      });

      it('a delete racing connects, edits, keys and pairing codes leaves no session and answers no 5xx', async () => {
        for (let round = 0; round < 3; round++) {
          const inst = await createInstance();
          const base = `/api/instances/${inst.id}`;
          const [removed, ...others] = await Promise.all([
            t.admin.delete(base),
            t.admin.post(`${base}/connect`),
            t.admin.post(`${base}/connect`),
            t.admin.patch(base, { name: `Renamed ${round}` }),
            t.admin.post(`${base}/apps`, { name: 'Racing key' }),
            t.admin.post(`${base}/pairing-code`, { phone: '5511988887777' }),
            t.admin.post(`/sandbox/instances/${inst.id}/scan`, { phone: '5511988887777' }),
          ]);
          assert.equal(removed.status, 200);
          for (const r of others) assert.ok(r.status < 500, `${r.status} ${JSON.stringify(r.body)}`);
          // A call that finds no session because the delete stopped it says the instance is gone.
          for (const r of others) assert.notEqual(r.body?.code, 'instance_not_running');
          assert.equal(t.server.runtime.worker(inst.id), undefined, 'no session runs for a deleted instance');
          assertProblem(await t.admin.get(base), 404);
        }
      });

      it('a call to a session that should run but is down is a 503 to retry; to a disconnected one, a 409', async () => {
        const inst = await createInstance();
        const scan = () => t.admin.post(`/sandbox/instances/${inst.id}/scan`, { phone: '5511988887777' });
        await t.server.runtime.worker(inst.id)!.stop(); // as while it restarts after an outage
        const starting = await scan();
        assertProblem(starting, 503, 'instance_starting');
        assert.equal(starting.headers.get('retry-after'), '2');
        assert.equal((await t.admin.post(`/api/instances/${inst.id}/disconnect`)).status, 200);
        assertProblem(await scan(), 409, 'instance_not_running');
      });
    });

    describe('webhook configuration and settings', () => {
      it('replaces all destinations, keeps the secret, and validates URLs', async () => {
        const inst = await createInstance();
        const saved = await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: 'https://hooks.example.com/all', status: 'https://hooks.example.com/status' });
        assert.equal(saved.status, 200, JSON.stringify(saved.body));
        assert.equal(saved.body.url, 'https://hooks.example.com/all');
        assert.equal(saved.body.received, '');
        assert.equal(saved.body.format, 'native');
        assert.match(saved.body.secret, /^whsec_/);
        const again = await t.admin.put(`/api/instances/${inst.id}/webhook`, { received: 'https://hooks.example.com:443/in' });
        assert.equal(again.body.secret, saved.body.secret, 'secret preserved by later saves');
        assert.equal(again.body.url, '', 'omitted destinations become empty');
        // A save's answer sent back as the next save is the same configuration; a secret of the
        // client's own is refused (the service creates secrets), without echoing it.
        const echoed = await t.admin.put(`/api/instances/${inst.id}/webhook`, again.body);
        assert.equal(echoed.status, 200, JSON.stringify(echoed.body));
        assert.deepEqual(echoed.body, again.body);
        const chosen = await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: 'https://hooks.example.com/mine', secret: 'whsec_chosen-by-the-client' });
        assertProblem(chosen, 400, 'validation_failed');
        assert.deepEqual(chosen.body.errors, [{ path: 'secret', message: 'is not the current signing secret' }]);
        assert.ok(!chosen.text.includes('chosen-by-the-client') && !chosen.text.includes(saved.body.secret), 'neither secret in the answer');
        assert.equal((await t.admin.get(`/api/instances/${inst.id}`)).body.webhook.url, '', 'the refused save changed nothing');
        const record = await t.admin.get(`/api/instances/${inst.id}`);
        assert.equal(record.body.webhook.received, 'https://hooks.example.com:443/in');
        assert.ok(!record.text.includes(saved.body.secret), 'the instance record never shows the secret');
        assert.equal((await t.admin.get(`/api/instances/${inst.id}/webhook/secret`)).body.secret, saved.body.secret);

        for (const bad of ['http://hooks.example.com/x', 'https://hooks.example.com:8443/x', 'https://10.0.0.5/x', 'https://127.0.0.1/x', 'https://[::1]/x', 'https://localhost/x', 'https://printer.local/x', 'https://intranet-host/x', 'https://intranet-host./x', 'https://printer.local./x', 'not a url', 'https://169.254.169.254/latest', ' https://hooks.example.com/x', 'https://hooks.example.com/x\n', '  ']) {
          const res = await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: bad });
          assertProblem(res, 400);
          assert.equal(res.body.errors[0].path, 'url', bad);
        }
        assertProblem(await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: '', format: 'legacy' }), 422, 'unsupported_format');
        const badFormat = await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: '', format: 'xml' });
        assertProblem(badFormat, 400, 'validation_failed');
        assert.equal(badFormat.body.errors[0].path, 'format');
        assert.equal((await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: '', format: 'native' })).status, 200);
        const unknown = await t.admin.put(`/api/instances/${inst.id}/webhook`, { settings: { ignoreEverything: true } });
        assertProblem(unknown, 400);
        assert.equal(unknown.body.errors[0].path, 'settings.ignoreEverything');
        // No body is refused rather than read as "no fields", which would clear every destination.
        await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: 'https://hooks.example.com/kept' });
        assertProblem(await t.admin.put(`/api/instances/${inst.id}/webhook`), 400, 'body_required');
        assertProblem(await t.admin.put(`/api/instances/${inst.id}/webhook`, ''), 400, 'body_required');
        assert.equal((await t.admin.get(`/api/instances/${inst.id}`)).body.webhook.url, 'https://hooks.example.com/kept');
        const withSettings = await t.admin.put(`/api/instances/${inst.id}/webhook`, { settings: { notifyFromMe: true } });
        assert.equal(withSettings.body.settings.notifyFromMe, true);
        // The instance shows the saved configuration without the secret (DESIGN §5 Records).
        const { secret, ...configuration } = withSettings.body;
        assert.ok(secret);
        assert.deepEqual((await t.admin.get(`/api/instances/${inst.id}`)).body.webhook, configuration);

        const regenerated = await t.admin.post(`/api/instances/${inst.id}/webhook/secret`);
        assert.equal(regenerated.status, 200);
        assert.notEqual(regenerated.body.secret, saved.body.secret);
        assert.equal((await t.admin.get(`/api/instances/${inst.id}/webhook/secret`)).body.secret, regenerated.body.secret);
      });

      it('updates settings partially and rejects unknown keys and non-booleans', async () => {
        const inst = await createInstance();
        const first = await t.admin.put(`/api/instances/${inst.id}/settings`, { ignoreGroups: true });
        assert.equal(first.status, 200);
        assert.equal(first.body.ignoreGroups, true);
        const second = await t.admin.put(`/api/instances/${inst.id}/settings`, { autoReadMessages: true });
        assert.equal(second.body.ignoreGroups, true, 'partial update keeps the others');
        assert.equal(second.body.autoReadMessages, true);
        assert.equal(Object.keys(second.body).length, 19);
        assertProblem(await t.admin.put(`/api/instances/${inst.id}/settings`, { ignoreGroups: 'yes' }), 400);
        assertProblem(await t.admin.put(`/api/instances/${inst.id}/settings`, { foo: true }), 400);
        assertProblem(await t.admin.put(`/api/instances/${inst.id}/settings`, '{not json'), 400, 'invalid_json');
        assert.equal((await t.admin.get(`/api/instances/${inst.id}`)).body.settings.ignoreGroups, true);
      });
    });

    describe('stats and diagnostics', () => {
      it('returns valid empty stats and validates dates', async () => {
        const res = await t.admin.get('/api/stats?from=2020-01-01&to=2020-01-31');
        assert.equal(res.status, 200);
        assert.deepEqual(res.body, { from: '2020-01-01', to: '2020-01-31', rows: [] });
        assert.equal((await t.admin.get('/api/stats')).status, 200);
        // A mistyped filter is a 404 naming what is absent, not a range without traffic.
        for (const [query, absent] of [['projectId=none', /project/], ['instanceId=none', /instance/]] as const) {
          const res = await t.admin.get(`/api/stats?${query}`);
          assertProblem(res, 404, 'not_found');
          assert.match(res.body.detail, absent);
        }
        assertProblem(await t.admin.get('/api/stats?from=yesterday'), 400);
        assertProblem(await t.admin.get('/api/stats?from=2020-02-30'), 400);
        assertProblem(await t.admin.get('/api/stats?from=2020-01-01garbage'), 400);
        assertProblem(await t.admin.get('/api/stats?from=0000-01-01'), 400);
        assertProblem(await t.admin.get(`/api/stats?to=${encodeURIComponent('9999-12-31T23:00-02:00')}`), 400, 'validation_failed');
        const widest = await t.admin.get('/api/stats?from=0001-01-01&to=9999-12-31');
        assert.equal(widest.status, 200, 'every date with four digits (the day after to is in year 10000)');
        assert.deepEqual([widest.body.from, widest.body.to], ['0001-01-01', '9999-12-31']);
        assert.equal((await t.admin.get('/api/stats?from=2020-01-01T00:00:00Z&to=2020-01-31')).body.from, '2020-01-01');
        // A time counts on its UTC date; a time that does not exist is refused.
        const local = (await t.admin.get(`/api/stats?from=${encodeURIComponent('2020-01-01T22:30-03:00')}&to=${encodeURIComponent('2020-01-31T08:00+09:00')}`)).body;
        assert.deepEqual([local.from, local.to], ['2020-01-02', '2020-01-30']);
        const edges = (await t.admin.get('/api/stats?from=2016-12-31T23:59:60Z&to=2020-01-31T24:00')).body;
        assert.deepEqual([edges.from, edges.to], ['2016-12-31', '2020-02-01'], 'a leap second, and 24:00 as the end of the day');
        for (const bad of ['2026-01-01T25:00', '2026-11-25T23:99:99Z', '2026-01-01T10:00+24:00', '2026-02-30T10:00Z', '2026-01-01T24:01', '2026-01-01T10:00:61Z']) {
          assertProblem(await t.admin.get(`/api/stats?from=${encodeURIComponent(bad)}`), 400, 'validation_failed');
        }
        assertProblem(await t.admin.get('/api/stats?from=2020-03-01&to=2020-01-01'), 400);
        const wide = await t.admin.get('/api/stats?from=2000-01-01&to=2100-12-31');
        assert.equal(wide.status, 200);
        assert.deepEqual([wide.body.from, wide.body.to], ['2000-01-01', '2100-12-31']);
        const future = await t.admin.get('/api/stats?from=2099-01-01');
        assert.equal(future.status, 200);
        assert.deepEqual([future.body.from, future.body.to], ['2099-01-01', '2099-01-01']);
      });

      it('counts what message retention deleted as before (MESSAGE_RETENTION_MS)', async () => {
        const project = (await t.admin.post('/api/projects', { name: 'Retention' })).body;
        const inst = await createInstance('Retention', project.id);
        const db = t.server.platform.db;
        const at = (iso: string) => new Date(iso);
        const send = (id: string, type: string, status: string, day: string) => ({
          id, instance_id: inst.id, messenger_id: id, phone: '5511999990000', type, payload: '{}', status, created_at: at(`${day}T10:00:00Z`), expires_at: at(`${day}T23:00:00Z`),
        });
        await db('send_items').insert([send('snd-ret-1', 'text', 'read', '2021-03-04'), send('snd-ret-2', 'image', 'failed', '2021-03-04'), send('snd-ret-3', 'text', 'read', '2021-03-06')]);
        const received = (id: string, day: string, fromMe = false) => ({ id, instance_id: inst.id, message_id: id, type: 'text', from_me: fromMe, created_at: at(`${day}T23:30:00Z`) });
        await db('incoming').insert([received('inc-ret-1', '2021-03-04'), received('inc-ret-2', '2021-03-05', true), received('inc-ret-3', '2021-03-06')]);
        const stats = async (query: string) => (await t.admin.get(`/api/stats?from=2021-03-01&to=2021-03-31&${query}`)).body.rows;
        const day = async () => (await t.admin.get('/api/stats?from=2021-03-05&to=2021-03-05')).body.rows;
        const before = { all: await stats(''), project: await stats(`projectId=${project.id}`), instance: await stats(`instanceId=${inst.id}`), day: await day() };
        assert.deepEqual(before.instance, [
          { date: '2021-03-04', direction: 'inbound', type: 'text', count: 1 },
          { date: '2021-03-04', direction: 'outbound', type: 'image', count: 1 },
          { date: '2021-03-04', direction: 'outbound', type: 'text', count: 1 },
          { date: '2021-03-05', direction: 'outbound', type: 'text', count: 1 },
          { date: '2021-03-06', direction: 'inbound', type: 'text', count: 1 },
          { date: '2021-03-06', direction: 'outbound', type: 'text', count: 1 },
        ]);
        // Everything up to 2021-03-05 goes; 2021-03-06 stays as rows: both count, once.
        assert.equal(await deleteOldSends(db, at('2021-03-05T00:00:00Z'), 100), 2);
        assert.equal(await deleteOldReceived(db, at('2021-03-06T00:00:00Z'), 100), 2);
        assert.equal(await db('send_items').where({ instance_id: inst.id }).count({ n: '*' }).first().then((r: any) => Number(r.n)), 1);
        const after = { all: await stats(''), project: await stats(`projectId=${project.id}`), instance: await stats(`instanceId=${inst.id}`), day: await day() };
        assert.deepEqual(after, before);
        const later = await t.admin.get(`/api/stats?from=2021-03-06&to=2021-03-31&instanceId=${inst.id}`);
        assert.deepEqual(later.body.rows, before.instance.slice(4), 'a range without the counted days');
      });

      it('reports instances, queues and media', async () => {
        const res = await t.admin.get('/api/diagnostics');
        assert.equal(res.status, 200);
        assert.equal(typeof res.body.instances.total, 'number');
        assert.equal(typeof res.body.media.count, 'number');
        assert.equal(typeof res.body.media.bytes, 'number');
      });
    });

    it('keeps everything across a restart', async () => {
      const project = (await t.admin.post('/api/projects', { name: 'Persistent' })).body;
      const inst = await createInstance('Persistent instance', project.id);
      const key = (await t.admin.post(`/api/instances/${inst.id}/apps`, { name: 'Kept' })).body.key;
      const secret = (await t.admin.put(`/api/instances/${inst.id}/webhook`, { url: 'https://hooks.example.com/p' })).body.secret;
      await t.restart();
      assert.equal((await t.admin.get(`/api/instances/${inst.id}`)).body.projectId, project.id);
      assert.equal((await t.client(inst.apiToken).get(`/api/instances/${inst.id}`)).status, 200);
      assert.equal((await t.client(key).get(`/api/instances/${inst.id}`)).status, 200);
      assert.equal((await t.admin.get(`/api/instances/${inst.id}/webhook/secret`)).body.secret, secret);
    });
  });
}

describe('rate limit, origin and proxy handling', function () {
  this.timeout(60_000);
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ env: { RATE_LIMIT_PER_MINUTE: '5', ALLOWED_ORIGINS: 'https://app.example.com' } });
  });
  after(async () => t?.stop());

  it('allows 5 requests a minute per IP, then 429 with headers; /health is exempt', async () => {
    for (let i = 0; i < 5; i++) {
      const res = await t.admin.get('/api/projects');
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('ratelimit-limit'), '5');
      assert.equal(res.headers.get('ratelimit-remaining'), String(4 - i));
    }
    const limited = await t.admin.get('/api/projects');
    assertProblem(limited, 429, 'rate_limited');
    assert.ok(Number(limited.headers.get('retry-after')) >= 1);
    assert.ok(Number(limited.headers.get('ratelimit-reset')) >= 1);
    // Every answer to the pairing-code path is not to be stored (spec), a refusal by the limiter too.
    const pairing = await t.admin.post('/api/instances/no-such-instance/pairing-code', { phone: '5511900000001' });
    assertProblem(pairing, 429, 'rate_limited');
    assert.equal(pairing.headers.get('cache-control'), 'no-store');
    assert.equal(limited.headers.get('cache-control'), null, 'other routes answer as before');
    // The router serves the probes in any case and with a trailing slash; so does the exemption.
    for (const probe of ['/health', '/health/', '/HEALTH', '/Ready', '/metrics', '/METRICS/']) assert.equal((await t.client().get(probe)).status, 200, probe);
    // A spelling no probe answers is no probe, so it is limited like any other path.
    for (const path of ['/health//', '/metrics//']) assertProblem(await t.client().get(path), 429, 'rate_limited');
    // X-Forwarded-For is ignored without TRUST_PROXY: still the same client.
    assertProblem(await t.admin.get('/api/projects', { 'x-forwarded-for': '203.0.113.9' }), 429);
    // A page of an allowed origin can read the 429 and when to retry.
    const fromPage = await t.admin.get('/api/projects', { origin: 'https://app.example.com' });
    assertProblem(fromPage, 429, 'rate_limited');
    assert.equal(fromPage.headers.get('access-control-allow-origin'), 'https://app.example.com');
    assert.match(fromPage.headers.get('access-control-expose-headers') ?? '', /Retry-After.*X-Request-Id/);
  });

  it('refuses browser origins that are not allowed', async () => {
    const t2 = await startTestServer({ env: { ALLOWED_ORIGINS: 'https://app.example.com' } });
    try {
      assertProblem(await t2.admin.get('/api/projects', { origin: 'https://evil.example.net' }), 403, 'forbidden');
      for (const probe of ['/health', '/ready']) assert.equal((await t2.client().get(probe, { origin: 'https://evil.example.net' })).status, 200, probe);
      const ok = await t2.admin.get('/api/projects', { origin: 'https://app.example.com' });
      assert.equal(ok.status, 200);
      assert.equal(ok.headers.get('access-control-allow-origin'), 'https://app.example.com');
      assert.equal((await t2.admin.get('/api/projects', { origin: new URL(t2.url).origin.replace('127.0.0.1', 'localhost') })).status, 200);
    } finally {
      await t2.stop();
    }
  });

  it('counts the requests the origin check answers: refused pages and preflights', async () => {
    const t4 = await startTestServer({ env: { RATE_LIMIT_PER_MINUTE: '4', ALLOWED_ORIGINS: 'https://app.example.com' } });
    try {
      // Any client can send an Origin header; those answers are requests like any other.
      assertProblem(await t4.admin.get('/api/projects', { origin: 'https://evil.example.net' }), 403, 'forbidden');
      assertProblem(await t4.admin.get('/api/projects', { origin: 'https://evil.example.net' }), 403, 'forbidden');
      const preflight = await t4.client().request('OPTIONS', '/api/projects', undefined, { origin: 'https://app.example.com' });
      assert.equal(preflight.status, 204);
      assert.equal(preflight.headers.get('ratelimit-remaining'), '1');
      assert.equal((await t4.admin.get('/api/projects')).status, 200);
      assertProblem(await t4.admin.get('/api/projects', { origin: 'https://evil.example.net' }), 429, 'rate_limited');
    } finally {
      await t4.stop();
    }
  });

  it('takes the client IP from X-Forwarded-For only with TRUST_PROXY', async () => {
    const t3 = await startTestServer({ env: { RATE_LIMIT_PER_MINUTE: '2', TRUST_PROXY: 'true' } });
    try {
      for (const ip of ['198.51.100.1', '198.51.100.2']) {
        assert.equal((await t3.admin.get('/api/projects', { 'x-forwarded-for': ip })).status, 200);
        assert.equal((await t3.admin.get('/api/projects', { 'x-forwarded-for': ip })).status, 200);
        assertProblem(await t3.admin.get('/api/projects', { 'x-forwarded-for': ip }), 429);
      }
      // The proxy appends the address it saw: entries before it are the client's to invent.
      for (const invented of ['203.0.113.1', '203.0.113.2']) {
        assertProblem(await t3.admin.get('/api/projects', { 'x-forwarded-for': `${invented}, 198.51.100.1` }), 429);
      }
      // IPv6 clients are counted per /64: another address of the same subscriber shares the count.
      assert.equal((await t3.admin.get('/api/projects', { 'x-forwarded-for': '2001:db8:7:1::a' })).status, 200);
      assert.equal((await t3.admin.get('/api/projects', { 'x-forwarded-for': '2001:db8:7:1:ffff::b' })).status, 200);
      assertProblem(await t3.admin.get('/api/projects', { 'x-forwarded-for': '2001:0db8:0007:0001::c' }), 429);
      assert.equal((await t3.admin.get('/api/projects', { 'x-forwarded-for': '2001:db8:7:2::a' })).status, 200, 'another /64');
      // An entry with a port, or in brackets, is its address; one that is no address is not a
      // fresh client (the proxy's own address counts it).
      assertProblem(await t3.admin.get('/api/projects', { 'x-forwarded-for': '198.51.100.1:5555' }), 429);
      assertProblem(await t3.admin.get('/api/projects', { 'x-forwarded-for': '[2001:db8:7:1::d]:443' }), 429);
      const statuses = [];
      for (const junk of ['junk-a', 'junk-b', 'junk-c']) statuses.push((await t3.admin.get('/api/projects', { 'x-forwarded-for': junk })).status);
      assert.deepEqual(statuses, [200, 200, 429]);
    } finally {
      await t3.stop();
    }
  });
});

describe('readiness', () => {
  it('answers 503 with a problem document naming what did not answer', async () => {
    const ready = healthRoutes.find((r) => r.path === '/ready')!;
    const deps = { db: { raw: async () => Promise.reject(new Error('db down')) }, bus: { pending: async () => 0 } };
    await assert.rejects(
      ready.handler({ deps } as any),
      (err: unknown) => err instanceof Problem && err.status === 503 && err.code === 'not_ready' && /database/.test(err.detail) && !/\bbus\b/.test(err.detail),
    );
  });
});

describe('an admin key the operator chose (no prefix to recognise)', function () {
  this.timeout(60_000);
  const chosen = 'our-own-admin-key-for-ops';
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ env: { ADMIN_API_KEY: chosen } });
  });
  after(() => t?.stop());

  it('never comes back in a problem document, put in a path by mistake', async () => {
    for (const path of [`/api/instances/${chosen}`, `/api/projects/${chosen}`, `/api/${chosen}`, `/api/instances/${chosen}/messages/${chosen}`]) {
      for (const client of [t.admin, t.client()]) {
        const res = await client.get(path);
        assert.ok(res.status >= 400 && res.status < 500, `${path}: ${res.status}`);
        assert.ok(!res.text.includes(chosen), `${path}: ${res.text}`);
      }
    }
  });
});
