// A received WAMessage → our InboundMessage. Wrappers (ephemeral, view-once, document with caption,
// edits, album pictures) are unwrapped, and places and contact cards become words and a file.
// Addressing follows Baileys 7's LID model: `remoteJid`/`participant` are the addressing JIDs and
// `remoteJidAlt`/`participantAlt` the other form, so the phone is taken from whichever side is a
// phone-number JID, and stays null when only a LID is known.
import { proto, type WAMessage } from '@whiskeysockets/baileys';
import type { InboundMedia, InboundMessage, MessageType } from '@switchboard/core';
import { isGroupJid, lidSide, normalised, phoneOf, pnSide } from './jids.ts';

export interface Unwrapped {
  content: proto.IMessage | undefined;
  viewOnce: boolean;
}

/** Peels the wrappers off a message, remembering whether it was single-view. */
export function unwrap(message: proto.IMessage | null | undefined): Unwrapped {
  let content = message ?? undefined;
  let viewOnce = false;
  for (let depth = 0; depth < 6 && content; depth++) {
    const editedProtocol =
      content.protocolMessage?.type === proto.Message.ProtocolMessage.Type.MESSAGE_EDIT ? content.protocolMessage.editedMessage : undefined;
    const once = content.viewOnceMessage ?? content.viewOnceMessageV2 ?? content.viewOnceMessageV2Extension;
    // The wrappers Baileys' normalizeMessageContent peels, among them each picture of an album
    // (associatedChildMessage) and a status posted to a group.
    const inner =
      once ??
      content.ephemeralMessage ??
      content.documentWithCaptionMessage ??
      content.editedMessage ??
      content.associatedChildMessage ??
      content.groupStatusMessage ??
      content.groupStatusMessageV2;
    if (once) viewOnce = true;
    if (inner?.message) content = inner.message;
    else if (editedProtocol) content = editedProtocol;
    else break;
  }
  // A business message's view-once wrapper is its envelope (senders wrap buttons in one), not a
  // single-view file: its file is kept.
  const business = content && businessContent(content);
  return business ? { content: business, viewOnce: false } : { content, viewOnce };
}

/** What a business message shows besides its buttons; its words or its one file. */
interface BusinessParts {
  text?: string | null;
  imageMessage?: proto.Message.IImageMessage | null;
  videoMessage?: proto.Message.IVideoMessage | null;
  documentMessage?: proto.Message.IDocumentMessage | null;
}

/**
 * Business messages (button messages, templates such as one-time codes and notices, interactive
 * messages) carry a text or a file inside: that, as the plain message it would be without
 * buttons, or undefined for any other content. A file without a caption takes the words as one.
 */
function businessContent(content: proto.IMessage): proto.IMessage | undefined {
  const template = content.templateMessage;
  const interactive = content.interactiveMessage ?? template?.interactiveMessageTemplate;
  const buttons = content.buttonsMessage;
  const hydrated = template?.hydratedTemplate ?? template?.hydratedFourRowTemplate;
  let parts: BusinessParts | undefined;
  if (buttons) parts = { ...buttons, text: buttons.contentText || buttons.text };
  else if (hydrated) parts = { ...hydrated, text: hydrated.hydratedContentText };
  else if (interactive) parts = { ...interactive.header, text: interactive.body?.text };
  if (!parts) return undefined;
  const words = parts.text || null;
  if (parts.imageMessage) return { imageMessage: { ...parts.imageMessage, caption: parts.imageMessage.caption || words } };
  if (parts.videoMessage) return { videoMessage: { ...parts.videoMessage, caption: parts.videoMessage.caption || words } };
  if (parts.documentMessage) return { documentMessage: { ...parts.documentMessage, caption: parts.documentMessage.caption || words } };
  return words === null ? undefined : { conversation: words };
}

type MediaProto =
  | proto.Message.IImageMessage
  | proto.Message.IVideoMessage
  | proto.Message.IAudioMessage
  | proto.Message.IDocumentMessage
  | proto.Message.IStickerMessage;

interface Classified {
  type: MessageType;
  text: string | null;
  media?: MediaProto;
  /** A file the message carries itself (contact cards), not one to download. */
  file?: { bytes: Uint8Array; mimetype: string; fileName: string };
}

/** The message type and text of unwrapped content; null for kinds we do not relay (reactions, polls…).
 *  Places and contact cards, which the API has no type for, are what they show: words, a file. */
export function classify(content: proto.IMessage | undefined): Classified | null {
  if (!content) return null;
  if (typeof content.conversation === 'string') return { type: 'text', text: content.conversation };
  if (typeof content.extendedTextMessage?.text === 'string') return { type: 'text', text: content.extendedTextMessage.text };
  if (content.imageMessage) return { type: 'image', text: content.imageMessage.caption ?? null, media: content.imageMessage };
  if (content.videoMessage) return { type: 'video', text: content.videoMessage.caption ?? null, media: content.videoMessage };
  if (content.ptvMessage) return { type: 'video', text: null, media: content.ptvMessage };
  if (content.audioMessage) return { type: 'audio', text: null, media: content.audioMessage };
  if (content.documentMessage) return { type: 'document', text: content.documentMessage.caption ?? null, media: content.documentMessage };
  if (content.stickerMessage) return { type: 'sticker', text: null, media: content.stickerMessage };
  const place = placeText(content);
  if (place) return { type: 'text', text: place };
  const cards = contactCards(content);
  if (cards) return { type: 'document', text: null, file: cards };
  return null;
}

/** A shared place (also a live one) as words: its name, address and comment when given, then a
 *  geo: URI (RFC 5870), which maps apps open and programs parse; none for coordinates that are
 *  no place on Earth. */
