// `make run`: the embedded server. Prints where it listens and, on first start, the admin key.
import { STOP_TIMEOUT_MS, checkTelemetryEnv, embeddedDatabaseIsNew, loadConfig, readEnvironment, runService, startTelemetry, withChosenPort, type StopService } from '@switchboard/core';
import { startEmbeddedServer, type EmbeddedServer } from './embedded.ts';

async function start(): Promise<StopService> {
  const environment = readEnvironment({ config: () => loadConfig(), telemetry: () => checkTelemetryEnv() });
  const config = await withChosenPort(environment.config);
  console.log(`Switchboard: starting (data in ${config.dataDir}, driver ${config.networkDriver}, ${config.databaseUrl ? 'PostgreSQL' : 'embedded PGlite'}, ${config.natsUrl ? 'NATS' : 'in-process bus'})…`);
  if (!config.databaseUrl && embeddedDatabaseIsNew(config.dataDir)) {
    console.log(`Switchboard: first start: creating the database in ${config.dataDir}/pgdata (seconds; up to a minute on a busy machine)…`);
  }
  const telemetry = await startTelemetry({ serviceName: 'switchboard' });
  let started: EmbeddedServer | undefined;
  const server = (started = await startEmbeddedServer(config, {
    onLockTaken: (err) => {
      console.error(`Switchboard: ${err.message}; stopping`);
      setTimeout(() => process.exit(1), STOP_TIMEOUT_MS).unref();
      void (started?.stop() ?? Promise.resolve()).finally(() => process.exit(1));
    },
  }));
  console.log(`Switchboard: listening on ${config.publicBaseUrl} (bound to ${config.host}:${server.port})`);
  console.log(`Switchboard: API description at ${config.publicBaseUrl}/openapi.json, dashboard at ${config.publicBaseUrl}/ui`);
  if (server.adminKeyGenerated) {
    console.log(`Switchboard: administrative key (shown once, saved in ${config.dataDir}/admin-key): ${server.adminKey}`);
    server.platform.adminKeyShown();
  } else if (!config.adminApiKey) {
    console.log(`Switchboard: administrative key is in ${config.dataDir}/admin-key`);
  }
  async function stop() {
    console.log(config.shutdownDelayMs ? `Switchboard: stopping (serving ${config.shutdownDelayMs} ms more while the load balancer lets go)…` : 'Switchboard: stopping… (Ctrl-C again exits at once, as a kill would)');
    await server.stop();
    await telemetry.shutdown();
  }
  return Object.assign(stop, { timeoutMs: STOP_TIMEOUT_MS + config.shutdownDelayMs });
}

runService('Switchboard', start);
