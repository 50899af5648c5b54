// Instance token renewal and recovery, and integration keys ("apps").
import { z } from 'zod';
import { newId, problems, randomToken } from '@switchboard/core';
import { route } from '../http/route.ts';
import { APP_KEY_PREFIX } from '../http/auth.ts';
import { issueInstanceToken } from './instances.ts';
import { AppCreateBody, AppRecord, Deleted, listOf } from '../schemas.ts';
import { appRecord } from '../records.ts';
import { assertProjectExists, deleted, loadInstance, SECRET_HEADERS, withReferences } from './common.ts';

export const credentialRoutes = [
  route({
    method: 'post',
    path: '/api/instances/{id}/token',
    auth: 'admin',
    tag: 'credentials',
    summary: 'Issue a new instance token; the previous one stops working',
    responses: { 200: z.object({ apiToken: z.string() }) },
    handler: async ({ deps, params }) => {
      await loadInstance(deps, params.id);
      const { token, columns } = issueInstanceToken(deps);
      const renewed = await deps.db('instances').where({ id: params.id }).update({ ...columns, updated_at: deps.db.fn.now() });
      if (!renewed) throw problems.notFound('The instance'); // deleted while this request ran
      return { body: { apiToken: token }, headers: SECRET_HEADERS };
    },
  }),
  route({
    method: 'get',
    path: '/api/instances/{id}/credentials',
    auth: 'admin',
    tag: 'credentials',
    summary: 'Instance id, native API URL and the instance token',
    responses: { 200: z.object({ instanceId: z.string(), apiUrl: z.string(), apiToken: z.string() }) },
    handler: async ({ deps, params }) => {
      const row = await loadInstance(deps, params.id);
      return {
        body: { instanceId: row.id, apiUrl: `${deps.config.publicBaseUrl}/api/instances/${row.id}`, apiToken: deps.crypto.open(row.token_sealed) },
        headers: SECRET_HEADERS,
      };
    },
  }),
  route({
    method: 'get',
    path: '/api/instances/{id}/apps',
    auth: 'admin',
    tag: 'credentials',
    summary: 'List the integration keys of an instance (values are never shown again)',
    responses: { 200: listOf(AppRecord) },
    handler: async ({ deps, params }) => {
      await loadInstance(deps, params.id);
      const rows = await deps.db('app_keys').where({ instance_id: params.id }).whereNull('revoked_at').orderBy('created_at', 'desc').orderBy('id', 'desc');
      return { body: { data: rows.map(appRecord) } };
    },
  }),
  route({
    method: 'post',
    path: '/api/instances/{id}/apps',
    auth: 'admin',
    tag: 'credentials',
    summary: 'Create an integration key; its value is revealed only in this response',
    body: AppCreateBody,
    responses: { 201: AppRecord.extend({ key: z.string() }), 404: 'instance or project absent' },
    handler: async ({ deps, params, body }) => {
      await loadInstance(deps, params.id);
      await assertProjectExists(deps, body.projectId);
      const key = randomToken(APP_KEY_PREFIX);
      const insert = deps.db('app_keys')
        .insert({
          id: newId('app'),
          instance_id: params.id,
          name: body.name,
          project_id: body.projectId ?? null,
          key_prefix: key.slice(0, 10),
          key_hash: deps.crypto.hashToken(key),
        })
        .returning('*');
      const [row] = await withReferences(insert, body.projectId ? 'The instance or the project' : 'The instance');
      return { status: 201, body: { ...appRecord(row), key }, headers: SECRET_HEADERS };
    },
  }),
  route({
    method: 'delete',
    path: '/api/instances/{id}/apps/{appId}',
    auth: 'admin',
    tag: 'credentials',
    summary: 'Revoke one integration key',
    responses: { 200: Deleted, 404: 'absent' },
    handler: async ({ deps, params }) => {
      await loadInstance(deps, params.id);
      const count = await deps.db('app_keys').where({ id: params.appId, instance_id: params.id }).whereNull('revoked_at').update({ revoked_at: deps.db.fn.now() });
      if (!count) throw problems.notFound('The integration key');
      return { body: deleted(params.appId) };
    },
  }),
];
