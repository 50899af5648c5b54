// The WhatsApp driver (Baileys 7). Other modules use createBaileysDriver; the rest is internal.
import type { DriverFactory } from '@switchboard/core';
import { BaileysDriver, type BaileysDriverOptions } from './driver.ts';

export type { BaileysDriverOptions } from './driver.ts';
export type { BaileysSocket, SocketFactory } from './socket.ts';
export { bufferJsonCodec } from './auth-state.ts';

/** A DriverFactory for the real network; `opts.socketFactory` defaults to makeWASocket. */
export function createBaileysDriver(opts: BaileysDriverOptions): DriverFactory {
  return (ctx) => new BaileysDriver(ctx, opts);
}
