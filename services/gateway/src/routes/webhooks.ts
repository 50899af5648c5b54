// Webhook configuration, signing secret, test event and the boolean settings.
import { z } from 'zod';
import { cancelDeliveriesForRemovedUrls, cancelPendingDeliveries, Problem, problems, randomToken, recordEvent, safeEqual, TOKEN_PREFIXES, WEBHOOK_DESTINATIONS, type Db, type FieldProblem } from '@switchboard/core';
import type { GatewayDeps } from '../deps.ts';
import { route } from '../http/route.ts';
import { Settings, SettingsBody, WebhookBody, WebhookConfig } from '../schemas.ts';
import { settingsOf, webhookOf } from '../records.ts';
import { resolvedHostProblem, webhookUrlProblem } from '../webhook-url.ts';
import { SECRET_HEADERS } from './common.ts';

/** Reads the instance's secret, creating it on first use (the service creates secrets). */
async function ensureSecret(deps: GatewayDeps, trx: Db, row: any): Promise<string> {
  if (row.webhook_secret_sealed) return deps.crypto.open(row.webhook_secret_sealed);
  const secret = randomToken(TOKEN_PREFIXES.webhookSecret, 32);
  await trx('instances').where({ id: row.id }).update({ webhook_secret_sealed: deps.crypto.seal(secret) });
  return secret;
}

async function lockInstance(trx: Db, id: string): Promise<any> {
  return found(await trx('instances').where({ id }).forNoKeyUpdate().first());
}

/** For a change that decides where events go (destinations, secret): FOR UPDATE, the one lock
 *  that blocks the dispatcher's intake (a key-share lock), so an event is routed with the
 *  configuration before or after the change, never written for a URL the change removed. */
export async function lockInstanceForRouting(trx: Db, id: string): Promise<any> {
  return found(await trx('instances').where({ id }).forUpdate().first());
}

function found(row: any): any {
  if (!row) throw problems.notFound('The instance');
  return row;
}

function foreignSecret(): Problem {
  return problems.validation(
    [{ path: 'secret', message: 'is not the current signing secret' }],
    'The service creates the signing secret: leave `secret` out (or send the current one back), and generate a new one with POST /api/instances/{id}/webhook/secret.',
  );
}

async function validateDestinations(body: z.infer<typeof WebhookBody>, allowPrivate: boolean): Promise<Record<string, string>> {
  if (body.format === 'legacy') {
    throw new Problem(422, 'unsupported_format', 'Only the "native" webhook format is supported.', [{ path: 'format', message: 'must be "native"' }]);
  }
  const errors: FieldProblem[] = [];
  const config: Record<string, string> = {};
  for (const d of WEBHOOK_DESTINATIONS) {
    const value = body[d] ?? ''; // as written: a blank is not an empty string, nor part of a URL
    const problem = webhookUrlProblem(value, allowPrivate);
    if (problem) errors.push({ path: d, message: problem });
    config[d] = value;
  }
  if (!errors.length) {
    // One lookup per distinct URL (destinations often share one); lookups hold libuv's threads.
    const urls = [...new Set(WEBHOOK_DESTINATIONS.map((d) => config[d]))];
    const problemOf = new Map(await Promise.all(urls.map(async (u) => [u, await resolvedHostProblem(u, allowPrivate)] as const)));
    for (const d of WEBHOOK_DESTINATIONS) {
      const problem = problemOf.get(config[d]);
      if (problem) errors.push({ path: d, message: problem });
    }
  }
  if (errors.length) throw problems.validation(errors, 'Webhook destinations must be public HTTPS URLs on port 443, or empty strings.');
  return { ...config, format: 'native' };
}

