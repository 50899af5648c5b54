// The part of a Baileys socket the driver uses. makeWASocket's socket satisfies it; tests pass a
// stand-in (stand-in-socket.ts) that behaves the same way without a WhatsApp server.
import makeWASocket, {
  type BaileysEventEmitter,
  type Contact,
  type GroupMetadata,
  type MediaConnInfo,
  type MessageRelayOptions,
  type UserFacingSocketConfig,
  type WAMediaUploadFunction,
  type WAMessage,
  type WAMessageKey,
  type proto,
} from '@whiskeysockets/baileys';

export interface BaileysSocket {
  /** Also releases the events a logged-in socket holds until the offline hand-over ends. */
  ev: BaileysEventEmitter & { flush(): boolean };
  user: Contact | undefined;
  requestPairingCode(phoneNumber: string, customPairingCode?: string): Promise<string>;
  /** Unlinks this device, then closes the socket with 401. */
  logout(msg?: string): Promise<void>;
  /** Closes the socket; emits connection.update `close` with `error` as lastDisconnect. */
  end(error: Error | undefined): Promise<void>;
  /** Encrypts and sends a prepared message; resolves with the message id once it left. */
  relayMessage(jid: string, message: proto.IMessage, opts: MessageRelayOptions): Promise<string>;
  /** Uploads an encrypted media file (used while preparing media content). */
  waUploadToServer: WAMediaUploadFunction;
  /** Where to upload media (a query on the socket), kept until it expires; a failed answer is
   *  kept too, until the socket ends. */
  refreshMediaConn(forceGet?: boolean): Promise<MediaConnInfo>;
  /** Asks the sender's phone to re-upload media whose link expired; returns the refreshed message. */
  updateMediaMessage(message: WAMessage): Promise<WAMessage>;
  onWhatsApp(...phoneNumber: string[]): Promise<{ jid: string; exists: boolean }[] | undefined>;
  groupMetadata(jid: string): Promise<GroupMetadata>;
  readMessages(keys: WAMessageKey[]): Promise<void>;
  rejectCall(callId: string, callFrom: string): Promise<void>;
  /** Asks the server for a contact's presence (online, typing); none arrives without it. */
  presenceSubscribe(toJid: string): Promise<void>;
}

export type SocketFactory = (config: UserFacingSocketConfig) => BaileysSocket;

/** The real thing. */
export const realSocketFactory: SocketFactory = (config) => makeWASocket(config);
