import { createServer, ServerResponse, STATUS_CODES, type IncomingMessage, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type Koa from 'koa';
import { Problem } from '@switchboard/core';

/** How long an idle keep-alive connection is kept. */
const KEEP_ALIVE_MS = 65_000;
/** How long a stopping server lets the requests under way finish before it cuts them off. */
const STOP_GRACE_MS = 10_000;

/** Whether the server has begun to stop: set by `close`, read by the readiness route. */
export interface StopState {
  stopping: boolean;
}

export interface CloseOptions {
  /** How long to keep serving first, each answer closing its connection, while the load balancer
   *  takes the process out of rotation (Kubernetes removes a stopping pod's endpoint while the
   *  pod already has its SIGTERM: closing at once refuses the connections still sent to it). */
  drainMs?: number;
  /** How long the requests under way may then run before they are cut off. */
  graceMs?: number;
}

export interface ListeningServer {
  server: Server;
  port: number;
  close(opts?: CloseOptions): Promise<void>;
}

/** Starts an HTTP server for the app; resolves with it and the bound port. `close` marks `state`
 *  stopping, drains, stops taking connections, closes the idle ones, and lets the requests under
 *  way finish (a send being accepted gets its answer) for up to `graceMs`, then cuts off what is
 *  left. */
export function listen(app: Koa, port: number, host: string, state: StopState = { stopping: false }): Promise<ListeningServer> {
  const answering = new WeakMap<object, number>();
  const closingSockets = new WeakSet<object>();
  const handle = app.callback();
  // Node would answer a missing Host with a bare 400; the app answers it with a problem document.
  const server = createServer({ requireHostHeader: false, ServerResponse: drainingResponse(state, answering, closingSockets) }, (req, res) => {
    // Pipelined behind an answer that closes the connection: Node would run it and drop its answer
    // (a send accepted that the client never hears of). Not run, it gets no answer, so the client
    // sends it again, on another connection.
    if (!closingSockets.has(req.socket)) void handle(req, res);
  });
  server.requestTimeout = 120_000; // large media uploads on slow links
  server.headersTimeout = 30_000;
  // An idle keep-alive connection stays open longer than the proxies in front keep theirs (a cloud
  // load balancer's 60 s): a server closing first races the next request sent on it, which then
  // fails with a reset (Node's default is 5 s). Clients learn it from the Keep-Alive header.
  server.keepAliveTimeout = KEEP_ALIVE_MS;
  server.on('clientError', answerUnparsableRequest);
  // Answered by Node itself otherwise: 417 with an empty body, and CONNECT with no answer at all.
  server.on('checkExpectation', (_req, res: ServerResponse) => {
    const body = problemBody(417, 'expectation_failed', 'Only "Expect: 100-continue" is supported.');
    res.writeHead(417, { 'Content-Type': 'application/problem+json', 'Content-Length': Buffer.byteLength(body), Connection: 'close' }).end(body);
  });
  server.on('connect', (_req, socket: Duplex) => writeProblem(socket, 405, 'method_not_allowed', 'CONNECT is not allowed: this is not a proxy.'));
  const stop = gracefulStop(server, state, answering);
  return new Promise((resolve, reject) => {
    // A start that cannot listen names what to change (DESIGN §4: one line naming the variable).
    server.once('error', (err) => reject(new Error(`HOST/PORT: cannot listen on ${host}:${port} (${err.message})`)));
    server.listen(port, host, () => {
      const address = server.address();
      const bound = typeof address === 'object' && address ? address.port : port;
      resolve({
        server,
        port: bound,
        close: stop,
      });
    });
  });
}

/** The server's stop: first a drain, in which every answer closes its connection (clients open
 *  their next one to another replica); then no new connections; idle ones (also those that never
 *  sent a request, which Node's closeIdleConnections keeps) closed now, and each busy one as soon
 *  as it has answered everything it was asked (pipelined requests too), instead of being kept
 *  alive for more; whatever runs past `graceMs` is cut off. */
function gracefulStop(server: Server, state: StopState, answering: WeakMap<object, number>): (opts?: CloseOptions) => Promise<void> {
  const sockets = new Set<Duplex>();
  const underWay = new Set<ServerResponse>();
  let closing = false;
  server.on('connection', (socket: Duplex) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    underWay.add(res);
    const socket = req.socket;
    answering.set(socket, (answering.get(socket) ?? 0) + 1);
    res.once('close', () => {
      underWay.delete(res);
      answering.set(socket, (answering.get(socket) ?? 1) - 1);
      // Once Node has taken the answer off its connection: idle now unless more are queued on it.
      if (closing) setImmediate(() => server.closeIdleConnections());
    });
  });
  return async ({ drainMs = 0, graceMs = STOP_GRACE_MS } = {}) => {
    state.stopping = true;
    if (drainMs > 0) await new Promise((resolve) => setTimeout(resolve, drainMs));
    await new Promise<void>((resolve) => {
      closing = true;
      const cutOff = setTimeout(() => server.closeAllConnections(), graceMs);
      server.close(() => {
        clearTimeout(cutOff);
        resolve();
      });
      const busy = new Set<unknown>([...underWay].map((res) => res.socket));
      for (const socket of sockets) if (!busy.has(socket)) socket.destroy();
    });
  };
}

