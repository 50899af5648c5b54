// Baileys credentials and Signal keys kept in our AuthStore (the sealed `auth_state` table) instead
// of useMultiFileAuthState. Baileys values hold Buffers/Uint8Arrays, which plain JSON would turn
// into useless objects; this layer converts them with Baileys' own BufferJSON both ways, so it works
// over any AuthStore whatever codec the store itself uses.
import {
  BufferJSON,
  initAuthCreds,
  proto,
  type AuthenticationCreds,
  type SignalDataSet,
  type SignalDataTypeMap,
  type SignalKeyStore,
} from '@whiskeysockets/baileys';
import type { AuthStore } from '@switchboard/core';

/** Category and key under which the account credentials are stored. */
export const CREDS_CATEGORY = 'creds';
const CREDS_KEY = 'creds';

/**
 * BufferJSON's encoding of binary values ({type:'Buffer', data:<base64>}). Unlike
 * BufferJSON.replacer it leaves an already encoded value alone (that replacer would take the
 * base64 text for the bytes), so encoding twice is harmless.
 */
function binaryReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Uint8Array) return { type: 'Buffer', data: Buffer.from(value).toString('base64') };
  const v = value as { type?: unknown; data?: unknown } | null;
  if (v?.type === 'Buffer' && Array.isArray(v.data)) return { type: 'Buffer', data: Buffer.from(v.data as number[]).toString('base64') }; // a Buffer after its toJSON()
  return value;
}

/** BufferJSON as a codec, for a DbAuthStore that stores Baileys values directly. */
export const bufferJsonCodec = {
  encode: (value: unknown): string => JSON.stringify(value, binaryReplacer),
  decode: (text: string): unknown => JSON.parse(text, BufferJSON.reviver),
};

/** A Baileys value as plain JSON (binary values become {type:'Buffer', data:<base64>}). */
function toPlain(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value, binaryReplacer));
}

/** The reverse of toPlain; also accepts values a BufferJSON-aware store already revived. */
function fromPlain(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value, binaryReplacer), BufferJSON.reviver);
}

/**
 * The Signal key store Baileys reads and writes. Every `set` call is one AuthStore batch (one
 * database transaction). Categories and ids are written in sorted order so that concurrent
 * batches lock rows in the same order and cannot deadlock each other.
 */
export function makeSignalKeyStore(store: AuthStore): SignalKeyStore {
  return {
    async get<T extends keyof SignalDataTypeMap>(type: T, ids: string[]) {
      const found = await store.get(type, ids);
      const out: { [id: string]: SignalDataTypeMap[T] } = {};
      for (const [id, raw] of Object.entries(found)) {
        let value = fromPlain(raw);
        // Baileys expects a protobuf object here, as useMultiFileAuthState returns it.
        if (type === 'app-state-sync-key' && value) value = proto.Message.AppStateSyncKeyData.fromObject(value as object);
        out[id] = value as SignalDataTypeMap[T];
      }
      return out;
    },
    async set(data: SignalDataSet) {
      const batch: Record<string, Record<string, unknown | null>> = {};
      for (const category of Object.keys(data).sort()) {
        const entries = data[category as keyof SignalDataSet] ?? {};
        const sorted: Record<string, unknown | null> = {};
        for (const id of Object.keys(entries).sort()) {
          const value = entries[id];
          sorted[id] = value === null || value === undefined ? null : toPlain(value);
        }
        if (Object.keys(sorted).length) batch[category] = sorted;
      }
      if (Object.keys(batch).length) await store.set(batch);
    },
    async clear() {
      await store.clear();
    },
  };
}

/** Loads the stored credentials, or fresh ones (a new device that still has to be paired). */
export async function loadCreds(store: AuthStore): Promise<AuthenticationCreds> {
  const found = await store.get(CREDS_CATEGORY, [CREDS_KEY]);
  const raw = found[CREDS_KEY];
  return raw ? (fromPlain(raw) as AuthenticationCreds) : initAuthCreds();
}

export async function saveCreds(store: AuthStore, creds: AuthenticationCreds): Promise<void> {
  await store.set({ [CREDS_CATEGORY]: { [CREDS_KEY]: toPlain(creds) } });
}

/** Credentials of a completed pairing: the socket logs in with them instead of pairing. */
export function hasLinkedAccount(creds: AuthenticationCreds): boolean {
  return Boolean(creds.me && creds.account);
}

/**
 * A pairing-code request writes `me` into the credentials before the phone has confirmed anything;
 * only a completed pairing adds `account` (the signed device identity). A socket opened with such
 * half-written credentials makes Baileys log in as a device that was never linked, which the server
 * refuses (401): an instance nobody linked would end up `logged_out`. Dropping the unfinished
 * pairing lets the new socket register afresh (new QR, or a new code). Returns whether it changed.
 */
export function forgetUnfinishedPairing(creds: AuthenticationCreds): boolean {
  if (!creds.me || hasLinkedAccount(creds)) return false;
  delete creds.me;
  creds.pairingCode = undefined;
  creds.registered = false;
  return true;
}
