// Outbound media checks and voice-note conversion, used by the send route at acceptance.
export { checkMimetype, assertMimetype, decodeBase64Strict, MAX_MEDIA_BYTES, type MediaMessageType } from './outbound.ts';
export { convertToVoiceNote, resolveFfmpegPath, oggOpusSeconds, type VoiceNote, type VoiceNoteOptions } from './voice-note.ts';
