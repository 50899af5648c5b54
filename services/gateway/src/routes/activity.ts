// What arrived (incoming), what was emitted (events with delivery results) and the media files.
import type { Knex } from 'knex';
import { z } from 'zod';
import { DELIVERY_STATUSES, eventsWithDelivery, getMediaRecord, MediaIntegrityError, mediaLink, Problem, problems, readMedia, retryEvent, retryExhaustedDeliveries, toEventWithDelivery, verifyMediaLink } from '@switchboard/core';
import type { GatewayDeps } from '../deps.ts';
import { route } from '../http/route.ts';
import { authorize, bearerToken, resolvePrincipal } from '../http/auth.ts';
import { EventRecord, IncomingRecord, listOf } from '../schemas.ts';
import { assertStorableParams } from '../storable-input.ts';
import { incomingRecord } from '../records.ts';
import { loadInstance, SECRET_HEADERS } from './common.ts';
import { PageQuery, readPage } from './list-page.ts';

const MEDIA_READ_TIMEOUT_MS = 20_000;

export function mediaUrlFor(deps: GatewayDeps, instanceId: string) {
  return (mediaId: string) => mediaLink(deps.crypto, deps.config.publicBaseUrl, instanceId, mediaId, deps.config.mediaLinkTtlSeconds);
}

/** A signed link's query part, as the query string gave it. */
const LINK_PART = z.union([z.string(), z.array(z.string())]).optional();

export const activityRoutes = [
  route({
    method: 'get',
    path: '/api/instances/{id}/incoming',
    auth: 'any',
    tag: 'activity',
    summary: 'The last 50 received messages, including the instance’s own (`before`, `limit`: page back)',
    query: PageQuery,
    responses: { 200: listOf(IncomingRecord) },
    handler: async ({ deps, params, query }) => {
      await loadInstance(deps, params.id);
      // With whether each message's file is still kept: a link only for a file retention has not removed.
      const list = deps.db('incoming as i')
        .leftJoin('media as m', 'm.id', deps.db.raw(`i.media ->> 'mediaId'`))
        .where({ 'i.instance_id': params.id })
        .select('i.*', deps.db.raw('m.id is not null as media_kept'));
      const rows = await readPage(deps.db, list, { table: 'incoming', alias: 'i' }, params.id, query);
      // Signed media links work without a credential: kept out of caches like other secrets.
      return { body: { data: rows.map((r) => incomingRecord(r, mediaUrlFor(deps, params.id))) }, headers: SECRET_HEADERS };
    },
  }),
  route({
    method: 'get',
    path: '/api/instances/{id}/events',
    auth: 'any',
    tag: 'activity',
    summary: 'The last 50 events with their webhook delivery result (`before`, `limit`: page back; `deliveryStatus`: only those)',
    query: PageQuery.extend({ deliveryStatus: z.enum(DELIVERY_STATUSES).optional().meta({ description: 'Only the events whose delivery is in this status.' }) }),
    responses: { 200: listOf(EventRecord) },
    handler: async ({ deps, params, query }) => {
      await loadInstance(deps, params.id);
      const list = eventsWithDelivery(deps.db, params.id);
      if (query.deliveryStatus) narrowToDeliveryStatus(list, params.id, query.deliveryStatus);
      const rows = await readPage(deps.db, list, { table: 'events', alias: 'e' }, params.id, query);
      return { body: { data: rows.map(toEventWithDelivery) }, headers: SECRET_HEADERS }; // bodies hold signed media links
    },
  }),
  route({
    method: 'post',
    path: '/api/instances/{id}/events/retry',
    auth: 'admin',
    tag: 'activity',
    summary: 'Start a fresh delivery series for every exhausted event of the instance (after a receiver outage), each routed with the webhook configuration of now',
    responses: { 202: z.object({ retried: z.number().int().nonnegative(), notRetryable: z.number().int().nonnegative() }), 404: 'absent' },
    handler: async ({ deps, params }) => {
      await loadInstance(deps, params.id);
      return { status: 202, body: await retryExhaustedDeliveries(deps.db, params.id) };
    },
  }),
  route({
    method: 'post',
    path: '/api/instances/{id}/events/{eventId}/retry',
    auth: 'admin',
    tag: 'activity',
    summary: 'Start a fresh delivery series for an exhausted event (same id and body, routed with the webhook configuration of now)',
    responses: { 202: EventRecord, 404: 'absent', 409: 'not exhausted, or no URL for the event now' },
    handler: async ({ deps, params }) => {
      await loadInstance(deps, params.id);
      return { status: 202, body: await retryEvent(deps.db, params.id, params.eventId) };
    },
  }),
  route({
    method: 'get',
    path: '/api/instances/{id}/media/{mediaId}',
    auth: 'any-or-link',
    tag: 'activity',
    summary: 'Download a media file (Bearer credential, or a signed link until it expires)',
    // Any value is taken: a malformed link is a forged one (401), not a bad request.
    query: z.object({ expires: LINK_PART, signature: LINK_PART }).loose(),
    queryNotStored: true,
    responses: { 200: { file: 'the file, with its own Content-Type' }, 401: 'no credential or bad link', 403: 'a credential of another instance', 404: 'absent', 500: 'the stored file failed its integrity check (media_integrity_failed)', 504: 'store time-out' },
    handler: async ({ deps, ctx, params, query }) => {
      await authorizeMedia(deps, ctx.get('authorization') ? bearerToken(ctx) ?? '' : undefined, params, query);
      assertStorableParams(params);
      const record = await getMediaRecord(deps.db, params.id, params.mediaId);
      if (!record) throw problems.notFound('The media file');
      const bytes = await readMedia(deps.media, record.id, MEDIA_READ_TIMEOUT_MS).catch((err) => {
        if (err instanceof MediaIntegrityError) throw new Problem(500, 'media_integrity_failed', 'The stored file failed its integrity check and is not served.');
        throw err;
      });
      const fileName = record.fileName ?? `${record.id}${extensionFor(record.mimetype)}`;
      return {
        body: Buffer.from(bytes),
        headers: {
          'Content-Type': headerSafeMimetype(record.mimetype),
          'Content-Length': String(bytes.byteLength),
          'Content-Disposition': contentDisposition(fileName),
          'Cache-Control': 'private, no-store',
          'X-Content-Type-Options': 'nosniff',
          // A sender's file, whatever type it claims: never a page that runs anything here.
          'Content-Security-Policy': "sandbox; default-src 'none'",
        },
      };
    },
  }),
];

