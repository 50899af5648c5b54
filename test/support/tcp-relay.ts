// A TCP relay to a server (PostgreSQL in the tests) that a test can break the way networks and
// servers break: go silent without closing anything (a partition), or drop every connection at
// once (a server that crashed mid-statement).
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

export interface TcpRelay {
  /** The target URL with the relay's address in place of the server's. */
  url: string;
  /** Stops forwarding bytes; the connections stay open. */
  partition(): void;
  /** Closes every relayed connection, as a crashed server's would close. */
  cut(): void;
  close(): Promise<void>;
}

export async function startTcpRelay(target: URL): Promise<TcpRelay> {
  let silent = false;
  const sockets: Socket[] = [];
  const server: Server = createServer((client) => {
    const upstream = connect(Number(target.port || 5432), target.hostname);
    sockets.push(client, upstream);
    client.on('data', (d) => void (silent || upstream.write(d)));
    upstream.on('data', (d) => void (silent || client.write(d)));
    for (const [a, b] of [[client, upstream], [upstream, client]]) {
      a.on('error', () => undefined);
      a.on('close', () => b.destroy());
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  const cut = () => {
    for (const s of sockets.splice(0)) s.destroy();
  };
  return {
    url: url.toString(),
    partition: () => void (silent = true),
    cut,
    close: () => new Promise<void>((resolve) => {
      cut();
      server.close(() => resolve());
    }),
  };
}
