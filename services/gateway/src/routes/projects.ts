// Projects group instances; deleting one keeps its instances (their projectId becomes null).
import { newResourceId, problems } from '@switchboard/core';
import { route } from '../http/route.ts';
import { Deleted, ProjectBody, ProjectRecord, listOf } from '../schemas.ts';
import { projectRecord } from '../records.ts';
import { deleted } from './common.ts';

export const projectRoutes = [
  route({
    method: 'get',
    path: '/api/projects',
    auth: 'admin',
    tag: 'projects',
    summary: 'List projects',
    responses: { 200: listOf(ProjectRecord) },
    handler: async ({ deps }) => {
      const rows = await deps.db('projects').orderBy('created_at', 'desc').orderBy('id', 'desc');
      return { body: { data: rows.map(projectRecord) } };
    },
  }),
  route({
    method: 'post',
    path: '/api/projects',
    auth: 'admin',
    tag: 'projects',
    summary: 'Create a project (projectId optionally chosen by the client)',
    body: ProjectBody,
    responses: { 201: ProjectRecord, 409: 'projectId taken' },
    handler: async ({ deps, body }) => {
      const id = body.projectId ?? newResourceId('proj');
      const inserted = await deps.db('projects').insert({ id, name: body.name }).onConflict('id').ignore().returning('*');
      if (!inserted.length) throw problems.conflict('project_exists', 'A project with this projectId already exists.');
      return { status: 201, body: projectRecord(inserted[0]) };
    },
  }),
  route({
    method: 'patch',
    path: '/api/projects/{id}',
    auth: 'admin',
    tag: 'projects',
    summary: 'Rename a project',
    body: ProjectBody,
    responses: { 200: ProjectRecord, 404: 'absent' },
    handler: async ({ deps, params, body }) => {
      if (body.projectId && body.projectId !== params.id) {
        throw problems.validation([{ path: 'projectId', message: 'must equal the project id in the path' }]);
      }
      const rows = await deps.db('projects').where({ id: params.id }).update({ name: body.name, updated_at: deps.db.fn.now() }).returning('*');
      if (!rows.length) throw problems.notFound('The project');
      return { body: projectRecord(rows[0]) };
    },
  }),
  route({
    method: 'delete',
    path: '/api/projects/{id}',
    auth: 'admin',
    tag: 'projects',
    summary: 'Delete a project; its instances and integration keys stay, without project',
    responses: { 200: Deleted, 404: 'absent' },
    handler: async ({ deps, params }) => {
      const count = await deps.db.transaction(async (trx): Promise<number> => {
        await trx('instances').where({ project_id: params.id }).update({ project_id: null, updated_at: trx.fn.now() });
        await trx('app_keys').where({ project_id: params.id }).update({ project_id: null });
        return Number(await trx('projects').where({ id: params.id }).delete());
      });
      if (!count) throw problems.notFound('The project');
      return { body: deleted(params.id) };
    },
  }),
];
