// The embedded deployment: gateway, local session runtime, dispatcher and background jobs in one
// process (DESIGN §1). With DATABASE_URL/NATS_URL set it uses them; otherwise PGlite and the
// in-process bus in DATA_DIR.
import { OutboxRelay, createMetrics, isEmbedded, loadConfig, openPlatform, startMediaRetention, startEventRetention, startMessageRetention, withChosenPort, type Config, type Db, type Logger, type Platform } from '@switchboard/core';
import { InstanceTokenLookup, SendItemWriter, createGatewayApp, listen } from '@switchboard/gateway';
import { LocalSessionRuntime, driverFactoryFor, mediaArchive, expirySweepIntervalMs, requeueQueuedCommands, startExpirySweeper } from '@switchboard/session';
import { startDispatcher } from '@switchboard/dispatcher';
import { startDatabaseVacuum } from './database-vacuum.ts';
import { holdServerLock } from './server-lock.ts';

export interface EmbeddedServer {
  url: string;
  port: number;
  adminKey: string;
  adminKeyGenerated: boolean;
  platform: Platform;
  runtime: LocalSessionRuntime;
  relay: OutboxRelay;
  stop(): Promise<void>;
}

export interface EmbeddedServerOptions {
  log?: Logger;
  /** Another server took this one's database while it was away (see server-lock.ts): stop. */
  onLockTaken?: (err: Error) => void;
}

export async function startEmbeddedServer(configured: Config = loadConfig(), opts: EmbeddedServerOptions = {}): Promise<EmbeddedServer> {
  const config = await withChosenPort(configured);
  // On PostgreSQL a server without NATS must be the only one there (server-lock.ts); it stops if
  // another one took the lock while the database was away. PGlite has the DATA_DIR lock.
  const claimDatabase = config.databaseUrl
    ? (db: Db, log: Logger) => holdServerLock(db, config.natsUrl ? 'shared' : 'sole', { onTaken: opts.onLockTaken ?? ((err) => log.error(err.message)) })
    : undefined;
  const platform = await openPlatform(config, { service: 'switchboard', generateMissingKeys: true, migrate: true, claimDatabase, log: opts.log });
  const { db, bus, media, crypto, log } = platform;
  const relay = new OutboxRelay(db, bus, log);
  // The in-process bus starts empty: the commands of sends queued before the restart go first, in
  // the order they were accepted, so a send never overtakes an older one of its instance.
  if (!config.natsUrl) await requeueQueuedCommands(db, { replaceOutboxCommands: true });
  relay.start();
  const archive = mediaArchive({ db, store: media, crypto, publicBaseUrl: config.publicBaseUrl, linkTtlSeconds: config.mediaLinkTtlSeconds });
  const driverFactory = await driverFactoryFor(config, { db, log, media });
  const runtime = new LocalSessionRuntime({ db, bus, relay, crypto, media: archive, driverFactory, log });
  const metrics = createMetrics({ db, bus }); // one registry for the whole process, served at /metrics
  // One process owns a PGlite data dir, so the leases a restart finds there are its predecessor's.
  const dispatcher = await startDispatcher({ db, bus, crypto, config, log, metrics, leaseOwner: isEmbedded(db) ? 'embedded' : undefined });
  const sweeper = startExpirySweeper({ db, relay, log, intervalMs: expirySweepIntervalMs(config.sendExpiryMs) });
  const retention = startMediaRetention({ db, store: media, maxAgeMs: config.mediaRetentionMs, log });
  const eventRetention = startEventRetention({ db, maxAgeMs: config.eventRetentionMs, log });
  const messageRetention = startMessageRetention({ db, maxAgeMs: config.messageRetentionMs, log });
  const vacuum = isEmbedded(db) ? startDatabaseVacuum({ db, log }) : undefined;
  const stopState = { stopping: false };
  const app = createGatewayApp({ config, db, crypto, bus, relay, runtime, media, log, adminKey: platform.adminKey, startedAt: new Date(), metrics, sendItems: new SendItemWriter(db), instanceTokens: new InstanceTokenLookup(db), stopState });
  await runtime.recordRestart();
  const http = await listen(app, config.port, config.host, stopState);
  await runtime.resumeAll();

  const url = `http://${config.host === '0.0.0.0' ? '127.0.0.1' : config.host}:${http.port}`;
  return {
    url,
    port: http.port,
    adminKey: platform.adminKey,
    adminKeyGenerated: platform.adminKeyGenerated,
    platform,
    runtime,
    relay,
    async stop() {
      await http.close({ drainMs: config.shutdownDelayMs });
      await sweeper.stop();
      await Promise.all([retention.stop(), eventRetention.stop(), messageRetention.stop(), vacuum?.stop()]);
      await runtime.close();
      await dispatcher.stop();
      await relay.stop();
      await platform.close();
    },
  };
}
