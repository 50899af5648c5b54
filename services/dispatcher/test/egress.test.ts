// The egress client against a real HTTPS server: the response body is read only up to the cap.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { createEgressClient, EgressError } from '../src/egress.ts';
import { RecentValues } from '../src/recent-values.ts';
import { waitFor } from './support.ts';

const TLS_DIR = join(import.meta.dirname, '..', '..', '..', 'test', 'fixtures', 'tls');

describe('egress client (HTTPS)', function () {
  this.timeout(20_000);
  let server: Server;
  let url: string;
  let closedEarly = 0;
  let tricklesCut = 0;

  before(async () => {
    server = createServer({ cert: readFileSync(join(TLS_DIR, 'server.pem')), key: readFileSync(join(TLS_DIR, 'server-key.pem')) }, (req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'text/plain' });
      if (req.url === '/small') return void res.end('ok');
      if (req.url === '/trickle') {
        // A byte every 50 ms: never idle long enough for a per-chunk time-out.
        const timer = setInterval(() => res.write('x'), 50);
        return void res.once('close', () => {
          clearInterval(timer);
          tricklesCut++;
        });
      }
      // Endless: keeps writing until the client hangs up.
      const chunk = Buffer.alloc(16 * 1024, 'x');
      const pump = () => {
        while (!res.destroyed && res.write(chunk));
        if (!res.destroyed) res.once('drain', pump);
      };
      res.once('close', () => void (res.writableEnded || closedEarly++));
      pump();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('reads a response body up to the cap, then hangs up: an endless body neither hangs nor fails the attempt', async () => {
    const egress = createEgressClient({ allowPrivateTargets: true, timeoutMs: 5000, maxResponseBytes: 64 * 1024 });
    try {
      assert.deepEqual(await egress.post(`${url}/endless`, { 'content-type': 'application/json' }, '{}'), { statusCode: 200, retryAfterMs: undefined });
      assert.deepEqual(await egress.post(`${url}/small`, { 'content-type': 'application/json' }, '{}'), { statusCode: 200, retryAfterMs: undefined });
      // The server notices the hang-up on a later turn of the event loop: wait for it.
      await waitFor('the endless response to be cut off by the client', () => closedEarly >= 1);
      assert.equal(closedEarly, 1, 'the endless response was cut off by the client');
    } finally {
      await egress.close();
    }
  });

  it('cuts a body still trickling in at the deadline; the status that came in time stands', async () => {
    const egress = createEgressClient({ allowPrivateTargets: true, timeoutMs: 600 });
    try {
      assert.deepEqual(await egress.post(`${url}/trickle`, { 'content-type': 'application/json' }, '{}'), { statusCode: 200, retryAfterMs: undefined });
      await waitFor('the trickling response to be cut off by the client', () => tricklesCut === 1);
      assert.deepEqual(await egress.post(`${url}/small`, {}, '{}'), { statusCode: 200, retryAfterMs: undefined }, 'the client still works after cutting a body off');
    } finally {
      await egress.close();
    }
  });
});

describe('RecentValues', () => {
  it('ends an attempt whose host name never resolves at its deadline, as a time-out, with one look-up per host under way', async () => {
    let lookups = 0;
    const hanging = createEgressClient({ allowPrivateTargets: true, timeoutMs: 300, resolve: () => (lookups++, new Promise<string[]>(() => undefined)) });
    try {
      const attempts = await Promise.allSettled([hanging.post('https://hanging.example/a', {}, '{}'), hanging.post('https://hanging.example/b', {}, '{}')]);
      for (const attempt of attempts) {
        assert.equal(attempt.status, 'rejected');
        assert.ok(attempt.reason instanceof EgressError && attempt.reason.kind === 'timeout', String(attempt.reason));
      }
      assert.equal(lookups, 1, 'the second attempt waited for the first look-up');
    } finally {
      await hanging.close();
    }
  });

  it('computes a value once, never remembers a failure, and stays within its bound', () => {
    let computed = 0;
    const values = new RecentValues((key: string) => {
      computed++;
      if (key === 'bad') throw new Error('bad key');
      return key.toUpperCase();
    }, 2);
    assert.equal(values.get('a'), 'A');
    assert.equal(values.get('a'), 'A');
    assert.equal(computed, 1);
    assert.throws(() => values.get('bad'));
    assert.throws(() => values.get('bad'));
    assert.equal(computed, 3, 'a failure is computed again');
    values.get('b');
    values.get('c'); // full: starts over
    values.get('a');
    assert.equal(computed, 6);
  });
});
