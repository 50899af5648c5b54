// The dispatcher as its own process (cluster mode): PostgreSQL + NATS JetStream, any number of
// replicas. SIGTERM/SIGINT stop intake, let attempts under way finish, then exit 0.
//
// Besides the shared variables (DESIGN §4) it reads optional tuning variables, mainly for tests:
// DISPATCHER_POLL_INTERVAL_MS, DISPATCHER_LEASE_MS, DISPATCHER_ATTEMPT_TIMEOUT_MS,
// DISPATCHER_MAX_CONCURRENT, DISPATCHER_PER_DESTINATION_CONCURRENCY,
// DISPATCHER_PER_DESTINATION_MAX_CONCURRENCY, DISPATCHER_REPLICA_HEARTBEAT_MS,
// DISPATCHER_REPLICA_GONE_AFTER_MS.
import { checkEncryptionKeyAtStart, checkReadiness, checkTelemetryEnv, ConfigError, EnvReader, MAX_TIMER_MS, readEnvironment, requireSettings, runService, startStep, Crypto, createLogger, createMetrics, healthPortFrom, loadConfig, migrate, openBus, openDatabase, startHealthServer, startTelemetry } from '@switchboard/core';
import { startDispatcher, type DispatcherOptions } from './index.ts';
import { DEFAULT_SCHEDULER_OPTIONS } from './scheduler.ts';
import { livenessOptions, silenceTooShort } from './replica-liveness.ts';

const TUNING: Record<string, keyof DispatcherOptions> = {
  DISPATCHER_POLL_INTERVAL_MS: 'pollIntervalMs',
  DISPATCHER_LEASE_MS: 'leaseMs',
  DISPATCHER_ATTEMPT_TIMEOUT_MS: 'attemptTimeoutMs',
  DISPATCHER_MAX_CONCURRENT: 'maxConcurrent',
  DISPATCHER_PER_DESTINATION_CONCURRENCY: 'perDestinationConcurrency',
  DISPATCHER_PER_DESTINATION_MAX_CONCURRENCY: 'perDestinationMaxConcurrency',
  DISPATCHER_REPLICA_HEARTBEAT_MS: 'replicaHeartbeatMs',
  DISPATCHER_REPLICA_GONE_AFTER_MS: 'replicaGoneAfterMs',
};

function readTuning(env: NodeJS.ProcessEnv): DispatcherOptions {
  const problems: string[] = [];
  const read = new EnvReader(env, problems);
  const options: Record<string, number> = {};
  for (const [name, option] of Object.entries(TUNING)) {
    const value = read.int(name, 0, 1, MAX_TIMER_MS);
    if (value) options[option] = value;
  }
  const liveness = livenessOptions(options.replicaHeartbeatMs, options.replicaGoneAfterMs);
  if (silenceTooShort(liveness)) problems.push(`DISPATCHER_REPLICA_GONE_AFTER_MS: must be at least twice DISPATCHER_REPLICA_HEARTBEAT_MS (${liveness.heartbeatMs}), got ${liveness.goneAfterMs}`);
  const { perDestinationConcurrency: base = DEFAULT_SCHEDULER_OPTIONS.perDestinationConcurrency, perDestinationMaxConcurrency: max } = options;
  if (max !== undefined && max < base) problems.push(`DISPATCHER_PER_DESTINATION_MAX_CONCURRENCY: must be at least DISPATCHER_PER_DESTINATION_CONCURRENCY (${base}), got ${max}; set them equal for a fixed concurrency`);
  if (problems.length) throw new ConfigError(problems);
  return options as DispatcherOptions;
}

async function start(): Promise<() => Promise<void>> {
  const { config, tuning, healthPort } = readEnvironment({
    config: () => loadConfig(),
    tuning: () => readTuning(process.env),
    required: () =>
      requireSettings(process.env, {
        DATABASE_URL: 'by the standalone dispatcher (a postgres:// URL)',
        NATS_URL: 'by the standalone dispatcher (a nats:// URL)',
        ENCRYPTION_KEY: 'by the standalone dispatcher (the key the gateway seals webhook secrets with)',
      }),
    healthPort: () => healthPortFrom(process.env),
    telemetry: () => checkTelemetryEnv(),
  });
  const telemetry = await startTelemetry({ serviceName: 'switchboard-dispatcher' });
  const log = createLogger({ level: config.logLevel, name: 'dispatcher' });
  const db = openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, applicationName: 'switchboard-dispatcher', log });
  await startStep('DATABASE_URL', 'cannot open or migrate the database', () => migrate(db));
  const crypto = new Crypto(config.encryptionKey!);
  await checkEncryptionKeyAtStart(db, crypto);
  const bus = await startStep('NATS_URL', 'cannot open the bus', () => openBus({ natsUrl: config.natsUrl, namespace: config.natsNamespace, log, replicas: config.natsStreamReplicas }));
  const metrics = createMetrics({ db, bus }); // served on HEALTH_PORT at /metrics
  // The chart sets the pod's uid; without it each process is a replica of its own.
  const leaseOwner = process.env.DISPATCHER_REPLICA_NAME?.trim() || undefined;
  const dispatcher = await startDispatcher({ db, bus, crypto, config, log, metrics, leaseOwner, ...tuning });
  const health = healthPort === undefined ? undefined : startHealthServer(healthPort, () => checkReadiness({ database: () => db.raw('select 1'), bus: () => bus.pending('events', 'dispatcher') }), metrics);
  await health?.listening;

  return async function stop() {
    log.info('dispatcher stopping');
    await health?.close();
    await dispatcher.stop();
    await bus.close();
    await telemetry.shutdown();
    await db.destroy();
  };
}

runService('dispatcher', start);
