// Operator process: `node dist/operator.mjs` (built by scripts/build.ts). Campaigns for the Lease;
// only the leader runs the controller. Losing the lease ends the process (the Deployment starts
// a fresh one that campaigns again), so a stale leader never keeps reconciling.
import { checkEncryptionKeyAtStart, checkReadiness, checkTelemetryEnv, readEnvironment, requireSettings, runService, Crypto, createLogger, loadConfig, migrate, openDatabase, startHealthServer, startStep, startTelemetry } from '@switchboard/core';
import { InstanceStore } from './instance-store.ts';
import { Operator } from './operator.ts';
import { loadKubeConfig, loadOperatorConfig } from './operator-config.ts';

async function start(): Promise<() => Promise<void>> {
  const { config, operator, kubeConfig } = readEnvironment({
    config: () => loadConfig(),
    operator: () => loadOperatorConfig(),
    kubeConfig: () => loadKubeConfig(),
    required: () =>
      requireSettings(process.env, {
        DATABASE_URL: 'for the operator (cluster mode uses PostgreSQL)',
        ENCRYPTION_KEY: 'for the operator (instance tokens are sealed with it)',
      }),
    telemetry: () => checkTelemetryEnv(),
  });
  // Traces the operator's pg queries and Kubernetes API calls (off unless OTEL_* configures an exporter).
  const telemetry = await startTelemetry({ serviceName: 'switchboard-operator' });
  const logger = createLogger({ level: config.logLevel, name: 'operator' });
  const db = openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, poolMax: 4, applicationName: 'switchboard-operator' });
  await startStep('DATABASE_URL', 'cannot open or migrate the database', () => migrate(db));
  const crypto = new Crypto(config.encryptionKey!);
  await checkEncryptionKeyAtStart(db, crypto);
  const replica = new Operator({
    kubeConfig,
    namespace: operator.namespace,
    store: new InstanceStore(db, crypto),
    session: operator.session,
    rolloutMaxUnavailable: operator.rolloutMaxUnavailable,
    logger,
    leaseName: operator.leaseName,
    identity: operator.identity,
    onLostLeadership: () => {
      logger.warn('exiting so a fresh process campaigns again');
      process.exit(1);
    },
  });
  const health = startHealthServer(operator.healthPort, async () => {
    await checkReadiness({ database: () => db.raw('select 1') });
    return { leader: replica.isLeader };
  });
  await health.listening;
  replica.start();
  return async function stop() {
    await health.close();
    await replica.stop(); // releases the lease: a standby takes over without waiting for it to expire
    await db.destroy();
    await telemetry.shutdown();
  };
}

runService('operator', start);
