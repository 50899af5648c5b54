// Validation of the sandbox control bodies (DESIGN §6) and their translation into what a real
// network would deliver. Bad input becomes a 400 Problem naming the field.
import { randomBytes } from 'node:crypto';
import { SANDBOX_BASE64, STAGED_MEDIA_FIELD, STAGED_MEDIA_ID, problems, type FieldProblem, type InboundMessage, type MediaStore, type MessageType, type PresenceUpdate } from '@switchboard/core';

const PHONE = /^\d{8,15}$/;
const GROUP = /^\d+(-\d+)?@g\.us$/;
const LID = /^\d+@lid$/;
const TYPES: MessageType[] = ['text', 'image', 'audio', 'video', 'document', 'sticker'];
const PRESENCES = ['available', 'unavailable', 'composing', 'recording', 'paused'];
const DEFAULT_MIMETYPES: Record<Exclude<MessageType, 'text'>, string> = {
  image: 'image/jpeg',
  audio: 'audio/ogg; codecs=opus',
  video: 'video/mp4',
  document: 'application/pdf',
  sticker: 'image/webp',
};
const MAX_TEXT = 16_000;
const MAX_MEDIA_BYTES = 32 * 1024 * 1024;

class BodyReader {
  readonly errors: FieldProblem[] = [];
  constructor(private readonly body: Record<string, unknown>) {}

  string(name: string, opts: { required?: boolean; pattern?: RegExp; max?: number; oneOf?: string[] } = {}): string | undefined {
    const v = this.body[name];
    if (v === undefined || v === null) {
      if (opts.required) this.errors.push({ path: name, message: 'is required' });
      return undefined;
    }
    if (typeof v !== 'string') return this.fail(name, 'must be a string');
    if (opts.pattern && !opts.pattern.test(v)) return this.fail(name, `must match ${opts.pattern}`);
    if (opts.max !== undefined && v.length > opts.max) return this.fail(name, `must be at most ${opts.max} characters`);
    if (opts.oneOf && !opts.oneOf.includes(v)) return this.fail(name, `must be one of ${opts.oneOf.join(', ')}`);
    return v;
  }

  bool(name: string): boolean {
    const v = this.body[name];
    if (v === undefined || v === null) return false;
    if (typeof v !== 'boolean') return this.fail(name, 'must be a boolean') ?? false;
    return v;
  }

  number(name: string): number | undefined {
    const v = this.body[name];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) return this.fail(name, 'must be a non-negative number');
    return v;
  }

  fail(path: string, message: string): undefined {
    this.errors.push({ path, message });
    return undefined;
  }

  check(): void {
    if (this.errors.length) throw problems.validation(this.errors);
  }
}

function body(raw: unknown): Record<string, unknown> {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw problems.badRequest('invalid_body', 'The body must be a JSON object.');
  return raw as Record<string, unknown>;
}

export function readScan(raw: unknown): { phone: string } {
  const r = new BodyReader(body(raw));
  const phone = r.string('phone', { required: true, pattern: PHONE });
  r.check();
  return { phone: phone! };
}

export function readPair(raw: unknown): { code: string } {
  const r = new BodyReader(body(raw));
  const code = r.string('code', { required: true, max: 16 });
  r.check();
  return { code: code! };
}

export function readDrop(raw: unknown): { reason: 'connection_lost' | 'logged_out' } {
  const r = new BodyReader(body(raw));
  const reason = r.string('reason', { required: true, oneOf: ['connection_lost', 'logged_out'] });
  r.check();
  return { reason: reason as 'connection_lost' | 'logged_out' };
}

export function readPresence(raw: unknown): PresenceUpdate {
  const r = new BodyReader(body(raw));
  const from = r.string('from', { required: true, pattern: PHONE });
  const presence = r.string('presence', { required: true, oneOf: PRESENCES });
  const lid = r.string('lid', { pattern: LID });
  r.check();
  return { phone: from!, chatLid: lid ?? null, presence: presence! };
}

/** A network message id as other clients generate them (not our 3EB0 form). */
export function foreignMessageId(): string {
  return `3A${randomBytes(9).toString('hex').toUpperCase()}`;
}

export interface SandboxInbound {
  message: InboundMessage;
  /** The id of the file the gateway staged in the media store (core's staged-media.ts), to be
   *  deleted once the message is recorded. */
  stagedMediaId?: string;
}

/** `inbound` body → the normalised message the network would deliver. Its file comes inside the
 *  body (`mediaBase64`) or, staged by the gateway, from `staged`. */
export function readInbound(raw: unknown, staged?: MediaStore): SandboxInbound {
  const r = new BodyReader(body(raw));
  const from = r.string('from', { required: true, pattern: PHONE });
  const type = r.string('type', { required: true, oneOf: TYPES }) as MessageType | undefined;
  const text = r.string('text', { max: MAX_TEXT });
  const caption = r.string('caption', { max: MAX_TEXT });
  const group = r.string('group', { pattern: GROUP });
  const lid = r.string('lid', { pattern: LID });
  const name = r.string('name', { max: 256 });
  const fromMe = r.bool('fromMe');
  const mediaBase64 = r.string('mediaBase64');
  const mimetype = r.string('mimetype', { max: 128 });
  const fileName = r.string('fileName', { max: 256 });
  const mediaUnavailable = r.bool('mediaUnavailable');
  const viewOnce = r.bool('viewOnce');
  const voiceNote = r.bool('voiceNote') || r.bool('ptt');
  const seconds = r.number('seconds');
  const stagedMediaId = staged ? r.string(STAGED_MEDIA_FIELD, { pattern: STAGED_MEDIA_ID }) : undefined;
  if (type === 'text' && text === undefined) r.fail('text', 'is required for type text');
  let mediaBytes: Uint8Array | undefined;
  if (type && type !== 'text' && !mediaUnavailable && stagedMediaId === undefined) {
    if (mediaBase64 === undefined) r.fail('mediaBase64', 'is required for media types (or set mediaUnavailable)');
    else if (!SANDBOX_BASE64.test(mediaBase64)) r.fail('mediaBase64', 'must be base64 without a data: prefix');
    else {
      mediaBytes = Buffer.from(mediaBase64, 'base64');
      if (mediaBytes.length > MAX_MEDIA_BYTES) r.fail('mediaBase64', 'must be at most 32 MiB once decoded');
    }
  }
  r.check();

  const senderJid = `${from}@s.whatsapp.net`;
  const message: InboundMessage = {
    messageId: foreignMessageId(),
    from: group ?? lid ?? senderJid,
    phone: from!,
    chatLid: lid ?? null,
    participant: group ? (lid ?? senderJid) : null,
    fromMe,
    name: name ?? null,
    type: type!,
    text: type === 'text' ? text! : (caption ?? null),
    isGroup: group !== undefined,
  };
  if (type !== 'text') {
    const bytes = mediaBytes;
    const stagedFile = stagedMediaId !== undefined && !mediaUnavailable ? stagedMediaId : undefined;
    message.media = {
      mimetype: mimetype ?? DEFAULT_MIMETYPES[type as Exclude<MessageType, 'text'>],
      fileName,
      seconds,
      voiceNote: type === 'audio' && voiceNote,
      viewOnce,
      download: async () => {
        if (stagedFile !== undefined) return staged!.get(stagedFile);
        if (!bytes) throw new Error('the network no longer has this media');
        return bytes;
      },
    };
  }
  return { message, stagedMediaId };
}
