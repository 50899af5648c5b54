// The WhatsApp driver (Baileys 7). Other modules use createBaileysDriver; the rest is internal.
import type { DriverFactory } from '@switchboard/core';
import { BaileysDriver, type BaileysDriverOptions } from './driver.ts';
import { webVersionSource } from './web-version.ts';

export type { BaileysDriverOptions } from './driver.ts';
export type { BaileysSocket, SocketFactory } from './socket.ts';
export { bufferJsonCodec } from './auth-state.ts';

/** A DriverFactory for the real network; `opts.socketFactory` defaults to makeWASocket. Drivers
 *  of the real socket share one source of the WhatsApp Web version (one read for all sessions of
 *  a process); a stand-in socket is given none unless a test passes one. */
export function createBaileysDriver(opts: BaileysDriverOptions): DriverFactory {
  const shared = { ...opts, webVersion: opts.webVersion ?? (opts.socketFactory ? undefined : webVersionSource()) };
  return (ctx) => new BaileysDriver(ctx, shared);
}
