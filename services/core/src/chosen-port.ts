// PORT=0 asks for any free port. The public URL defaults to http://localhost:$PORT, and credentials
// and media links are built from it before the server listens, so with that default the port is
// chosen first: the one the system hands out for a moment, which the server then binds.
import { createServer } from 'node:net';
import type { Config } from './config.ts';

// With a public URL of its own, the server lets listen() pick, with no moment in between.
export async function withChosenPort(config: Config): Promise<Config> {
  if (config.port !== 0 || config.publicBaseUrl !== 'http://localhost:0') return config;
  const port = await freePort(config.host);
  return { ...config, port, publicBaseUrl: `http://localhost:${port}` };
}

function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    // Named as listen() names it (DESIGN §4: one line naming the variable).
    probe.once('error', (err) => reject(new Error(`HOST/PORT: cannot listen on ${host}:0 (${err.message})`)));
    probe.listen(0, host, () => {
      const address = probe.address();
      probe.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error(`HOST/PORT: no port on ${host}`))));
    });
  });
}
