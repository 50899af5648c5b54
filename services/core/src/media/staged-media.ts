// A sandbox inbound message's file, handed from the gateway to the session through the media
// store rather than inside the request: a NATS request carries at most the server's
// `max_payload` (1 MiB by default), a sandbox file up to 32 MiB. The gateway stores the decoded
// bytes under a new id and sends that id in this field instead of `mediaBase64`; the session
// reads them as the network's download and deletes them once the message is recorded (one left
// behind by a failure goes with the store's retention).
import { newId } from '../ids.ts';

export const STAGED_MEDIA_FIELD = 'stagedMediaId';

/** How the sandbox reads `mediaBase64`: standard base64, no `data:` prefix (laxer than a send's). */
export const SANDBOX_BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** Files whose base64 is shorter than this travel inside the request, as before. */
export const STAGE_MEDIA_ABOVE_CHARS = 256 * 1024;

/** A staged file's id. The session deletes the file it names once read, so it takes only these
 *  (never an archived medium's id). */
export const STAGED_MEDIA_ID = /^stg_[0-9a-z]{21}$/;

export function newStagedMediaId(): string {
  return newId('stg');
}