export const webhookRoutes = [
  route({
    method: 'put',
    path: '/api/instances/{id}/webhook',
    auth: 'admin',
    tag: 'webhooks',
    summary: 'Replace all destinations at once (omitted ones become ""); returns the signing secret',
    body: WebhookBody,
    bodyRequired: true, // no body must not clear every destination; {} does, on purpose
    responses: { 200: WebhookConfig.extend({ secret: z.string() }), 400: 'invalid URL or format', 422: 'unsupported format (legacy)' },
    handler: async ({ deps, params, body }) => {
      const config = await validateDestinations(body, deps.config.webhookAllowPrivateTargets);
      const saved = await deps.db.transaction(async (trx) => {
        const row = await lockInstanceForRouting(trx, params.id);
        const settings = { ...settingsOf(row), ...(body.settings ?? {}) };
        const secret = await ensureSecret(deps, trx, row);
        if (body.secret !== undefined && !safeEqual(body.secret, secret)) throw foreignSecret();
        await trx('instances').where({ id: params.id }).update({ webhook: JSON.stringify(config), settings: JSON.stringify(settings), updated_at: trx.fn.now() });
        await cancelDeliveriesForRemovedUrls(trx, params.id, config);
        return { settings, secret };
      });
      return { body: { ...config, settings: saved.settings, secret: saved.secret }, headers: SECRET_HEADERS };
    },
  }),
  route({
    method: 'get',
    path: '/api/instances/{id}/webhook/secret',
    auth: 'admin',
    tag: 'webhooks',
    summary: 'The webhook signing secret',
    responses: { 200: z.object({ secret: z.string() }) },
    handler: async ({ deps, params }) => {
      const secret = await deps.db.transaction(async (trx) => ensureSecret(deps, trx, await lockInstance(trx, params.id)));
      return { body: { secret }, headers: SECRET_HEADERS };
    },
  }),
  route({
    method: 'post',
    path: '/api/instances/{id}/webhook/secret',
    auth: 'admin',
    tag: 'webhooks',
    summary: 'Generate a new signing secret; pending deliveries are cancelled',
    responses: { 200: z.object({ secret: z.string() }) },
    handler: async ({ deps, params }) => {
      const secret = randomToken(TOKEN_PREFIXES.webhookSecret, 32);
      await deps.db.transaction(async (trx) => {
        await lockInstanceForRouting(trx, params.id);
        await trx('instances').where({ id: params.id }).update({ webhook_secret_sealed: deps.crypto.seal(secret), updated_at: trx.fn.now() });
        await cancelPendingDeliveries(trx, params.id);
      });
      return { body: { secret }, headers: SECRET_HEADERS };
    },
  }),
  route({
    method: 'post',
    path: '/api/instances/{id}/webhook/test',
    auth: 'admin',
    tag: 'webhooks',
    summary: 'Queue a webhook.test event on the general webhook URL',
    responses: { 200: z.object({ id: z.string(), instanceId: z.string(), type: z.string(), createdAt: z.string(), data: z.record(z.string(), z.unknown()) }) },
    handler: async ({ deps, params }) => {
      const envelope = await deps.db.transaction(async (trx) => {
        const row = await lockInstance(trx, params.id);
        await ensureSecret(deps, trx, row);
        return recordEvent(trx, { instanceId: params.id, type: 'webhook.test', data: { message: 'This is a test event from Switchboard.', url: webhookOf(row).url } });
      });
      deps.relay.kick();
      return { body: envelope };
    },
  }),
  route({
    method: 'put',
    path: '/api/instances/{id}/settings',
    auth: 'admin',
    tag: 'webhooks',
    summary: 'Change any subset of the boolean settings',
    body: SettingsBody,
    responses: { 200: Settings },
    handler: async ({ deps, params, body }) => {
      const settings = await deps.db.transaction(async (trx) => {
        const row = await lockInstance(trx, params.id);
        const merged = { ...settingsOf(row), ...body };
        await trx('instances').where({ id: params.id }).update({ settings: JSON.stringify(merged), updated_at: trx.fn.now() });
        return merged;
      });
      return { body: settings };
    },
  }),
];
