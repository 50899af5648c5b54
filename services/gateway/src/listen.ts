import { createServer, type Server } from 'node:http';
import type Koa from 'koa';

/** Starts an HTTP server for the app; resolves with it and the bound port. */
export function listen(app: Koa, port: number, host: string): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const server = createServer(app.callback());
  server.requestTimeout = 120_000; // large media uploads on slow links
  server.headersTimeout = 30_000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
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
