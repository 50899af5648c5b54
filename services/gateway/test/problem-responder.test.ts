// problemResponder: every error becomes a problem document; only the log sees what went wrong.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import Koa from 'koa';
import { createLogger, Problem } from '@switchboard/core';
import { problemResponder } from '../src/http/errors.ts';
import { listen } from '../src/listen.ts';

/** An ADMIN_API_KEY as an operator may choose it: no prefix a pattern would recognise. */
const CHOSEN_KEY = 'our-"admin"-key-2026';

describe('problemResponder', () => {
  const lines: { level: number; msg: string; err?: { stack?: string }; problem?: string }[] = [];
  let server: Awaited<ReturnType<typeof listen>>;

  before(async () => {
    const log = createLogger({ level: 'info', secrets: [CHOSEN_KEY], destination: new Writable({ write: (chunk, _enc, done) => (lines.push(JSON.parse(String(chunk))), done()) }) });
    const app = new Koa();
    app.silent = true;
    app.use(problemResponder(log));
    app.use((ctx) => {
      if (ctx.path === '/bug') throw new Error('connection to postgres://user:pw@db failed');
      if (ctx.path === '/not-ready') throw new Problem(503, 'not_ready', 'Not ready: the database did not answer.');
      if (ctx.path === '/db-down') throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }); // as pg raises it
      if (ctx.path === '/integrity') throw new Problem(500, 'media_integrity_failed', 'The stored file failed its integrity check.');
      if (ctx.path === '/bad') throw new Problem(400, 'validation_failed', 'The request is not valid.');
      if (ctx.path.startsWith('/lookup/')) throw new Problem(404, 'not_found', `Instance ${decodeURIComponent(ctx.path.slice(8))} does not exist.`);
      if (ctx.path.startsWith('/fail/')) throw new Error(`lookup of ${decodeURIComponent(ctx.path.slice(6))} failed`);
      if (ctx.path === '/bad-from-koa') throw Object.assign(new Error('Invalid JSON'), { status: 400, expose: true }); // as http-errors raises them
      ctx.status = 404;
    });
    server = await listen(app, 0, '127.0.0.1');
  });
  after(() => server.close());
  beforeEach(() => (lines.length = 0));

  const get = async (path: string) => {
    const res = await fetch(`http://127.0.0.1:${server.port}${path}`);
    return { status: res.status, type: res.headers.get('content-type'), body: await res.json() };
  };

  it('answers an unexpected error with a generic 500 and logs it with its stack', async () => {
    const res = await get('/bug');
    assert.equal(res.status, 500);
    assert.equal(res.type, 'application/problem+json');
    assert.equal(res.body.code, 'internal_error');
    assert.doesNotMatch(JSON.stringify(res.body), /postgres|pw@|at /, 'nothing of the error reaches the client');
    assert.equal(lines.length, 1);
    assert.equal(lines[0].level, 50);
    assert.match(lines[0].err?.stack ?? '', /connection to postgres/);
  });

  it('logs a 5xx answered on purpose by its code, without a stack; a dependency not ready is a warning', async () => {
    assert.equal((await get('/not-ready')).status, 503);
    assert.equal((await get('/integrity')).status, 500);
    assert.deepEqual(lines.map((l) => [l.level, l.problem, l.err]), [[40, 'not_ready', undefined], [50, 'media_integrity_failed', undefined]]);
  });

  it('answers a database that cannot be reached with a 503 to retry, logged as a warning without a stack', async () => {
    const res = await fetch(`http://127.0.0.1:${server.port}/db-down`);
    assert.equal(res.status, 503);
    assert.equal(res.headers.get('retry-after'), '1');
    const body = await res.json();
    assert.equal(body.code, 'database_unavailable');
    assert.doesNotMatch(JSON.stringify(body), /ECONNREFUSED|5432/, 'nothing of the error reaches the client');
    assert.deepEqual(lines.map((l) => [l.level, l.problem, l.err]), [[40, 'database_unavailable', undefined]]);
  });

  it('does not log what the client got wrong', async () => {
    assert.equal((await get('/bad')).status, 400);
    assert.equal((await get('/bad-from-koa')).status, 400);
    const notFound = await get('/nothing-here');
    assert.equal(notFound.status, 404);
    assert.equal(notFound.body.code, 'not_found');
    assert.equal(lines.length, 0);
  });

  it('keeps a secret without a recognisable shape (a chosen admin key) out of log lines, not out of what the client sent', async () => {
    // The client reads its own path back: replacing the key there would confirm a guess of it.
    const res = await get(`/lookup/${encodeURIComponent(CHOSEN_KEY)}`);
    assert.equal(res.status, 404);
    assert.equal(res.body.detail, `Instance ${CHOSEN_KEY} does not exist.`);
    assert.equal((await get(`/fail/${encodeURIComponent(CHOSEN_KEY)}`)).status, 500);
    assert.equal(lines.length, 1);
    assert.match(lines[0].err?.stack ?? '', /lookup of \[redacted\] failed/);
    assert.ok(!JSON.stringify(lines).includes('admin'), 'the key, as written, JSON-escaped or percent-encoded in the path');
  });

  it('logs the path of a failed request decoded where a credential was percent-encoded in it', async () => {
    const token = 'sbi_Ch4BB_F2Gwyz57eTr5g-5C11IUx9XzI7';
    assert.equal((await get(`/fail/${token.replace('_', '%5F')}`)).status, 500);
    assert.equal(lines.length, 1);
    assert.ok(!JSON.stringify(lines).includes(token.slice(4)), JSON.stringify(lines[0]));
    assert.equal((lines[0] as { path?: string }).path, '/fail/sbi_[redacted]');
  });

  it('replaces only secrets long enough not to match a number or a field name', () => {
    const out: string[] = [];
    const log = createLogger({ secrets: ['12', 'status'], destination: new Writable({ write: (chunk, _enc, done) => (out.push(String(chunk)), done()) }) });
    log.info({ count: 123, status: 'ok' }, 'counted');
    assert.deepEqual([JSON.parse(out[0]).count, JSON.parse(out[0]).status], [123, 'ok']);
  });
});
