// The NetworkDriver port: one network session of one instance. Drivers: `sandbox` (simulated
// network, DESIGN §6) and `baileys` (WhatsApp). The session worker owns exactly one driver and
// turns what the driver reports into records and events; drivers never touch the database
// except through the AuthStore they are given.

export type ConnectionState = 'stopped' | 'starting' | 'awaiting_scan' | 'connected' | 'reconnecting' | 'logged_out';

export type MessageType = 'text' | 'image' | 'audio' | 'video' | 'document' | 'sticker';

export type DeliveryStatus = 'pending' | 'sent' | 'delivered' | 'read' | 'played' | 'failed';

/** A send as the driver sees it: content already validated, media already decoded. */
export interface OutboundMessage {
  messengerId: string; // reserved id; the driver must send with exactly this id
  to: Destination;
  type: MessageType;
  text?: string;
  caption?: string;
  fileName?: string;
  mimetype?: string;
  ptt?: boolean;
  /** Whole seconds of audio or video, worked out by the gateway (absent when it could not tell). */
  seconds?: number;
  /** A voice note's loudness bars (0–100), worked out by the gateway when it converted it. */
  waveform?: Uint8Array;
  media?: Uint8Array;
}

/** Where a send goes, parsed from the `phone` field. A phone number is never derived from a LID. */
export type Destination =
  | { kind: 'phone'; phone: string }
  | { kind: 'group'; groupId: string } // `<digits>` or `<digits>-<digits>` (the part before @g.us)
  | { kind: 'lid'; lid: string }; // `<digits>` (the part before @lid)

/** SendError code a driver uses when it sent nothing because it is not connected: the item is
 *  queued again and the command redelivered, instead of failing the send. */
export const NOT_CONNECTED = 'not_connected';

/** Raised by driver.send. `definite` false means the message may have left (→ uncertain). */
export class SendError extends Error {
  constructor(
    public readonly code: string,
    message: string,
    public readonly definite: boolean,
  ) {
    super(message);
    this.name = 'SendError';
  }
}

export interface InboundMedia {
  mimetype: string;
  fileName?: string;
  seconds?: number;
  voiceNote?: boolean;
  viewOnce?: boolean;
  /** Fetches the bytes; rejects when the download fails (the session applies a timeout). */
  download(): Promise<Uint8Array>;
}

/** A message received by (or sent from the phone of) the instance, normalised. */
export interface InboundMessage {
  messageId: string;
  from: string | null; // chat JID the message belongs to
  phone: string | null; // sender phone digits, only when known
  chatLid: string | null;
  participant: string | null; // group sender
  fromMe: boolean;
  /** The id is one of our API sends (drivers check it with DriverContext.isOwnSend). */
  fromApi?: boolean;
  name: string | null;
  type: MessageType;
  text: string | null;
  isGroup: boolean;
  media?: InboundMedia;
}

export interface PresenceUpdate {
  phone: string | null;
  chatLid: string | null;
  presence: string;
}

export interface Receipt {
  messengerId: string;
  status: DeliveryStatus;
}

/** What a driver reports. All callbacks may be async; the driver awaits them in order. */
export interface DriverListener {
  onState(state: ConnectionState, info: { qr?: string | null; phone?: string | null; reason?: string | null }): Promise<void>;
  onMessage(msg: InboundMessage): Promise<void>;
  onReceipt(receipt: Receipt): Promise<void>;
  onPresence(update: PresenceUpdate): Promise<void>;
  onCall?(call: { id: string; from: string }): Promise<void>;
}

/** Key/value storage of the network session's credentials, sealed at rest. */
export interface AuthStore {
  get(category: string, ids: string[]): Promise<Record<string, unknown>>;
  /** Writes one batch atomically; a null value deletes the key. */
  set(batch: Record<string, Record<string, unknown | null>>): Promise<void>;
  clear(): Promise<void>;
}

export interface DriverContext {
  instanceId: string;
  auth: AuthStore;
  listener: DriverListener;
  /** Whether a message id belongs to one of our API sends (drivers use it to flag `fromApi`). */
  isOwnSend(messengerId: string): Promise<boolean>;
  settings(): InstanceSettings;
  /** Whether this session still holds the instance's single-owner lock (checked with the lock's
   *  holder, not cached). Drivers ask it before reconnecting after another socket took over. */
  stillOwner?(): Promise<boolean>;
}

/** How long a phone pairing code works: on WhatsApp, while the socket that asked for it is still
 *  offering itself for linking (its QR references, about three minutes). */
export const PAIRING_CODE_TTL_MS = 3 * 60_000;

/** The reason of the `logged_out` a driver reports when nobody paired the instance within
 *  PAIRING_TIMEOUT_MS: it stops showing QR codes (each a WhatsApp handshake) until a connect or a
 *  pairing-code request starts pairing again. */
export const PAIRING_TIMEOUT = 'pairing_timeout';

export interface PairingCode {
  /** As typed on the phone: `ABCD-EFGH`. */
  code: string;
  expiresAt: Date;
}

export interface NetworkDriver {
  /** Opens the session: restores credentials or starts pairing (QR). Returns once started. */
  connect(): Promise<void>;
  /** Closes the socket and keeps credentials. */
  disconnect(): Promise<void>;
  /** Unlinks the device and clears credentials. */
  logout(): Promise<void>;
  /** Phone pairing: returns the code the user types on the phone, and until when it works. */
  requestPairingCode(phone: string): Promise<PairingCode>;
  /** Sends with msg.messengerId; resolves when the network accepted it. Throws SendError. */
  send(msg: OutboundMessage): Promise<void>;
  /** Sandbox only: control operations of DESIGN §6 (scan, pair, inbound, presence, drop). */
  sandbox?(op: string, body: Record<string, unknown>): Promise<Record<string, unknown>>;
}

export type DriverFactory = (ctx: DriverContext) => NetworkDriver;

export const SETTING_NAMES = [
  'ignoreDelivery',
  'ignoreReceived',
  'ignoreStatus',
  'ignorePresence',
  'ignoreConnected',
  'ignoreDisconnected',
  'notifyFromMe',
  'ignoreGroups',
  'ignorePrivate',
  'ignoreText',
  'ignoreImage',
  'ignoreVideo',
  'ignoreAudio',
  'ignoreDocument',
  'autoRejectCalls',
  'autoReadMessages',
  'autoReadStatus',
  'protectAnnouncementGroups',
  'disableOfflineQueue',
] as const;

export type SettingName = (typeof SETTING_NAMES)[number];
export type InstanceSettings = Record<SettingName, boolean>;

export function defaultSettings(): InstanceSettings {
  return Object.fromEntries(SETTING_NAMES.map((n) => [n, false])) as InstanceSettings;
}

/** Parses a validated `phone` field into a destination. */
export function parseDestination(phone: string): Destination {
  if (phone.endsWith('-group')) return { kind: 'group', groupId: phone.slice(0, -'-group'.length) };
  if (phone.endsWith('@g.us')) return { kind: 'group', groupId: phone.slice(0, -'@g.us'.length) };
  if (phone.endsWith('@lid')) return { kind: 'lid', lid: phone.slice(0, -'@lid'.length) };
  return { kind: 'phone', phone };
}