function placeText(content: proto.IMessage): string | null {
  const place = content.locationMessage ?? content.liveLocationMessage;
  const lat = geoCoordinate(place?.degreesLatitude, 90);
  const lng = geoCoordinate(place?.degreesLongitude, 180);
  if (lat === null || lng === null) return null;
  const location = content.locationMessage;
  const words = [location?.name, location?.address, location?.comment, content.liveLocationMessage?.caption];
  return [...words.filter((w): w is string => !!w?.trim()), `geo:${lat},${lng}`].join('\n');
}

/** A coordinate as RFC 5870 writes it: plain decimals (no exponent), at most 7 places (about a centimetre). */
function geoCoordinate(value: number | null | undefined, limit: number): string | null {
  if (typeof value !== 'number' || !Number.isFinite(value) || Math.abs(value) > limit) return null;
  const fixed = value.toFixed(7).replace(/\.?0+$/, '');
  return fixed === '-0' ? '0' : fixed;
}

/** Shared contacts as the vCard file they are (one card, or several in one file), named after
 *  the contact shown. */
function contactCards(content: proto.IMessage): Classified['file'] | null {
  const one = content.contactMessage;
  const cards = (one ? [one] : (content.contactsArrayMessage?.contacts ?? [])).filter((c) => c.vcard?.trim());
  if (!cards.length) return null;
  const shown = (one ? one.displayName : content.contactsArrayMessage?.displayName) || cards[0].displayName || 'contact';
  const fileName = `${shown.trim().slice(0, 100) || 'contact'}.vcf`;
  return { bytes: Buffer.from(cards.map((c) => c.vcard!.trim()).join('\r\n') + '\r\n'), mimetype: 'text/vcard', fileName };
}

export interface NormaliseDeps {
  /** Our own account (for own group messages that carry no participant). */
  me(): { phone: string | null; lid: string | null };
  isOwnSend(messengerId: string): Promise<boolean>;
  /** Fetches the media of a (possibly unwrapped) message. */
  download(message: WAMessage): Promise<Uint8Array>;
}

function isOwnJid(jid: string | null | undefined, me: { phone: string | null; lid: string | null }): boolean {
  if (!jid) return false;
  const phone = phoneOf(jid);
  return (phone !== null && phone === me.phone) || (me.lid !== null && normalised(jid) === me.lid);
}

/** Normalises one message; null when it is not something we relay (no content, stub, status…). */
export async function normaliseMessage(msg: WAMessage, deps: NormaliseDeps): Promise<InboundMessage | null> {
  const key = msg.key;
  if (!key?.id || !key.remoteJid) return null;
  const { content, viewOnce } = unwrap(msg.message);
  const kind = classify(content);
  if (!kind) return null;

  const fromMe = !!key.fromMe;
  const isGroup = isGroupJid(key.remoteJid);
  const me = deps.me();
  // Baileys takes a private chat's alternative address from the sender's side of the stanza
  // first, which for a message sent from our own phone may be our own number: not the chat's,
  // unless the chat is our own (notes to self).
  const chatAlt = fromMe && isOwnJid(key.remoteJidAlt, me) && !isOwnJid(key.remoteJid, me) ? undefined : key.remoteJidAlt;
  const address = isGroup ? addressOfGroupSender(msg) : { phone: pnSide(key.remoteJid, chatAlt), lid: lidSide(key.remoteJid, chatAlt) };
  const phone = address.phone ?? (isGroup && fromMe ? me.phone : null);

  const out: InboundMessage = {
    messageId: key.id,
    from: normalised(key.remoteJid),
    phone,
    chatLid: address.lid ?? (isGroup && fromMe ? me.lid : null),
    participant: isGroup ? normalised(key.participant ?? msg.participant) : null,
    fromMe,
    fromApi: fromMe ? await deps.isOwnSend(key.id) : false,
    name: msg.pushName ?? null,
    type: kind.type,
    text: kind.text,
    isGroup,
  };
  if (kind.media) out.media = describeMedia(kind, viewOnce, { ...msg, message: content }, deps);
  if (kind.file) out.media = { mimetype: kind.file.mimetype, fileName: kind.file.fileName, download: async () => kind.file!.bytes };
  return out;
}

function addressOfGroupSender(msg: WAMessage): { phone: string | null; lid: string | null } {
  const participant = msg.key.participant ?? msg.participant;
  return { phone: pnSide(participant, msg.key.participantAlt), lid: lidSide(participant, msg.key.participantAlt) };
}

function describeMedia(kind: Classified, viewOnce: boolean, unwrapped: WAMessage, deps: NormaliseDeps): InboundMedia {
  const media = kind.media!;
  const audio = kind.type === 'audio' ? (media as proto.Message.IAudioMessage) : undefined;
  const seconds = (media as proto.Message.IAudioMessage | proto.Message.IVideoMessage).seconds;
  const fileName = kind.type === 'document' ? (media as proto.Message.IDocumentMessage).fileName : undefined;
  return {
    mimetype: media.mimetype ?? defaultMimetype(kind.type),
    ...(fileName ? { fileName } : {}),
    ...(typeof seconds === 'number' ? { seconds } : {}),
    ...(audio ? { voiceNote: !!audio.ptt } : {}),
    viewOnce: viewOnce || !!(media as proto.Message.IImageMessage).viewOnce,
    download: () => deps.download(unwrapped),
  };
}

function defaultMimetype(type: MessageType): string {
  switch (type) {
    case 'image':
      return 'image/jpeg';
    case 'video':
      return 'video/mp4';
    case 'audio':
      return 'audio/ogg; codecs=opus';
    case 'sticker':
      return 'image/webp';
    default:
      return 'application/octet-stream';
  }
}
