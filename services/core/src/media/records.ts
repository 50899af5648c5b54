// Media records: the `media` row (what the file is) next to its encrypted blob in the MediaStore,
// reading with a time limit, and the signed download links of DESIGN §5.
import { createHash } from 'node:crypto';
import type { Db } from '../db/connect.ts';
import { safeEqual, type Crypto } from '../crypto.ts';
import { withDeadline } from '../deadline.ts';
import { newId } from '../ids.ts';
import { Problem, problems } from '../problem.ts';
import { MediaNotFoundError, type MediaStore } from './types.ts';

export type MediaDirection = 'inbound' | 'outbound';

export interface MediaRecord {
  id: string;
  instanceId: string;
  direction: MediaDirection;
  mimetype: string;
  fileName: string | null;
  size: number;
  sha256: string;
  seconds: number | null;
  voiceNote: boolean;
  createdAt: string; // ISO 8601
}

export interface NewMedia {
  instanceId: string;
  direction: MediaDirection;
  mimetype: string;
  fileName?: string | null;
  seconds?: number | null;
  voiceNote?: boolean;
  bytes: Uint8Array;
}

interface MediaRow {
  id: string;
  instance_id: string;
  direction: string;
  mimetype: string;
  file_name: string | null;
  size: string | number;
  sha256: string | null;
  seconds: number | null;
  voice_note: boolean;
  created_at: Date | string;
}

/**
 * Stores the blob, then its row. The blob goes first so a row never points at nothing; a crash in
 * between leaves an unreferenced blob that retention (or the bucket TTL) removes later.
 */
export async function storeMedia(db: Db, store: MediaStore, m: NewMedia): Promise<MediaRecord> {
  const id = newId('med');
  await store.put(id, m.bytes);
  const row = {
    id,
    instance_id: m.instanceId,
    direction: m.direction,
    mimetype: fittedMimetype(m.mimetype),
    file_name: m.fileName ? codePoints(m.fileName, 256) : null,
    size: m.bytes.byteLength,
    sha256: createHash('sha256').update(m.bytes).digest('hex'),
    seconds: wholeSeconds(m.seconds),
    voice_note: m.voiceNote ?? false,
  };
  try {
    const [inserted] = await db('media').insert(row).returning('*');
    return toRecord(inserted as MediaRow);
  } catch (err) {
    await store.delete(id).catch(() => undefined);
    throw err;
  }
}

/** Removes a file stored for a request that then stored nothing referring to it (a send refused
 *  or answered from an earlier operation). Deleting the row queues its blob for the purge drain
 *  (migration 011); the blob goes now, and its queue entry with it — or stays for the drain. */
export async function discardMedia(db: Db, store: MediaStore, mediaId: string): Promise<void> {
  await db('media').where({ id: mediaId }).delete();
  await store.delete(mediaId);
  await db('media_purge').where({ media_id: mediaId }).delete();
}

/** Column widths count characters (code points): a cut never splits a surrogate pair. Names from
 *  the network can be longer than the API allows. */
function codePoints(text: string, max: number): string {
  return text.length <= max ? text : [...text].slice(0, max).join('');
}

/** A mimetype too long for its column keeps its type/subtype and loses its parameters: cut inside
 *  them, a quoted value would be left open in the download's Content-Type. */
function fittedMimetype(mimetype: string): string {
  // 255 characters as the column counts them: code points, not UTF-16 units.
  return codePoints([...mimetype].length <= 255 ? mimetype : mimetype.split(';')[0].trim(), 255);
}

/** The record of a media file of this instance, or undefined (also for another instance's file). */
export async function getMediaRecord(db: Db, instanceId: string, mediaId: string): Promise<MediaRecord | undefined> {
  const row = (await db('media').where({ id: mediaId, instance_id: instanceId }).first()) as MediaRow | undefined;
  return row ? toRecord(row) : undefined;
}

/**
 * Reads and decrypts a blob. Rejects with Problem 504 `media_timeout` when the store does not
 * answer within `timeoutMs`, Problem 404 when the blob is gone; MediaIntegrityError passes
 * through (stored data was altered: a server-side fault, not the client's).
 */
export async function readMedia(store: MediaStore, mediaId: string, timeoutMs: number): Promise<Uint8Array> {
  try {
    return await withDeadline(store.get(mediaId), timeoutMs, () => new Problem(504, 'media_timeout', 'The media store did not answer in time; try again.'));
  } catch (err) {
    if (err instanceof MediaNotFoundError) throw problems.notFound('Media');
    throw err;
  }
}

/** A download link that works without a Bearer credential until it expires (spec, Auth rule 6). */
export function mediaLink(
  crypto: Crypto,
  publicBaseUrl: string,
  instanceId: string,
  mediaId: string,
  ttlSeconds: number,
  now = Date.now(),
): string {
  const expires = String(Math.floor(now / 1000) + ttlSeconds);
  const signature = crypto.signLink(linkMessage(instanceId, mediaId, expires));
  const base = publicBaseUrl.replace(/\/+$/, '');
  const path = `/api/instances/${encodeURIComponent(instanceId)}/media/${encodeURIComponent(mediaId)}`;
  return `${base}${path}?expires=${expires}&signature=${signature}`;
}

/** True only for an unexpired link signed by this service for exactly this instance and media. */
export function verifyMediaLink(
  crypto: Crypto,
  instanceId: string,
  mediaId: string,
  /** As the query string gave them: anything but one well-formed value is a forged link. */
  expires: unknown,
  signature: unknown,
  now = Date.now(),
): boolean {
  if (typeof expires !== 'string' || typeof signature !== 'string') return false;
  if (!/^\d{1,12}$/.test(expires) || !/^[0-9a-f]{64}$/.test(signature)) return false;
  const valid = safeEqual(crypto.signLink(linkMessage(instanceId, mediaId, expires)), signature);
  return valid && Number(expires) * 1000 > now;
}

/** Media volume for diagnostics. */
export async function mediaStats(db: Db): Promise<{ count: number; bytes: number }> {
  const row = (await db('media').count({ count: '*' }).sum({ bytes: 'size' }).first()) as
    | { count: string | number; bytes: string | number | null }
    | undefined;
  return { count: Number(row?.count ?? 0), bytes: Number(row?.bytes ?? 0) };
}

// JSON keeps the three fields apart unambiguously, whatever characters they contain.
function linkMessage(instanceId: string, mediaId: string, expires: string): string {
  return JSON.stringify(['media-link', instanceId, mediaId, expires]);
}

function wholeSeconds(seconds: number | null | undefined): number | null {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds) || seconds < 0) return null;
  return Math.min(Math.round(seconds), 2_147_483_647);
}

function toRecord(row: MediaRow): MediaRecord {
  return {
    id: row.id,
    instanceId: row.instance_id,
    direction: row.direction as MediaDirection,
    mimetype: row.mimetype,
    fileName: row.file_name,
    size: Number(row.size),
    sha256: row.sha256 ?? '',
    seconds: row.seconds,
    voiceNote: row.voice_note,
    createdAt: new Date(row.created_at).toISOString(),
  };
}
