import { createServer, STATUS_CODES, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type Koa from 'koa';
import { Problem } from '@switchboard/core';

/** Starts an HTTP server for the app; resolves with it and the bound port. */
export function listen(app: Koa, port: number, host: string): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const server = createServer(app.callback());
  server.requestTimeout = 120_000; // large media uploads on slow links
  server.headersTimeout = 30_000;
  server.on('clientError', answerUnparsableRequest);
  return new Promise((resolve, reject) => {
    // A start that cannot listen names what to change (DESIGN §4: one line naming the variable).
    server.once('error', (err) => reject(new Error(`HOST/PORT: cannot listen on ${host}:${port} (${err.message})`)));
    server.listen(port, host, () => {
      const address = server.address();
      const bound = typeof address === 'object' && address ? address.port : port;
      resolve({
        server,
        port: bound,
        close: () =>
          new Promise<void>((res) => {
            server.close(() => res());
            server.closeAllConnections();
          }),
      });
    });
  });
}

/** A request Node's HTTP parser refused (oversized headers, a malformed request line) gets a
 *  problem document like every other error, instead of Node's bare status line. */
function answerUnparsableRequest(err: NodeJS.ErrnoException, socket: Duplex): void {
  // As Node itself does: never write into a response already under way on this connection.
  const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (err.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  const [status, code, detail] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'headers_too_large', 'The request line or headers are too large.']
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'request_timeout', 'The request was not received in time.']
        : [400, 'malformed_request', 'The request is not valid HTTP.'];
  const body = JSON.stringify(new Problem(status, code, detail).toJSON());
  const head = [`HTTP/1.1 ${status} ${STATUS_CODES[status]}`, 'Content-Type: application/problem+json', `Content-Length: ${Buffer.byteLength(body)}`, 'Connection: close'];
  socket.end(`${head.join('\r\n')}\r\n\r\n${body}`, () => socket.destroy());
}
