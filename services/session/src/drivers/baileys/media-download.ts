// Downloads and decrypts the media of a received message, under a deadline, and when the first
// try fails (typically an expired link: 404/410) asks the sender's phone to re-upload it once and
// tries again.
//
// Why not Baileys' downloadMediaMessage: it pipes the HTTP body into its decipher with `.pipe()`,
// so a connection reset mid-download is an 'error' on a stream nobody listens to — an uncaught
// exception that would take the whole session process down. Here the body is read under an
// AbortSignal, the MAC is checked, and every failure is an ordinary rejection.
import { createDecipheriv, createHmac, timingSafeEqual } from 'node:crypto';
import {
  DEFAULT_ORIGIN,
  getContentType,
  getMediaKeys,
  getUrlFromDirectPath,
  type MediaType,
  type WAMessage,
} from '@whiskeysockets/baileys';
import type { proto } from '@whiskeysockets/baileys';
import { withDeadline } from '@switchboard/core';

export interface MediaDownloadOptions {
  /** Deadline for one download (and for the re-upload request). */
  timeoutMs: number;
  /** Refuse to read more than this many bytes. */
  maxBytes: number;
  /** Re-upload request (the socket's updateMediaMessage). */
  reupload(message: WAMessage): Promise<WAMessage>;
  /** Which URLs may be fetched (default: WhatsApp's media hosts). The URL comes from the sender's
   *  message, so without this any contact could make the session request internal addresses. */
  urlAllowed?: (url: URL) => boolean;
}

/** WhatsApp's media CDN: HTTPS on port 443 of a whatsapp.net host. */
export function isWhatsAppMediaUrl(url: URL): boolean {
  return url.protocol === 'https:' && url.port === '' && (url.hostname === 'whatsapp.net' || url.hostname.endsWith('.whatsapp.net'));
}

export class MediaDownloadError extends Error {
  override name = 'MediaDownloadError';
}

const MAC_LENGTH = 10;

export async function downloadWithRetry(message: WAMessage, opts: MediaDownloadOptions): Promise<Uint8Array> {
  try {
    return await downloadOnce(message, opts);
  } catch (first) {
    let refreshed: WAMessage;
    try {
      refreshed = await withDeadline(opts.reupload(reuploadable(message)), opts.timeoutMs, () => new MediaDownloadError('media re-upload request timed out'));
    } catch (reuploadError) {
      throw new MediaDownloadError(`media unavailable (${describe(first)}); re-upload failed (${describe(reuploadError)})`);
    }
    try {
      return await downloadOnce(refreshed, opts);
    } catch (second) {
      throw new MediaDownloadError(`media unavailable after re-upload (${describe(second)})`);
    }
  }
}

/** Baileys' updateMediaMessage refuses a round video note (ptvMessage: not in its list of media
 *  kinds), though it is a video with the same keys: it is asked as one. */
function reuploadable(message: WAMessage): WAMessage {
  const ptv = message.message?.ptvMessage;
  return ptv ? { ...message, message: { videoMessage: ptv } } : message;
}

/** The media part of a message and the type its keys are derived for. */
function mediaOf(message: WAMessage): { media: proto.Message.IImageMessage; type: MediaType } {
  const content = message.message ?? undefined;
  const key = getContentType(content);
  const media = key ? (content as Record<string, unknown>)[key] : undefined;
  if (!key || !media || typeof media !== 'object' || !('mediaKey' in media)) throw new MediaDownloadError('not a media message');
  return { media: media as proto.Message.IImageMessage, type: key.replace('Message', '') as MediaType };
}

async function downloadOnce(message: WAMessage, opts: MediaDownloadOptions): Promise<Uint8Array> {
  const { media, type } = mediaOf(message);
  const url = media.directPath ? getUrlFromDirectPath(media.directPath, hostOf(media.url)) : media.url;
  if (!url || !media.mediaKey) throw new MediaDownloadError('no media URL or key');
  const { iv, cipherKey, macKey } = await getMediaKeys(media.mediaKey, type);
  if (!macKey) throw new MediaDownloadError('no media MAC key');
  const body = await fetchBody(url, opts);
  if (body.length < MAC_LENGTH + 16) throw new MediaDownloadError('media file truncated');
  const ciphertext = body.subarray(0, body.length - MAC_LENGTH);
  const mac = createHmac('sha256', macKey).update(iv).update(ciphertext).digest().subarray(0, MAC_LENGTH);
  if (!timingSafeEqual(mac, body.subarray(body.length - MAC_LENGTH))) throw new MediaDownloadError('media MAC mismatch');
  const decipher = createDecipheriv('aes-256-cbc', cipherKey, iv);
  return new Uint8Array(Buffer.concat([decipher.update(ciphertext), decipher.final()]));
}

/** Reads the whole response body as a stream, aborting at the deadline or past maxBytes. */
async function fetchBody(url: string, opts: MediaDownloadOptions): Promise<Buffer> {
  const parsed = URL.canParse(url) ? new URL(url) : undefined;
  if (!parsed || !(opts.urlAllowed ?? isWhatsAppMediaUrl)(parsed)) throw new MediaDownloadError('the media URL is not on a WhatsApp media host');
  const signal = AbortSignal.timeout(opts.timeoutMs);
  try {
    // No redirects: the host check above must hold for the address actually fetched.
    const res = await fetch(parsed, { headers: { Origin: DEFAULT_ORIGIN }, signal, redirect: 'error' });
    if (!res.ok || !res.body) {
      await res.body?.cancel().catch(() => {});
      throw new MediaDownloadError(`HTTP ${res.status}`);
    }
    const reader = res.body.getReader();
    const chunks: Buffer[] = [];
    let size = 0;
    try {
      for (let read = await reader.read(); !read.done; read = await reader.read()) {
        size += read.value.length;
        if (size > opts.maxBytes) throw new MediaDownloadError(`media larger than ${opts.maxBytes} bytes`);
        chunks.push(Buffer.from(read.value));
      }
    } finally {
      reader.cancel().catch(() => {});
    }
    return Buffer.concat(chunks);
  } catch (error) {
    if (signal.aborted) throw new MediaDownloadError('media download timed out');
    throw error;
  }
}

function hostOf(url: string | null | undefined): string | undefined {
  try {
    return url ? new URL(url).host : undefined;
  } catch {
    return undefined;
  }
}


/** A short, secret-free description (media URLs carry access tokens, so they are left out). */
function describe(error: unknown): string {
  const e = error as { output?: { statusCode?: number }; message?: string; name?: string } | undefined;
  if (error instanceof MediaDownloadError) return e!.message!;
  if (typeof e?.output?.statusCode === 'number') return `status ${e.output.statusCode}`;
  if (e?.message && !/[a-z]+:\/\//i.test(e.message)) return e.message;
  return e?.name ?? 'error';
}
