// The baseline of the accept benchmark: a bare Koa handler that reads the JSON body and answers
// 202, in its own process like the gateway. Prints "listening <port>" once ready.
import Koa from 'koa';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

const app = new Koa();
let n = 0;
app.use(async (ctx) => {
  const chunks: Buffer[] = [];
  for await (const chunk of ctx.req) chunks.push(chunk as Buffer);
  JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
  ctx.status = 202;
  ctx.body = { id: `msg_${++n}`, messengerId: `3EB0${n}`, status: 'queued', reused: false };
});
const server = createServer(app.callback());
server.listen(0, '127.0.0.1', () => console.log(`listening ${(server.address() as AddressInfo).port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