/** The server's responses: once the server is stopping, an answer closes its connection (and goes
 *  in `closingSockets`), so the client's next request goes to another replica instead of racing the
 *  close. Not one with more requests under way behind it on the same connection (pipelined):
 *  Node would drop their answers. */
function drainingResponse(state: StopState, answering: WeakMap<object, number>, closingSockets: WeakSet<object>) {
  return class DrainingResponse extends ServerResponse {
    override writeHead(statusCode: number, ...rest: unknown[]): this {
      if (state.stopping && this.socket && answering.get(this.socket) === 1) {
        this.shouldKeepAlive = false;
        closingSockets.add(this.socket);
      }
      return super.writeHead.apply(this, [statusCode, ...rest] as Parameters<ServerResponse['writeHead']>);
    }
  };
}

/** Connections whose refused bytes are answered once the responses due before them are sent. */
const answerPending = new WeakSet<Duplex>();

/** A request Node's HTTP parser refused (oversized headers, a malformed request line) gets a
 *  problem document like every other error, instead of Node's bare status line. */
function answerUnparsableRequest(err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex): void {
  if (err.code === 'ECONNRESET') {
    socket.destroy();
    return;
  }
  // The parser repeats its error for every later chunk: answered once, then left to finish.
  if (answerPending.has(socket) || socket.writableEnded) return;
  answerRefusal(socket, refusalOf(err), Boolean(err.code?.startsWith('HPE_')));
}

type Refusal = [status: number, code: string, detail: string];

function answerRefusal(socket: Duplex, refusal: Refusal, parseError: boolean): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const inFlight = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (inFlight) {
    // Refused bytes after complete requests (pipelined): those requests were served, so their
    // answers go out first — a client must not take a send that was queued for one that failed.
    if (parseError && inFlight.req?.complete) {
      answerPending.add(socket);
      inFlight.once('finish', () => {
        answerPending.delete(socket);
        answerRefusal(socket, refusal, parseError);
      });
      return;
    }
    // As Node itself does: never write into a response already under way on this connection.
    if (inFlight.headersSent) {
      socket.destroy();
      return;
    }
  }
  writeProblem(socket, ...refusal);
}

/** A character of a method name (RFC 9110 "tchar"). */
const TCHAR = "[!#$%&'*+.^_`|~0-9A-Za-z-]";
const METHOD_CHAR = new RegExp(`^${TCHAR}$`);
/** A well-formed request line whose method the parser does not know: the client's own fault
 *  (DESIGN §8: bad input is never a 5xx, where RFC 9110 §9.1 would suggest 501), named as such. */
const REQUEST_LINE = new RegExp(`^${TCHAR}+ \\S+ HTTP/\\d\\.\\d\\r?$`);

/** What a refusal of Node's parser means to the client. */
function refusalOf(err: NodeJS.ErrnoException & { rawPacket?: Buffer; bytesParsed?: number }): Refusal {
  if (err.code === 'HPE_HEADER_OVERFLOW') return [431, 'headers_too_large', 'The request line or headers are too large.'];
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return [408, 'request_timeout', 'The request was not received in time.'];
  if (err.code === 'HPE_INVALID_METHOD' && REQUEST_LINE.test(refusedLine(err))) {
    return [400, 'unknown_method', 'The request method is not one this server knows; the API uses GET, HEAD, POST, PUT, PATCH, DELETE and OPTIONS.'];
  }
  return [400, 'malformed_request', 'The request is not valid HTTP.'];
}

/** The request line the parser stopped in: from the method's first character (requests pipelined
 *  before it are in the packet too, and a body may end right before it) to the line's end. */
function refusedLine(err: { rawPacket?: Buffer; bytesParsed?: number }): string {
  const raw = err.rawPacket;
  if (!raw) return '';
  const at = Math.min(err.bytesParsed ?? 0, raw.length);
  let start = at;
  while (start > 0 && METHOD_CHAR.test(String.fromCharCode(raw[start - 1]))) start--;
  const end = raw.indexOf(0x0a, at);
  return raw.subarray(start, end < 0 ? raw.length : end).toString('latin1');
}

function problemBody(status: number, code: string, detail: string): string {
  return JSON.stringify(new Problem(status, code, detail).toJSON());
}

/** A whole response written straight to the socket, which is then closed. */
function writeProblem(socket: Duplex, status: number, code: string, detail: string): void {
  // A client that resets meanwhile must not crash the process (CONNECT sockets have no listener).
  socket.on('error', () => socket.destroy());
  const body = problemBody(status, code, detail);
  const head = [`HTTP/1.1 ${status} ${STATUS_CODES[status]}`, 'Content-Type: application/problem+json', `Content-Length: ${Buffer.byteLength(body)}`, 'Connection: close'];
  socket.end(`${head.join('\r\n')}\r\n\r\n${body}`, () => socket.destroy());
}
