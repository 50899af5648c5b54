// GET /openapi.json: an OpenAPI 3.1 document generated from the route list and the zod schemas
// that validate requests, so it always describes what the server enforces.
import { z } from 'zod';
import { createDocument } from 'zod-openapi';
import { isProbePath } from './http/probe-paths.ts';
import { route, type Route } from './http/route.ts';
import { IdempotencyKey, ProblemDocument } from './schemas.ts';

/** The API's version, also reported by the admin stats. */
export const API_VERSION = '0.2.0';

/** Errors any API route may answer besides its own: input, credentials, state, size, rate limit,
 *  and 503 while the database cannot be reached. */
const PROBLEM_STATUSES = [400, 401, 403, 404, 409, 413, 422, 429, 503];

export function buildOpenApiDocument(routes: Route[]): object {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const pathParams = [...r.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
    const operation: Record<string, unknown> = {
      operationId: operationIdOf(r),
      summary: r.summary,
      description: CREDENTIALS[r.auth],
      tags: [r.tag],
      security: securityOf(r),
      responses: responsesOf(r),
    };
    const requestParams: Record<string, z.ZodObject> = {};
    if (pathParams.length) requestParams.path = z.object(Object.fromEntries(pathParams.map((p) => [p, z.string()])));
    if (r.query && r.query instanceof z.ZodObject) requestParams.query = r.query;
    if (r.path.endsWith('/messages') && r.method === 'post') requestParams.header = z.object({ 'Idempotency-Key': IdempotencyKey.optional() });
    if (Object.keys(requestParams).length) operation.requestParams = requestParams;
    if (r.body) operation.requestBody = { required: bodyRequired(r), content: { 'application/json': { schema: r.body } } };
    (paths[r.path] ??= {})[r.method] = operation;
  }
  return createDocument({
    openapi: '3.1.0',
    info: { title: 'Switchboard API', version: API_VERSION, description: 'Messaging gateway: projects, instances, sends, incoming messages, events and signed webhooks.' },
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    paths: paths as any,
  });
}

function responsesOf(r: Route): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [status, spec] of Object.entries(r.responses)) out[status] = responseOf(Number(status), spec);
  // Routes without a credential (probes, this document) answer only what they declare, and the
  // rate limit where it applies.
  const generic = r.auth !== 'none' ? PROBLEM_STATUSES : isProbePath(r.path) ? [] : [429];
  for (const status of generic) out[String(status)] ??= problemResponse('see the problem document');
  return out;
}

/** Which credential an operation takes: the spec's Auth column, which Bearer security alone cannot tell. */
const CREDENTIALS: Record<Route['auth'], string> = {
  none: 'No credential.',
  admin: 'Credential: the administrative key.',
  any: "Credential: the administrative key, or this instance's token or one of its integration keys.",
  'any-or-link': "Credential: the administrative key, or this instance's token or one of its integration keys; or none with a signed link until it expires.",
};

/** A stable, unique name for code generators: the method and the path, camel-cased
 *  (`POST /api/instances/{id}/messages` → `postApiInstancesIdMessages`). */
function operationIdOf(r: Route): string {
  const words = r.path.split(/[^A-Za-z0-9]+/).filter(Boolean);
  return r.method + words.map((w) => w[0].toUpperCase() + w.slice(1)).join('');
}

/** A body is required when the route refuses a request without one, or when no fields are not a
 *  valid request (a missing body is read as `{}`). */
function bodyRequired(r: Route): boolean {
  return r.bodyRequired === true || !r.body!.safeParse({}).success;
}

/** OpenAPI security: none, a Bearer credential, or (a signed link) either one or none. */
function securityOf(r: Route): Record<string, string[]>[] {
  if (r.auth === 'none') return [];
  return r.auth === 'any-or-link' ? [{ bearer: [] }, {}] : [{ bearer: [] }];
}

function responseOf(status: number, spec: Route['responses'][number]): object {
  if (status >= 400) return problemResponse(typeof spec === 'string' ? spec : 'error');
  if (typeof spec === 'string') return { description: spec };
  if ('file' in spec) return { description: spec.file, content: { '*/*': {} } }; // OpenAPI 3.1: no schema = any bytes
  return { description: 'success', content: { 'application/json': { schema: spec } } };
}

function problemResponse(description: string) {
  return { description, content: { 'application/problem+json': { schema: ProblemDocument } } };
}

export function openApiRoute(routes: Route[]): Route {
  let cached: object | undefined;
  return route({
    method: 'get',
    path: '/openapi.json',
    auth: 'none',
    tag: 'meta',
    summary: 'This OpenAPI document',
    responses: { 200: 'OpenAPI 3.1 document' },
    handler: async () => ({ body: (cached ??= buildOpenApiDocument(routes)) }),
  });
}
