// A second reference for the accept benchmark: the least an accept that is durable before it
// answers costs on this machine. The bare Koa handler plus one thing — each request's row is
// committed to PostgreSQL before the 202, many rows per INSERT (group commit, the same CallBatcher
// the gateway uses). No authentication, validation, idempotency, queue limit or NATS. Prints
// "listening <port>" once ready; DATABASE_URL names a database of its own.
import Koa from 'koa';
import pg from 'pg';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CallBatcher } from '@switchboard/core';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
await pool.query('create table if not exists floor_items (id text primary key, body jsonb not null, created_at timestamptz not null default now())');

let n = 0;
const writer = new CallBatcher<{ id: string; body: string }, void>(async (rows) => {
  const values = rows.map((_, i) => `($${2 * i + 1}, $${2 * i + 2}::jsonb)`).join(', ');
  await pool.query(`insert into floor_items (id, body) values ${values}`, rows.flatMap((r) => [r.id, r.body]));
  return rows.map(() => undefined);
}, 64);

const app = new Koa();
app.use(async (ctx) => {
  const chunks: Buffer[] = [];
  for await (const chunk of ctx.req) chunks.push(chunk as Buffer);
  const body = Buffer.concat(chunks).toString('utf8') || '{}';
  JSON.parse(body);
  const id = `msg_${process.pid}_${++n}`;
  await writer.submit({ id, body });
  ctx.status = 202;
  ctx.body = { id, messengerId: `3EB0${n}`, status: 'queued', reused: false };
});
const server = createServer(app.callback());
server.listen(0, '127.0.0.1', () => console.log(`listening ${(server.address() as AddressInfo).port}`));
process.on('SIGTERM', () => server.close(() => void pool.end().then(() => process.exit(0))));
