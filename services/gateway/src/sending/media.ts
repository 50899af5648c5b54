// Media of a send: decoded once, checked, converted to a voice note when asked, and stored
// encrypted before the queue item exists (an orphan blob is removed by retention).
import { isForeignKeyViolation, Problem, problems, storeMedia } from '@switchboard/core';
import type { GatewayDeps } from '../deps.ts';
import type { SendRequest } from '../schemas.ts';
import { assertMimetype, decodeBase64Strict } from '../media/outbound.ts';
import { convertToVoiceNote } from '../media/voice-note.ts';
import { mediaSeconds } from '../media/duration.ts';

export async function prepareMedia(deps: GatewayDeps, instanceId: string, req: SendRequest): Promise<{ id: string; mimetype: string; seconds?: number } | undefined> {
  if (req.type === 'text') {
    if (req.ptt) throw unsupported('ptt is only for audio');
    return undefined;
  }
  if (req.ptt && req.type !== 'audio') throw unsupported('ptt is only for audio');
  let mimetype = assertMimetype(req.type, req.mimetype!);
  let bytes: Uint8Array = decodeBase64Strict(req.base64!);
  let seconds: number | undefined;
  if (req.type === 'audio' && req.ptt) {
    const note = await convertToVoiceNote(bytes);
    bytes = note.bytes;
    seconds = note.seconds;
    mimetype = 'audio/ogg; codecs=opus';
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
  return { id: record.id, mimetype, seconds };
}

function unsupported(detail: string): Problem {
  return new Problem(422, 'unsupported_option', detail, [{ path: 'ptt', message: detail }]);
}
