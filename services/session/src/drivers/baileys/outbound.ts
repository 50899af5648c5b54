// An OutboundMessage → Baileys message content. Media arrives already validated and, for voice
// notes, already converted to Ogg Opus by the gateway.
import type { AnyMessageContent } from '@whiskeysockets/baileys';
import { SendError, type OutboundMessage } from '@switchboard/core';

export const VOICE_NOTE_MIMETYPE = 'audio/ogg; codecs=opus';

export function messageContent(msg: OutboundMessage): AnyMessageContent {
  if (msg.type === 'text') {
    if (typeof msg.text !== 'string' || !msg.text) throw new SendError('invalid_message', 'text message without text', true);
    return { text: msg.text };
  }
  if (!msg.media || !msg.media.length) throw new SendError('invalid_message', `${msg.type} message without media`, true);
  const media = Buffer.from(msg.media.buffer, msg.media.byteOffset, msg.media.byteLength);
  const caption = msg.caption || undefined;
  switch (msg.type) {
    case 'image':
      return { image: media, caption, mimetype: msg.mimetype };
    case 'video':
      return { video: media, caption, mimetype: msg.mimetype, seconds: msg.seconds };
    case 'audio':
      // Baileys copies the content's fields into the audioMessage, waveform included (its type
      // does not name it); without one it would need a decoder it does not ship to draw any.
      return msg.ptt
        ? ({ audio: media, ptt: true, mimetype: VOICE_NOTE_MIMETYPE, seconds: msg.seconds, ...(msg.waveform && { waveform: msg.waveform }) } as AnyMessageContent)
        : { audio: media, mimetype: msg.mimetype, seconds: msg.seconds };
    case 'document':
      return { document: media, mimetype: msg.mimetype ?? 'application/octet-stream', fileName: msg.fileName ?? 'file', caption };
    case 'sticker':
      return { sticker: media, mimetype: 'image/webp', isAnimated: isAnimatedWebp(media) };
  }
}

/** A WebP whose extended header (VP8X) flags an animation: WhatsApp plays a sticker only when the
 *  message says it is animated, and shows its first frame otherwise. */
export function isAnimatedWebp(file: Uint8Array): boolean {
  const ascii = (from: number, to: number) => String.fromCharCode(...file.subarray(from, to));
  return file.length > 20 && ascii(0, 4) === 'RIFF' && ascii(8, 12) === 'WEBP' && ascii(12, 16) === 'VP8X' && (file[20] & 0x02) !== 0;
}
