// A route is data: method, path, auth, schemas and a handler. The router and the OpenAPI
// document are both built from the same list (see app.ts and openapi.ts).
import type { Context } from 'koa';
import type { z } from 'zod';
import type { GatewayDeps } from '../deps.ts';
import type { Principal } from './auth.ts';

/** Who may call a route. `any-or-link`: a credential of the instance, or a signed link in the
 *  query instead; the handler checks both (only it can verify the link). */
export type Auth = 'none' | 'admin' | 'any' | 'any-or-link';
/** The kinds the app checks itself, before the handler runs. */
export type CredentialAuth = 'admin' | 'any';

/** Whether the app resolves and checks a Bearer credential before the handler runs. */
export function checkedBeforeHandler(auth: Auth): auth is CredentialAuth {
  return auth === 'admin' || auth === 'any';
}

export interface RouteRequest<B = unknown, Q = unknown> {
  ctx: Context;
  deps: GatewayDeps;
  principal: Principal | undefined;
  params: Record<string, string>;
  body: B;
  query: Q;
}

export interface RouteResult {
  status?: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export interface Route<B = any, Q = any> {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  /** OpenAPI-style path: /api/instances/{id} */
  path: string;
  auth: Auth;
  summary: string;
  tag: string;
  body?: z.ZodType<B>;
  query?: z.ZodType<Q>;
  /** Headers of every answer to the route's path, refusals included (of a malformed request, by
   *  the rate limit, the origin, a wrong method, authentication or validation). */
  headers?: Record<string, string>;
  /** Largest accepted request body in bytes (default 1 MiB). */
  bodyLimit?: number;
  /** A request without a body is refused, where "no body" must not mean "no fields" (a replace-all save). */
  bodyRequired?: boolean;
  /** The query is only compared, never stored, so text the database could not hold (NUL) is let
   *  through to the handler: a forged signed link is a 401, not a 400. */
  queryNotStored?: boolean;
  /** A schema (a JSON body), a description (a problem document, or no body), or `{ file }`: a
   *  download whose Content-Type is the file's own. */
  responses: Record<number, z.ZodType | string | { file: string }>;
  handler(req: RouteRequest<B, Q>): Promise<RouteResult>;
}

export function route<B = undefined, Q = undefined>(r: Route<B, Q>): Route<B, Q> {
  return r;
}
