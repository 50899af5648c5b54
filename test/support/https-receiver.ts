// A real HTTPS webhook receiver for tests: records every request's raw body and headers, and
// answers as the test programs it (status, delay, Retry-After, redirect, or never). It serves the
// test certificate of test/fixtures/tls (localhost, 127.0.0.1, ::1); run tests with
// NODE_EXTRA_CA_CERTS=test/fixtures/tls/ca.pem so clients trust it.
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const TLS_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'tls');
export const TEST_CA_PATH = join(TLS_DIR, 'ca.pem');

export interface ReceivedRequest {
  method: string;
  path: string;
  /** Header names in lower case. */
  headers: Record<string, string>;
  rawBody: Buffer;
  receivedAt: number;
}

export interface ProgrammedResponse {
  status?: number; // default 200
  delayMs?: number; // wait before answering
  retryAfter?: string; // Retry-After header value
  location?: string; // Location header (for 3xx)
  body?: string;
  /** Accept the request and never answer (until the receiver closes). */
  blackHole?: boolean;
  /** Answer only once this settles (then after delayMs, if any): the test decides when. */
  until?: Promise<unknown>;
}

export type Responder = (req: ReceivedRequest, index: number) => ProgrammedResponse;

export interface HttpsReceiver {
  readonly port: number;
  /** Every request received, in arrival order. */
  readonly requests: ReceivedRequest[];
  /** Requests being handled right now, and the most there ever were at once. */
  readonly inFlight: number;
  readonly maxInFlight: number;
  /** `https://<host>:<port><path>`; host defaults to 127.0.0.1. */
  url(path?: string, host?: string): string;
  respondWith(responder: Responder): void;
  /** Resolves once `count` requests arrived (optionally matching), or rejects after timeoutMs. */
  waitForRequests(count: number, timeoutMs?: number, match?: (r: ReceivedRequest) => boolean): Promise<ReceivedRequest[]>;
  close(): Promise<void>;
}

export async function startHttpsReceiver(responder: Responder = () => ({ status: 200 })): Promise<HttpsReceiver> {
  const requests: ReceivedRequest[] = [];
  let respond = responder;
  let inFlight = 0;
  let maxInFlight = 0;
  const waiters = new Set<() => void>();
  const timers = new Set<NodeJS.Timeout>();

  const server: Server = createServer(
    { cert: readFileSync(join(TLS_DIR, 'server.pem')), key: readFileSync(join(TLS_DIR, 'server-key.pem')) },
    (req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const record: ReceivedRequest = {
          method: req.method ?? '',
          path: req.url ?? '',
          headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(', ') : (v ?? '')])),
          rawBody: Buffer.concat(chunks),
          receivedAt: Date.now(),
        };
        const index = requests.length;
        requests.push(record);
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        // Out of flight once answered (a client that hears the answer may send its next request
        // before this loop sees the response close), or when the connection goes without one.
        let counted = true;
        const done = () => {
          if (counted) inFlight--;
          counted = false;
        };
        res.on('close', done);
        for (const wake of waiters) wake();
        const answer = respond(record, index);
        if (answer.blackHole) return;
        const send = () => {
          if (res.destroyed) return; // the client or close() hung up meanwhile
          const headers: Record<string, string> = { 'content-type': 'text/plain' };
          if (answer.retryAfter !== undefined) headers['retry-after'] = answer.retryAfter;
          if (answer.location !== undefined) headers.location = answer.location;
          done();
          res.writeHead(answer.status ?? 200, headers).end(answer.body ?? 'ok');
        };
        const answerNow = () => {
          if (!answer.delayMs) return send();
          const timer = setTimeout(() => {
            timers.delete(timer);
            send();
          }, answer.delayMs);
          timers.add(timer);
        };
        if (answer.until) answer.until.then(answerNow, answerNow);
        else answerNow();
      });
    },
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;

  return {
    port,
    requests,
    get inFlight() {
      return inFlight;
    },
    get maxInFlight() {
      return maxInFlight;
    },
    url: (path = '/hook', host = '127.0.0.1') => `https://${host}:${port}${path}`,
    respondWith(next) {
      respond = next;
    },
    waitForRequests(count, timeoutMs = 10_000, match = () => true) {
      return new Promise((resolve, reject) => {
        // Each arrival looks at the new requests only: a benchmark waiting for thousands of
        // requests must not make the receiver's work grow with every one it already has.
        const found: ReceivedRequest[] = [];
        let seen = 0;
        const check = () => {
          if (seen > requests.length) [found.length, seen] = [0, 0]; // the test cleared the list
          for (; seen < requests.length; seen++) if (match(requests[seen])) found.push(requests[seen]);
          if (found.length < count) return;
          cleanup();
          resolve(found);
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`receiver: expected ${count} requests, got ${found.length} after ${timeoutMs} ms`));
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
    async close() {
      for (const t of timers) clearTimeout(t);
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
