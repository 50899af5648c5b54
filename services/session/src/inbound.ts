// The receive pipeline (DESIGN §1 "Receive"): a normalised network message becomes an `incoming`
// row (once per message id, so a redelivered message is recorded once), its media is archived,
// and a `message.received` event is recorded in the same statement as the row.
import type { Knex } from 'knex';
import { isDatabaseUnavailable, newId, recordEvent, recordEventAfter, toStorableText, type InboundMedia, type InboundMessage, type Logger, type PresenceUpdate, withDeadline } from '@switchboard/core';
import type { MediaArchive } from './media-archive.ts';

export interface InboundDeps {
  db: Knex;
  instanceId: string;
  media: MediaArchive;
  downloadTimeoutMs: number;
  log: Logger;
  /** Whether a message id is one of our API sends (→ fromApi). */
  isOwnSend(messengerId: string): Promise<boolean>;
}

/** How the media is kept on the incoming row; links are signed on demand from `mediaId`. */
interface StoredMediaInfo {
  mediaId: string | null;
  mimetype: string;
  fileName: string | null;
  seconds: number | null;
  voiceNote: boolean;
  downloadAvailable: boolean;
  viewOnce?: boolean;
  error?: string;
}

/** Records one inbound message. Returns false when it had been recorded before. */
export async function recordInbound(deps: InboundDeps, received: InboundMessage): Promise<boolean> {
  const msg = storableMessage(received);
  // The look-up only saves downloading a duplicate's media; without media the insert below
  // (ON CONFLICT … IGNORE) detects a duplicate by itself, one round trip fewer per message.
  if (msg.media && (await alreadyRecorded(deps, msg.messageId))) return false;
  const fromApi = msg.fromApi ?? (msg.fromMe && (await deps.isOwnSend(msg.messageId)));
  const media = msg.media ? await archiveMedia(deps, msg.media) : undefined;

  // One statement (autocommit): the incoming row, and only if it was new (ON CONFLICT … IGNORE
  // returns no row for a message recorded before), its event and outbox rows.
  const incoming = deps.db('incoming')
    .insert({
      id: newId('in'),
      instance_id: deps.instanceId,
      message_id: msg.messageId,
      from: msg.from,
      phone: msg.phone,
      chat_lid: msg.chatLid,
      participant: msg.participant,
      from_me: msg.fromMe,
      from_api: fromApi,
      name: msg.name,
      type: msg.type,
      text: msg.text,
      media: media ? JSON.stringify(media) : null,
    })
    .onConflict(['instance_id', 'message_id'])
    .ignore()
    .returning('id');
  const event = await recordEventAfter(deps.db, incoming, { instanceId: deps.instanceId, type: 'message.received', data: eventData(deps, msg, fromApi, media) });
  const recorded = event !== null;
  if (!recorded && media?.mediaId) deps.log.debug({ mediaId: media.mediaId }, 'inbound: duplicate message, its media copy is left to retention');
  return recorded;
}

export async function recordPresence(db: Knex, instanceId: string, update: PresenceUpdate): Promise<void> {
  // One statement (event + outbox row), so no transaction is needed.
  await recordEvent(db, { instanceId, type: 'chat.presence', data: { phone: update.phone, chatLid: update.chatLid, presence: update.presence } });
}

/** Senders choose texts, names and file names: what PostgreSQL cannot store (NUL, unpaired
 *  surrogates) is cleaned here, or the insert would fail and the message would be lost; file
 *  names lose what would mislead whoever saves the file by them. */
function storableMessage(msg: InboundMessage): InboundMessage {
  const clean = (text: string | null) => (text === null ? null : toStorableText(text));
  const media = msg.media && {
    ...msg.media,
    mimetype: toStorableText(msg.media.mimetype),
    ...(msg.media.fileName !== undefined ? { fileName: safeFileName(msg.media.fileName) } : {}),
  };
  return { ...msg, name: clean(msg.name), text: clean(msg.text), ...(media ? { media } : {}) };
}

/** A sender's file name as a name to save a file by: no control or formatting characters (a
 *  right-to-left override would show `txt.exe` as `exe.txt`) and no path separators. */
function safeFileName(name: string): string {
  return toStorableText(name).replace(/[\p{Cc}\p{Cf}]/gu, '').replace(/[/\\]/g, '_');
}

async function alreadyRecorded(deps: InboundDeps, messageId: string): Promise<boolean> {
  const row = await deps.db('incoming').where({ instance_id: deps.instanceId, message_id: messageId }).first('id');
  return row !== undefined;
}

async function archiveMedia(deps: InboundDeps, media: InboundMedia): Promise<StoredMediaInfo> {
  const info: StoredMediaInfo = {
    mediaId: null,
    mimetype: media.mimetype,
    fileName: media.fileName ?? null,
    seconds: media.seconds ?? null,
    voiceNote: media.voiceNote ?? false,
    downloadAvailable: false,
  };
  if (media.viewOnce) {
    // Single-view media is announced but never archived (spec, Limits).
    return { ...info, viewOnce: true, error: 'view_once: single-view media is not archived' };
  }
  let bytes: Uint8Array;
  try {
    bytes = await withDeadline(media.download(), deps.downloadTimeoutMs, () => new Error(`timed out after ${deps.downloadTimeoutMs} ms`));
  } catch (err) {
    deps.log.warn({ err: err instanceof Error ? err.message : String(err) }, 'inbound: media download failed');
    return { ...info, error: `download_failed: ${err instanceof Error ? err.message : 'the media could not be downloaded'}` };
  }
  try {
    const stored = await deps.media.store({ instanceId: deps.instanceId, direction: 'inbound', mimetype: media.mimetype, fileName: media.fileName, seconds: media.seconds, voiceNote: media.voiceNote, bytes });
    return { ...info, mediaId: stored.id, downloadAvailable: true };
  } catch (err) {
    // A database away for a moment fails the whole message, which the driver records again (and
    // downloads again) once it answers; reported as a failed download, the file was lost for good.
    if (isDatabaseUnavailable(err)) throw err;
    deps.log.error({ err: err instanceof Error ? err.message : String(err) }, 'inbound: the downloaded media could not be stored');
    return { ...info, error: 'store_failed: the media was downloaded but could not be stored' };
  }
}

function eventData(deps: InboundDeps, msg: InboundMessage, fromApi: boolean, media: StoredMediaInfo | undefined): Record<string, unknown> {
  const data: Record<string, unknown> = {
    messageId: msg.messageId,
    from: msg.from,
    phone: msg.phone,
    chatLid: msg.chatLid,
    participant: msg.participant,
    fromMe: msg.fromMe,
    fromApi,
    name: msg.name,
    type: msg.type,
    text: msg.text,
  };
  if (media) {
    data.media = {
      url: media.mediaId ? deps.media.link(deps.instanceId, media.mediaId) : null,
      mimetype: media.mimetype,
      fileName: media.fileName,
      seconds: media.seconds,
      voiceNote: media.voiceNote,
      downloadAvailable: media.downloadAvailable,
      ...(media.viewOnce ? { viewOnce: true } : {}),
      ...(media.error ? { error: media.error } : {}),
    };
  }
  return data;
}

