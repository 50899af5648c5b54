// NETWORK_DRIVER → DriverFactory. The Baileys driver is loaded lazily so sandbox deployments and
// tests never load the WhatsApp library.
import type { Config, Db, DriverFactory, Logger, MediaStore } from '@switchboard/core';
import { sandboxDriverFactory } from './sandbox/driver.ts';

export interface DriverDeps {
  db: Db;
  /** The process's logger: the driver logs under it, at its level. */
  log: Logger;
  /** The process's media store: the sandbox reads the inbound files the gateway staged there. */
  media?: MediaStore;
}

/** Resolves the factory once at start, so a missing driver fails the process at start. */
export async function driverFactoryFor(
  config: Pick<Config, 'networkDriver' | 'sandboxReceiptDelayMs'> & Partial<Pick<Config, 'pairingTimeoutMs'>>,
  deps: DriverDeps,
): Promise<DriverFactory> {
  const { pairingTimeoutMs } = config;
  if (config.networkDriver === 'sandbox') return sandboxDriverFactory({ db: deps.db, receiptDelayMs: config.sandboxReceiptDelayMs, stagedMedia: deps.media, pairingTimeoutMs });
  let baileys: typeof import('./drivers/baileys/index.ts');
  try {
    baileys = await import('./drivers/baileys/index.ts');
  } catch (err) {
    throw new Error(`NETWORK_DRIVER: the baileys driver could not be loaded (${err instanceof Error ? err.message : String(err)})`);
  }
  return baileys.createBaileysDriver({ db: deps.db, log: deps.log, pairingTimeoutMs });
}
