// Database rows → API records (DESIGN §5 "Records"). One function per record shape.
import QRCode from 'qrcode';
import { defaultSettings, WEBHOOK_DESTINATIONS, type InstanceSettings } from '@switchboard/core';

const iso = (v: Date | string | null | undefined): string | null => (v ? new Date(v).toISOString() : null);
const json = <T>(v: unknown): T => (typeof v === 'string' ? JSON.parse(v) : v) as T;

export function projectRecord(row: any) {
  return { id: row.id, name: row.name, createdAt: iso(row.created_at), updatedAt: iso(row.updated_at) };
}

const DEFAULT_SETTINGS: Readonly<InstanceSettings> = Object.freeze(defaultSettings());

export function settingsOf(row: any): InstanceSettings {
  return { ...DEFAULT_SETTINGS, ...json<Partial<InstanceSettings>>(row.settings ?? {}) };
}

export function webhookOf(row: any): Record<string, string> {
  const saved = json<Record<string, string>>(row.webhook ?? {});
  const config: Record<string, string> = {};
  for (const d of WEBHOOK_DESTINATIONS) config[d] = saved[d] ?? '';
  config.format = 'native';
  return config;
}

// Rendering a QR PNG costs a few milliseconds; the same code is shown many times while polled.
const qrImages = new Map<string, string>();
async function qrImage(qr: string): Promise<string> {
  let image = qrImages.get(qr);
  if (!image) {
    image = await QRCode.toDataURL(qr, { errorCorrectionLevel: 'L', margin: 2, width: 264 });
    if (qrImages.size > 256) qrImages.clear();
    qrImages.set(qr, image);
  }
  return image;
}

export async function instanceRecord(row: any) {
  const qrCode = row.state === 'awaiting_scan' && row.qr_code ? row.qr_code : null;
  return {
    id: row.id,
    name: row.name,
    projectId: row.project_id ?? null,
    state: row.state,
    connected: row.state === 'connected',
    qrCode,
    qrImage: qrCode ? await qrImage(qrCode) : null,
    phone: row.phone ?? null,
    paused: Boolean(row.paused),
    settings: settingsOf(row),
    // The configuration as the webhook save returned it, without the secret (DESIGN §5).
    webhook: { ...webhookOf(row), settings: settingsOf(row) },
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
  };
}

export function appRecord(row: any) {
  return { appId: row.id, name: row.name, projectId: row.project_id ?? null, keyPrefix: row.key_prefix, createdAt: iso(row.created_at) };
}

export function sendItemRecord(row: any) {
  return {
    id: row.id,
    messengerId: row.messenger_id,
    phone: row.phone,
    type: row.type,
    status: row.status,
    createdAt: iso(row.created_at),
    updatedAt: iso(row.updated_at),
    error: row.error ? json<{ code: string; message: string }>(row.error) : null,
  };
}

/** `row.media_kept`: whether its file is still kept (retention removes it). */
export function incomingRecord(row: any, mediaUrl: (mediaId: string) => string) {
  const media = row.media ? json<Record<string, unknown>>(row.media) : null;
  return {
    id: row.id,
    messageId: row.message_id,
    from: row.from ?? null,
    phone: row.phone ?? null,
    chatLid: row.chat_lid ?? null,
    participant: row.participant ?? null,
    fromMe: Boolean(row.from_me),
    fromApi: Boolean(row.from_api),
    name: row.name ?? null,
    type: row.type,
    text: row.text ?? null,
    media: media ? withFreshLink(media, Boolean(row.media_kept), mediaUrl) : null,
    createdAt: iso(row.created_at),
  };
}

/** Stored media references carry a mediaId; links are signed at read time so they are fresh. */
function withFreshLink(media: Record<string, unknown>, kept: boolean, mediaUrl: (mediaId: string) => string) {
  const { mediaId, ...rest } = media as { mediaId?: string } & Record<string, unknown>;
  if (!mediaId || rest.downloadAvailable === false) return { ...rest, url: null };
  if (!kept) return { ...rest, url: null, downloadAvailable: false, error: 'media_expired: the file is no longer kept (media retention)' };
  return { ...rest, url: mediaUrl(mediaId) };
}
