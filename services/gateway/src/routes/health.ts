import { z } from 'zod';
import { checkReadiness, problems } from '@switchboard/core';
import { route } from '../http/route.ts';

export const healthRoutes = [
  route({
    method: 'get',
    path: '/health',
    auth: 'none',
    tag: 'health',
    summary: 'The HTTP process is up (says nothing about network sessions)',
    responses: { 200: z.object({ status: z.literal('ok') }) },
    handler: async () => ({ body: { status: 'ok' } }),
  }),
  route({
    method: 'get',
    path: '/ready',
    auth: 'none',
    tag: 'health',
    summary: 'The database and the bus answer, and the process is not stopping',
    responses: { 200: z.object({ status: z.literal('ready') }), 503: 'not ready' },
    handler: async ({ deps }) => {
      // While it drains, the load balancer takes it out of rotation; it still serves what comes.
      if (deps.stopState?.stopping) throw problems.unavailable('not_ready', 'Not ready: the process is stopping.');
      await checkReadiness({ database: () => deps.db.raw('select 1'), bus: () => deps.bus.pending('commands', '__ready_probe__') }).catch((err: Error) => {
        // Every error is a problem document (DESIGN §8), this one included.
        throw problems.unavailable('not_ready', `Not ready: ${err.message}.`);
      });
      return { body: { status: 'ready' } };
    },
  }),
];
