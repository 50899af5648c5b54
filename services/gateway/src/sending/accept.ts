// Accepting a send (DESIGN §1 "Send", §5 "Sending"): validate, apply idempotency, store media,
// then the SendItemWriter inserts the queue item with its outbox row (many requests' items per
// statement under load) while the database enforces the queue limit. The relay publishes it.
import { createHash } from 'node:crypto';
import {
  discardMedia,
  newId,
  newMessengerId,
  Problem,
  problems,
  inSpan,
  injectTraceparent,
  SEND_QUEUE_LIMIT,
  type Db,
} from '@switchboard/core';
import type { GatewayDeps } from '../deps.ts';
import type { SendRequest } from '../schemas.ts';
import { settingsOf } from '../records.ts';
import { canonicalMimetype } from '../media/outbound.ts';
import { checkMedia, storeSendMedia, type StoredSendMedia } from './media.ts';
import type { NewSendItem } from './send-item-writer.ts';

const IDEMPOTENCY_TTL_MS = 24 * 3600_000;

export interface Accepted {
  id: string;
  messengerId: string;
  status: string;
  reused: boolean;
}

/** Accepts a send inside the "accept send" span; its traceparent is stored with the item and its
 *  outbox row, so the session's send and the resulting webhooks continue this trace. */
export function acceptSend(
  deps: GatewayDeps,
  instanceId: string,
  req: SendRequest,
  idempotencyKey: string | undefined,
  /** The instance's row, as the route read it (or the token look-up did). */
  instance: InstanceRow,
): Promise<Accepted> {
  const attributes = { 'switchboard.instance_id': instanceId, 'switchboard.message.type': req.type };
  return inSpan('accept send', { attributes }, async (span) => {
    const accepted = await acceptSendNow(deps, instanceId, req, idempotencyKey, instance);
    span.setAttribute('switchboard.message.id', accepted.id);
    span.setAttribute('switchboard.message.reused', accepted.reused);
    return accepted;
  });
}

type InstanceRow = { paused: boolean; state: string; settings: unknown; queued_count?: number };

async function acceptSendNow(deps: GatewayDeps, instanceId: string, req: SendRequest, idempotencyKey: string | undefined, instance: InstanceRow): Promise<Accepted> {
  // Only a key's reuse compares content: without one there is nothing to hash.
  const contentHash = idempotencyKey ? hashContent(req) : null;
  const refusal = refusalOf(instance);
  // A retried media send finds its operation before converting and storing the file again, and a
  // retry must be answered even if the instance was paused since. Otherwise (text, the hot path)
  // the insert itself detects a used key (ON CONFLICT), one statement fewer.
  if (idempotencyKey && (req.type !== 'text' || refusal)) {
    const reused = await findReusable(deps.db, instanceId, idempotencyKey, contentHash!);
    if (reused) return reused;
  }
  // A request that can never succeed says so (400, 413, 422) rather than 409 or 429, which ask for
  // a retry. Only the conversion of a voice note or a sticker waits for an instance that takes
  // the send.
  const decoded = checkMedia(req);
  if (refusal) throw refusal;
  const media = decoded && (await storeSendMedia(deps, instanceId, req, decoded));
  try {
    const accepted = await writeItem(deps, instanceId, req, idempotencyKey, contentHash, media);
    if (media && accepted.reused) await discardUnused(deps, media.id);
    return accepted;
  } catch (err) {
    // Only a refusal says no item was written; after a database fault one may have been.
    if (media && err instanceof Problem) await discardUnused(deps, media.id);
    throw err;
  }
}

/** A file stored for a send that no item refers to: refused (queue full, a key's other content),
 *  or answered from the operation an earlier request started. */
async function discardUnused(deps: GatewayDeps, mediaId: string): Promise<void> {
  await discardMedia(deps.db, deps.media, mediaId).catch((err: unknown) => deps.log.warn({ mediaId, err: String(err) }, 'send: an unused media file could not be removed now; retention removes it'));
}

