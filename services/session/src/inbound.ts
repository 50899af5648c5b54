// The receive pipeline (DESIGN §1 "Receive"): a normalised network message becomes an `incoming`
// row (once per message id, so a redelivered message is recorded once), its media is archived,
// and a `message.received` event is recorded in the same statement as the row.
import type { Knex } from 'knex';
import { batchGatherMs, CallBatcher, eventSpanAttributes, injectTraceparent, inSpan, isDatabaseUnavailable, newId, recordEvent, recordKeyedEvents, toStorableText, withDeadline, type InboundMedia, type InboundMessage, type Logger, type NewEvent, type PresenceUpdate, type Span } from '@switchboard/core';
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

/** At most this many messages in one statement. */
const MAX_BATCH = 256;

/** An inbound message ready to be written: its incoming row and its event. */
interface PreparedInbound {
  incoming: Record<(typeof INCOMING_COLUMNS)[number], string | boolean | null> & { message_id: string };
  event: NewEvent;
  /** The media archived for it, if any. */
  mediaId: string | null;
}

/**
 * Records inbound messages in the order they are handed over, each once per message id (a
 * redelivered message is recorded once). A message's media is archived first; then its incoming
 * row, and only if it is new its event and outbox rows, are written. Messages handed over while a
 * statement runs are written together by the next one, so a burst costs a statement per batch,
 * not one per message, and the next message need not wait for the previous one's commit.
 */
export class InboundRecorder {
  private readonly writer: CallBatcher<PreparedInbound, boolean | Error>;
  /** Messages are prepared one after another, so they reach the writer in the order given. */
  private preparing: Promise<unknown> = Promise.resolve();

  constructor(private readonly deps: InboundDeps) {
    this.writer = new CallBatcher((batch) => writeInbound(deps.db, batch), MAX_BATCH, batchGatherMs(deps.db));
  }

  /** Resolves once the message is recorded: true, or false when it had been recorded before. */
  async record(received: InboundMessage): Promise<boolean> {
    const queued = this.preparing.then(async () => {
      const prepared = await prepareInbound(this.deps, received);
      // A span per message around its share of the statement; its context is stored with the
      // event, so the webhook attempts join the message's trace.
      return { written: prepared ? inSpan('record event', { attributes: eventSpanAttributes(prepared.event) }, (span) => this.write(prepared, span)) : Promise.resolve(false) };
    });
    // The next message waits for this one's preparing and hand-over (`written` is wrapped so the
    // chain does not wait for its statement), not for its commit.
    this.preparing = queued.catch(() => undefined);
    return (await queued).written;
  }

  private async write(prepared: PreparedInbound, span: Span): Promise<boolean> {
    const recorded = await this.writer.submit({ ...prepared, event: { ...prepared.event, traceContext: injectTraceparent() } });
    if (recorded instanceof Error) throw recorded;
    if (!recorded) span.setAttribute('switchboard.event.recorded', false);
    if (!recorded && prepared.mediaId) this.deps.log.debug({ mediaId: prepared.mediaId }, 'inbound: duplicate message, its media copy is left to retention');
    return recorded;
  }
}

/** The incoming row and event of a message, its media archived; null when a message with media
 *  was recorded before (the look-up saves downloading it again). */
async function prepareInbound(deps: InboundDeps, received: InboundMessage): Promise<PreparedInbound | null> {
  const msg = storableMessage(received);
  if (msg.media && (await alreadyRecorded(deps, msg.messageId))) return null;
  const fromApi = msg.fromApi ?? (msg.fromMe && (await deps.isOwnSend(msg.messageId)));
  const media = msg.media ? await archiveMedia(deps, msg.media) : undefined;
  const incoming = {
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
  };
  return { incoming, event: { instanceId: deps.instanceId, type: 'message.received', data: eventData(deps, msg, fromApi, media) }, mediaId: media?.mediaId ?? null };
}

/** The batch in one statement; if the database refuses it, each message on its own, in order, so
 *  that a message it cannot store fails alone, not with the messages that came with it. */
async function writeInbound(db: Knex, batch: PreparedInbound[]): Promise<(boolean | Error)[]> {
  try {
    return await writeTogether(db, batch);
  } catch (err) {
    if (batch.length === 1 || isDatabaseUnavailable(err)) throw err;
    const results: (boolean | Error)[] = [];
    for (const p of batch) results.push(await writeTogether(db, [p]).then(([recorded]) => recorded, (e: unknown) => (e instanceof Error ? e : new Error(String(e)))));
    return results;
  }
}

/** The incoming rows of a batch, arrays in, so the statement's text is the same for every batch
 *  (a prepared statement, planned once per connection); each new row returns its message id. */
const INSERT_INCOMING = `
  insert into incoming (id, instance_id, message_id, "from", phone, chat_lid, participant, from_me, from_api, name, type, text, media)
  select id, instance_id, message_id, "from", phone, chat_lid, participant, from_me, from_api, name, type, text, media::jsonb
  from unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::boolean[], ?::boolean[], ?::text[], ?::text[], ?::text[], ?::text[])
    as u(id, instance_id, message_id, "from", phone, chat_lid, participant, from_me, from_api, name, type, text, media)
  on conflict (instance_id, message_id) do nothing
  returning message_id as key`;

const INCOMING_COLUMNS = ['id', 'instance_id', 'message_id', 'from', 'phone', 'chat_lid', 'participant', 'from_me', 'from_api', 'name', 'type', 'text', 'media'] as const;

/**
 * One statement (autocommit) for the batch: the incoming rows, and for those that were new (ON
 * CONFLICT … DO NOTHING returns no row for a message recorded before) their event and outbox rows,
 * in the batch's order. A message id twice in one batch is recorded by its first copy.
 */
async function writeTogether(db: Knex, batch: PreparedInbound[]): Promise<boolean[]> {
  const first = new Map<string, PreparedInbound>();
  for (const p of batch) if (!first.has(p.incoming.message_id)) first.set(p.incoming.message_id, p);
  const unique = [...first.values()];
  const guard = { sql: INSERT_INCOMING, bindings: INCOMING_COLUMNS.map((column) => unique.map((p) => p.incoming[column])) as Knex.RawBinding[] };
  const envelopes = await recordKeyedEvents(db, guard, unique.map((p) => ({ ...p.event, key: p.incoming.message_id })), 'session_record_inbound');
  const recorded = new Set(unique.filter((_, i) => envelopes[i] !== null));
  return batch.map((p) => recorded.has(p));
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