/** A valid signed link grants the download by itself, whatever else the request carries;
 *  otherwise a credential of the instance is needed. */
async function authorizeMedia(deps: GatewayDeps, token: string | undefined, params: Record<string, string>, query: { expires?: unknown; signature?: unknown }) {
  if (query.expires !== undefined && verifyMediaLink(deps.crypto, params.id, params.mediaId, query.expires, query.signature)) return;
  if (token !== undefined) {
    authorize('any', await resolvePrincipal(deps, token), params.id);
    return;
  }
  throw new Problem(401, 'unauthorized', 'Send a credential of this instance, or use a signed media link that has not expired.', undefined, { 'WWW-Authenticate': 'Bearer' });
}

function contentDisposition(fileName: string): string {
  const ascii = fileName.replace(/[^\x20-\x7e]|["\\]/g, '_');
  return `attachment; filename="${ascii}"; filename*=UTF-8''${rfc8187Encoded(fileName)}`;
}

/** RFC 8187 value-chars: encodeURIComponent leaves ' ( ) * unescaped, which are not attr-chars
 *  (a strict parser rejects the header). */
function rfc8187Encoded(text: string): string {
  return encodeURIComponent(text).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

const EXTENSIONS: Record<string, string> = {
  'image/jpeg': '.jpg',
  'image/png': '.png',
  'image/webp': '.webp',
  'image/gif': '.gif',
  'video/mp4': '.mp4',
  'audio/ogg': '.ogg',
  'audio/mpeg': '.mp3',
  'application/pdf': '.pdf',
};

function extensionFor(mimetype: string): string {
  return EXTENSIONS[mimetype.split(';')[0].trim()] ?? '';
}

/** `type/subtype`, then parameters of printable ASCII: what a Content-Type header may carry. */
const MEDIA_TYPE = /^[\w!#$&^.+-]+\/[\w!#$&^.+-]+([ \t]*;[\x20-\x7e]*)?$/;

/** A stored mimetype came from a sender (any WhatsApp contact, or an API client's quoted
 *  parameter): one that is no media type a header can carry (`bogus`, blanks, non-ASCII) is
 *  served as plain bytes instead of failing the download or naming no type at all. */
function headerSafeMimetype(mimetype: string): string {
  return mimetype.length <= 255 && MEDIA_TYPE.test(mimetype) ? mimetype : 'application/octet-stream';
}

/** Events whose delivery is in `status`, found through the deliveries' (instance_id, status)
 *  index: the few exhausted ones of a large instance without reading all its events. An event the
 *  dispatcher has not routed yet has no delivery row: it is pending. */
function narrowToDeliveryStatus(list: Knex.QueryBuilder, instanceId: string, status: string): void {
  if (status === 'pending') list.where((q) => q.where('d.status', 'pending').orWhereNull('d.event_id'));
  else list.where({ 'd.instance_id': instanceId, 'd.status': status });
}
