// listen(): what Node's HTTP server answers before the app sees a request (raw sockets).
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { PassThrough } from 'node:stream';
import Koa from 'koa';
import { listen } from '../src/listen.ts';

/** Writes `chunks` to `port` with `gapMs` between them, then calls `written`; resolves with
 *  everything read until the server closes the connection. */
function exchangeWith(port: number, chunks: string[], gapMs = 0, written: () => void = () => undefined): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', async () => {
      for (const chunk of chunks) {
        if (socket.destroyed) break;
        socket.write(chunk);
        await new Promise((r) => setTimeout(r, gapMs));
      }
      written();
    });
    let answer = '';
    socket.on('data', (d) => (answer += d.toString('utf8')));
    socket.on('close', () => resolve(answer));
    socket.on('error', reject);
  });
}

/** A promise and the function that resolves it. */
function signal(): { happened: Promise<void>; fire: () => void } {
  let fire: () => void = () => undefined;
  const happened = new Promise<void>((r) => (fire = r));
  return { happened, fire };
}

describe('listen', function () {
  this.timeout(20_000);
  let server: Awaited<ReturnType<typeof listen>>;
  /** /slow answers once the test lets it. */
  let letSlowAnswer: () => void = () => undefined;

  before(async () => {
    const app = new Koa();
    app.use(async (ctx) => {
      if (ctx.path === '/slow') await new Promise<void>((r) => (letSlowAnswer = r));
      ctx.body = { path: ctx.path };
    });
    server = await listen(app, 0, '127.0.0.1');
  });
  after(() => server.close());

  const exchange = (chunks: string[], gapMs = 0, written: () => void = () => undefined) => exchangeWith(server.port, chunks, gapMs, written);
  const statuses = (answer: string) => [...answer.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));

  it('answers a slow pipelined request, then refuses the bytes after it once, however many chunks they come in', async () => {
    const chunks = ['GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE', ...Array.from({ length: 12 }, () => 'MORE GARBAGE\r\n')];
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    // The slow answer waits until every chunk is in: each one met the refusal while it was due.
    const answer = await exchange(chunks, 20, () => letSlowAnswer()).finally(() => process.off('warning', onWarning));
    assert.deepEqual(statuses(answer), [200, 400], answer);
    assert.deepEqual(warnings, [], 'one wait for the slow answer, not one per chunk');
    assert.match(answer, /"path":"\/slow"/);
  });

  it('keeps an idle keep-alive connection past the 5 s of Node\'s default, and says so', async () => {
    const socket = connect(server.port, '127.0.0.1');
    try {
      let answer = '';
      socket.on('data', (d) => (answer += d.toString('utf8')));
      socket.write('GET /first HTTP/1.1\r\nHost: x\r\n\r\n');
      while (!answer.includes('"/first"')) await new Promise((r) => setTimeout(r, 10));
      assert.match(answer, /Keep-Alive: timeout=65/i);
      await new Promise((r) => setTimeout(r, 6_000));
      assert.equal(socket.destroyed || socket.readableEnded, false, 'the connection is still open');
      socket.write('GET /second HTTP/1.1\r\nHost: x\r\n\r\n');
      const deadline = Date.now() + 2_000;
      while (!answer.includes('"/second"') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      assert.deepEqual(statuses(answer), [200, 200], answer);
    } finally {
      socket.destroy();
    }
  });

  it('survives a client that resets right after CONNECT', async () => {
    for (let i = 0; i < 20; i++) {
      await new Promise<void>((resolve) => {
        const socket = connect(server.port, '127.0.0.1', () => {
          socket.write('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n', () => socket.resetAndDestroy());
        });
        socket.on('close', () => resolve());
        socket.on('error', () => undefined);
      });
    }
    assert.deepEqual(statuses(await exchange(['GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'])), [200]);
  });

  it('stops by letting the requests under way finish, closing idle connections, refusing new ones', async () => {
    const app = new Koa();
    const arrived = signal();
    app.use(async (ctx) => {
      arrived.fire();
      await new Promise((r) => setTimeout(r, 300)); // a request still running when the stop comes
      ctx.body = { done: true };
    });
    const stopping = await listen(app, 0, '127.0.0.1');
    const idle = connect(stopping.port, '127.0.0.1');
    const idleClosed = new Promise((r) => idle.on('close', r));
    const busy = exchangeWith(stopping.port, ['GET /work HTTP/1.1\r\nHost: x\r\n\r\n']);
    await arrived.happened;
    const started = performance.now();
    await Promise.all([stopping.close(), idleClosed]);
    const answer = await busy;
    assert.deepEqual(statuses(answer), [200], 'the request under way got its answer');
    assert.match(answer, /"done":true/);
    assert.ok(performance.now() - started < 3000, 'its keep-alive connection was closed after it, not kept for the keep-alive time-out');
    await assert.rejects(new Promise((resolve, reject) => connect(stopping.port, '127.0.0.1', () => resolve(undefined)).on('error', reject)));
  });

  it('answers every pipelined request, and streams a body begun before the stop to its end, then closes', async () => {
    const app = new Koa();
    const streaming = signal();
    app.use(async (ctx) => {
      await new Promise((r) => setTimeout(r, 100));
      if (ctx.path === '/stream') {
        const body = new PassThrough();
        ctx.body = body;
        body.write('begun,');
        setTimeout(streaming.fire, 100); // its headers and first bytes are out when the stop comes
        setTimeout(() => body.end('ended'), 400);
      } else ctx.body = { path: ctx.path };
    });
    const stopping = await listen(app, 0, '127.0.0.1');
    const pipelined = exchangeWith(stopping.port, ['POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\nGET /stream HTTP/1.1\r\nHost: x\r\n\r\n']);
    await streaming.happened;
    const started = performance.now();
    await stopping.close();
    const answer = await pipelined;
    assert.deepEqual(statuses(answer), [200, 200], answer);
    assert.match(answer, /"path":"\/first"/);
    assert.match(answer, /begun,[\s\S]*ended/);
    assert.ok(performance.now() - started < 3000, 'closed once both were answered');
  });

  it('cuts off what is still running when the grace period ends', async () => {
    const app = new Koa();
    const arrived = signal();
    app.use(async () => {
      arrived.fire();
      await new Promise(() => undefined); // never answers
    });
    const stopping = await listen(app, 0, '127.0.0.1');
    const cut = exchangeWith(stopping.port, ['GET /hang HTTP/1.1\r\nHost: x\r\n\r\n']).catch(() => ''); // closed or reset
    await arrived.happened;
    const started = performance.now();
    await stopping.close({ graceMs: 200 });
    assert.ok(performance.now() - started >= 190, 'it had its grace period');
    assert.equal(await cut, '', 'closed without an answer once the grace period was over');
  });

  it('runs no request pipelined behind an answer that closes its connection: unanswered, it was not run, so the client may send it again', async () => {
    const app = new Koa();
    const ran: string[] = [];
    app.use(async (ctx) => {
      ran.push(ctx.path);
      if (ctx.path !== '/stream') return void (ctx.body = { path: ctx.path });
      await new Promise((r) => setTimeout(r, 200)); // its headers go out once the stop has begun
      const body = new PassThrough();
      ctx.body = body;
      body.write('begun,');
      setTimeout(() => body.end('ended'), 400);
    });
    const stopping = await listen(app, 0, '127.0.0.1');
    const socket = connect(stopping.port, '127.0.0.1');
    let answer = '';
    socket.on('data', (d) => (answer += d.toString('utf8')));
    const closed = new Promise((r) => socket.on('close', r));
    socket.write('GET /stream HTTP/1.1\r\nHost: x\r\n\r\n');
    await new Promise((r) => setTimeout(r, 100));
    const stopped = stopping.close({ drainMs: 1000 });
    while (!answer.includes('begun,')) await new Promise((r) => setTimeout(r, 10));
    assert.match(answer, /Connection: close/i);
    socket.write('POST /sends HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n'); // pipelined behind it
    await closed;
    assert.match(answer, /begun,[\s\S]*ended/, 'the streamed answer was finished');
    assert.deepEqual(ran, ['/stream'], 'the pipelined request was not run');
    await stopped;
  });

  it('drains first: says it is stopping, keeps answering new and kept-alive connections, each answer closing its connection', async () => {
    const app = new Koa();
    app.use(async (ctx) => (ctx.body = { path: ctx.path }));
    const state = { stopping: false };
    const stopping = await listen(app, 0, '127.0.0.1', state);
    const kept = connect(stopping.port, '127.0.0.1');
    let keptAnswer = '';
    kept.on('data', (d) => (keptAnswer += d.toString('utf8')));
    const keptClosed = new Promise((r) => kept.on('close', r));
    kept.write('GET /before HTTP/1.1\r\nHost: x\r\n\r\n');
    while (!keptAnswer.includes('"/before"')) await new Promise((r) => setTimeout(r, 10));
    assert.match(keptAnswer, /Connection: keep-alive/i);

    const closed = stopping.close({ drainMs: 600 });
    assert.equal(state.stopping, true, 'the readiness route can say so at once');
    kept.write('GET /kept HTTP/1.1\r\nHost: x\r\n\r\n');
    await keptClosed;
    assert.deepEqual(statuses(keptAnswer), [200, 200], keptAnswer);
    assert.match(keptAnswer.slice(keptAnswer.indexOf('"/before"')), /Connection: close[\s\S]*"\/kept"/i, 'the kept-alive connection was answered, then closed');

    const fresh = await exchangeWith(stopping.port, ['GET /new HTTP/1.1\r\nHost: x\r\n\r\n']);
    assert.deepEqual(statuses(fresh), [200], 'a connection opened while draining is still served');
    assert.match(fresh, /Connection: close/i);

    const pipelined = await exchangeWith(stopping.port, ['GET /one HTTP/1.1\r\nHost: x\r\n\r\nGET /two HTTP/1.1\r\nHost: x\r\n\r\n']);
    assert.deepEqual(statuses(pipelined), [200, 200], 'no pipelined answer is dropped');
    assert.match(pipelined, /"\/two"/);

    await closed;
    await assert.rejects(new Promise((resolve, reject) => connect(stopping.port, '127.0.0.1', () => resolve(undefined)).on('error', reject)));
  });
});
