// NETWORK_DRIVER → DriverFactory. The Baileys driver is loaded lazily so sandbox deployments and
// tests never load the WhatsApp library.
import type { Config, Db, DriverContext, DriverFactory, NetworkDriver } from '@switchboard/core';
import { sandboxDriverFactory } from './sandbox/driver.ts';

export interface DriverDeps {
  db: Db;
}

/** Resolves the factory once at start, so a missing driver fails the process at start. */
export async function driverFactoryFor(config: Pick<Config, 'networkDriver' | 'sandboxReceiptDelayMs'>, deps: DriverDeps): Promise<DriverFactory> {
  if (config.networkDriver === 'sandbox') return sandboxDriverFactory({ db: deps.db, receiptDelayMs: config.sandboxReceiptDelayMs });
  const path = './drivers/baileys/index.ts';
  let mod: Record<string, unknown>;
  try {
    mod = (await import(path)) as Record<string, unknown>;
  } catch (err) {
    throw new Error(`NETWORK_DRIVER: the baileys driver could not be loaded (${err instanceof Error ? err.message : String(err)})`);
  }
  const factory = (mod.baileysDriverFactory ?? mod.createBaileysDriverFactory ?? mod.default) as
    | ((deps: DriverDeps) => DriverFactory | ((ctx: DriverContext) => NetworkDriver))
    | undefined;
  if (typeof factory !== 'function') throw new Error('NETWORK_DRIVER: drivers/baileys/index.ts exports no baileysDriverFactory');
  return factory(deps) as DriverFactory;
}
