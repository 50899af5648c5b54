// Media of a send: decoded once and checked (checkMedia, before the instance's state is, so a
// request that can never succeed is told so rather than asked to retry), then converted (a voice
// note when asked; a sticker that is not WebP) and stored encrypted before the queue item exists
// (storeSendMedia). A file no item came to refer to is removed by acceptSend (a refusal, a
// reused operation), or by retention when a process died in between.
import { isForeignKeyViolation, Problem, problems, storeMedia } from '@switchboard/core';
import type { GatewayDeps } from '../deps.ts';
import type { SendRequest } from '../schemas.ts';
import { assertMimetype, decodeBase64Strict, mimetypeEssence } from '../media/outbound.ts';
import { convertToVoiceNote } from '../media/voice-note.ts';
import { CONVERTIBLE_STICKER_MIMETYPES, convertToSticker } from '../media/sticker.ts';
import { mediaSeconds } from '../media/duration.ts';

/** A send's file once stored: what its queue item records of it. */
export interface StoredSendMedia {
  id: string;
  mimetype: string;
  seconds?: number;
  /** A voice note's waveform (WAVEFORM_BARS values of 0–100). */
  waveform?: Uint8Array;
}

export interface DecodedMedia {
  mimetype: string;
  bytes: Uint8Array;
}

/** The checks that need no conversion: ptt only on audio (422), the mimetype (400), the base64 and
 *  its decoded size (400, 413). Undefined for a text. */
export function checkMedia(req: SendRequest): DecodedMedia | undefined {
  if (req.ptt && req.type !== 'audio') throw unsupported('ptt is only for audio');
  if (req.type === 'text') return undefined;
  return { mimetype: assertMimetype(req.type, req.mimetype!), bytes: decodeBase64Strict(req.base64!) };
}

/** Converts a voice note or a sticker (422 when the file cannot be decoded) and stores the file. */
export async function storeSendMedia(deps: GatewayDeps, instanceId: string, req: SendRequest, decoded: DecodedMedia): Promise<StoredSendMedia> {
  let { mimetype, bytes } = decoded;
  let seconds: number | undefined;
  let waveform: Uint8Array | undefined;
  if (req.type === 'audio' && req.ptt) {
    const note = await convertToVoiceNote(bytes);
    bytes = note.bytes;
    seconds = note.seconds;
    waveform = note.waveform;
    mimetype = 'audio/ogg; codecs=opus';
  } else if (req.type === 'sticker' && CONVERTIBLE_STICKER_MIMETYPES.has(mimetypeEssence(mimetype))) {
    bytes = await convertToSticker(bytes);
    mimetype = 'image/webp';
  } else if (req.type === 'audio' || req.type === 'video') {
    seconds = await mediaSeconds(bytes);
  }
  const record = await storeMedia(deps.db, deps.media, {
    instanceId,
    direction: 'outbound',
    mimetype,
    fileName: req.fileName ?? null,
    seconds: seconds ?? null,
    voiceNote: Boolean(req.ptt),
    bytes,
  }).catch((err: unknown) => {
    // Deleted while the file was converted or stored: answered as if the send came after the delete.
    throw isForeignKeyViolation(err) ? problems.notFound('The instance') : err;
  });
  return { id: record.id, mimetype, seconds, waveform };
}

function unsupported(detail: string): Problem {
  return new Problem(422, 'unsupported_option', detail, [{ path: 'ptt', message: detail }]);
}