/** The queue item (and its outbox row); a used key answers from its operation, or 409. */
async function writeItem(deps: GatewayDeps, instanceId: string, req: SendRequest, idempotencyKey: string | undefined, contentHash: string | null, media: StoredSendMedia | undefined): Promise<Accepted> {
  const item: NewSendItem = {
    id: newId('msg'),
    instance_id: instanceId,
    messenger_id: newMessengerId(),
    phone: req.phone,
    type: req.type,
    payload: JSON.stringify({
      text: req.text,
      caption: req.caption,
      fileName: req.fileName,
      mimetype: media?.mimetype,
      ptt: req.ptt,
      seconds: media?.seconds,
      waveform: media?.waveform && Buffer.from(media.waveform).toString('base64'),
      mediaId: media?.id,
    }),
    status: 'queued',
    idempotency_key: idempotencyKey ?? null,
    content_hash: contentHash,
    expires_at: new Date(Date.now() + deps.config.sendExpiryMs),
    trace_context: injectTraceparent() ?? null,
  };
  // The key's first use inserts; a used key answers from its operation (or 409). A key older than
  // 24 h is released by findReusable, and then this request inserts after all.
  for (let tries = 0; tries < 2; tries++) {
    const written = await deps.sendItems.write(item);
    if (written === 'queue_full') throw queueFull();
    if (written === 'instance_gone') throw problems.notFound('The instance');
    if (written === 'queued') {
      deps.relay.kick();
      return { id: item.id, messengerId: item.messenger_id, status: 'queued', reused: false };
    }
    const reused = await findReusable(deps.db, instanceId, idempotencyKey!, contentHash!);
    if (reused) return reused;
  }
  // Only a race with a concurrent release of the same key gets here.
  throw problems.conflict('idempotency_key_busy', 'This Idempotency-Key changed hands while the request ran; send the request again.');
}

async function findReusable(db: Db, instanceId: string, key: string, contentHash: string): Promise<Accepted | undefined> {
  const row = await db('send_items').where({ instance_id: instanceId, idempotency_key: key }).first();
  if (!row) return undefined;
  if (Date.now() - new Date(row.created_at).getTime() > IDEMPOTENCY_TTL_MS) {
    // Keys live 24 h: an old key is released so it can start a new operation.
    await db('send_items').where({ id: row.id }).update({ idempotency_key: null });
    return undefined;
  }
  if (row.content_hash !== contentHash) {
    throw problems.conflict('idempotency_conflict', 'This Idempotency-Key was already used with different content; use a new key for a new message.');
  }
  // A replay of the first acceptance (as that answer was): where the send is now, GET …/messages/{id} says.
  return { id: row.id, messengerId: row.messenger_id, status: 'queued', reused: true };
}

function queueFull(): Problem {
  return new Problem(429, 'queue_full', `The instance already has ${SEND_QUEUE_LIMIT} queued sends; wait for them to be sent.`, undefined, { 'Retry-After': '5' });
}

/** Why the instance takes no send now (paused, offline with disableOfflineQueue, queue full), or undefined. */
function refusalOf(row: InstanceRow): Problem | undefined {
  if (row.paused) return problems.conflict('instance_paused', 'The instance was disconnected; connect it before sending.');
  if (settingsOf(row).disableOfflineQueue && row.state !== 'connected') {
    return problems.conflict('instance_offline', 'The instance is not connected and disableOfflineQueue is on.');
  }
  // The row was read a moment ago; the database re-checks exactly on insert. Answering a full
  // queue here keeps clients that hammer it from costing other instances' sends anything.
  if (Number(row.queued_count ?? 0) >= SEND_QUEUE_LIMIT) return queueFull();
  return undefined;
}

/** Canonical content: the same message always hashes the same, whatever the key order, and
 *  blanks around the mimetype (not part of what is sent) change nothing. */
function hashContent(req: SendRequest): string {
  const mimetype = req.mimetype === undefined ? null : canonicalMimetype(req.mimetype);
  const canonical = [req.phone, req.type, req.text ?? null, req.base64 ?? null, mimetype, req.caption ?? null, req.fileName ?? null, req.ptt ?? false];
  return createHash('sha256').update(JSON.stringify(canonical)).digest('hex');
}

