// Sandbox network control (DESIGN §6): only when NETWORK_DRIVER=sandbox, admin key required.
import { z } from 'zod';
import { SANDBOX_BASE64, STAGED_MEDIA_FIELD, STAGE_MEDIA_ABOVE_CHARS, newStagedMediaId } from '@switchboard/core';
import type { GatewayDeps } from '../deps.ts';
import { route } from '../http/route.ts';
import { MAX_MEDIA_BYTES } from '../media/outbound.ts';
import type { Route } from '../http/route.ts';
import { callSession, loadInstance } from './common.ts';

const Phone = z.string().regex(/^\d{8,15}$/, 'must be phone digits with country code (8-15 digits)');
const Lid = z.string().regex(/^\d{1,30}@lid$/, 'must be <digits>@lid');
const bodies = {
  scan: z.object({ phone: Phone }),
  pair: z.object({ code: z.string().min(1).max(32) }),
  inbound: z.object({
    from: Phone,
    type: z.enum(['text', 'image', 'audio', 'video', 'document', 'sticker']),
    text: z.string().max(16000).optional(),
    caption: z.string().max(16000).optional(),
    // Either form a send takes; the session is given the group id.
    group: z
      .string()
      .regex(/^(\d{1,30}(-\d{1,15})?@g\.us|\d{1,30}-group)$/, 'must be a group: <digits>@g.us or <digits>-group')
      .transform((g) => g.replace(/-group$/, '@g.us'))
      .optional(),
    lid: Lid.optional(),
    name: z.string().max(256).optional(),
    fromMe: z.boolean().optional(),
    mediaBase64: z.string().optional(),
    mimetype: z.string().max(255).optional(),
    fileName: z.string().max(255).optional(),
    mediaUnavailable: z.boolean().optional(),
    viewOnce: z.boolean().optional(),
    voiceNote: z.boolean().optional(),
    seconds: z.number().nonnegative().optional(),
  }),
  presence: z.object({
    from: Phone,
    presence: z.enum(['available', 'unavailable', 'composing', 'recording', 'paused']),
    lid: Lid.optional(),
  }),
  drop: z.object({ reason: z.enum(['connection_lost', 'logged_out']) }),
};

export function sandboxRoutes(): Route[] {
  return (Object.keys(bodies) as (keyof typeof bodies)[]).map((op) =>
    route({
      method: 'post',
      path: `/sandbox/instances/{id}/${op}`,
      auth: 'admin',
      tag: 'sandbox',
      summary: `Sandbox network: ${op}`,
      body: bodies[op] as z.ZodType<Record<string, unknown>>,
      bodyLimit: op === 'inbound' ? 48 * 1024 * 1024 : undefined,
      responses: { 200: z.record(z.string(), z.unknown()), 409: 'not possible in this state' },
      handler: async ({ deps, params, body }) => {
        await loadInstance(deps, params.id);
        const request = op === 'inbound' && deps.config.natsUrl ? await stageMedia(deps, body) : body;
        return { body: await callSession(deps, params.id, `sandbox.${op}`, request) };
      },
    }),
  );
}

/** Over NATS, a large file goes to the session through the media store (core's staged-media.ts).
 *  One the session would refuse (not base64, over 32 MiB) goes as it came, to be refused there. */
async function stageMedia(deps: GatewayDeps, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  const base64 = body.mediaBase64;
  if (typeof base64 !== 'string' || base64.length <= STAGE_MEDIA_ABOVE_CHARS || body.mediaUnavailable === true || !SANDBOX_BASE64.test(base64)) return body;
  const bytes = Buffer.from(base64, 'base64');
  if (bytes.length > MAX_MEDIA_BYTES) return body;
  const stagedId = newStagedMediaId();
  await deps.media.put(stagedId, bytes);
  const { mediaBase64: _, ...rest } = body;
  return { ...rest, [STAGED_MEDIA_FIELD]: stagedId };
}
