// The session process of cluster mode: serves ONE instance (INSTANCE_ID) against PostgreSQL
// (DATABASE_URL) and NATS JetStream (NATS_URL). It runs the worker while the instance is not
// paused, answers `rpc.<instanceId>.*`, and shuts down gracefully on SIGTERM.
import { pathToFileURL } from 'node:url';
import { checkEncryptionKeyAtStart, checkReadiness, checkTelemetryEnv, Crypto, ConfigError, EnvReader, MAX_TIMER_MS, readEnvironment, requireSettings, runService, SESSION_STOP_TIMEOUT_MS, startStep, createLogger, healthPortFrom, loadConfig, openDatabase, openMediaStore, OutboxRelay, recordStateIfUnheld, startHealthServer, startTelemetry, type Config, type Db, type StopService } from '@switchboard/core';
import { openBus } from '@switchboard/core/bus/index';
import { driverFactoryFor } from './drivers.ts';
import { LocalSessionRuntime } from './local-runtime.ts';
import { mediaArchive } from './media-archive.ts';
import { serveSessionRpc } from './rpc-server.ts';

const UNLINK_MARK_POLL_MS = 100;
const SESSION_OUTBOX_SWEEP_MS = 10_000;

interface SessionProcessConfig {
  config: Config;
  instanceId: string;
  databaseUrl: string;
  natsUrl: string;
  encryptionKey: Buffer;
  ackWaitMs: number;
  lockRetryMs: number;
  /** How often the process compares the instance's `paused` with what it runs. */
  runStateCheckMs: number;
  /** How long a stopping connected session waits for the operator's delete or reset mark: a
   *  foreground delete has the garbage collector stop the pod as the operator marks it. */
  unlinkMarkWaitMs: number;
  /** HEALTH_PORT: /health and /ready for the pod's probes (none when unset). */
  healthPort?: number;
}

/** Validates the environment; throws ConfigError naming every bad variable. */
export function loadSessionConfig(env: Record<string, string | undefined> = process.env): SessionProcessConfig {
  const { config, timing, healthPort } = readEnvironment({
    config: () => loadConfig(env),
    required: () =>
      requireSettings(env, {
        INSTANCE_ID: '(the instance this session serves)',
        DATABASE_URL: 'for a session process',
        NATS_URL: 'for a session process',
        ENCRYPTION_KEY: 'for a session process',
      }),
    timing: () => sessionTiming(env),
    healthPort: () => healthPortFrom(env),
    telemetry: () => checkTelemetryEnv(env),
  });
  return {
    config,
    instanceId: config.instanceId!,
    databaseUrl: config.databaseUrl!,
    natsUrl: config.natsUrl!,
    encryptionKey: config.encryptionKey!,
    ...timing,
    healthPort,
  };
}

function sessionTiming(env: Record<string, string | undefined>): Pick<SessionProcessConfig, 'ackWaitMs' | 'lockRetryMs' | 'runStateCheckMs' | 'unlinkMarkWaitMs'> {
  const problems: string[] = [];
  const read = new EnvReader(env, problems);
  const timing = {
    ackWaitMs: read.int('SESSION_COMMAND_ACK_WAIT_MS', 30_000, 1, MAX_TIMER_MS),
    lockRetryMs: read.int('SESSION_LOCK_RETRY_MS', 2000, 1, MAX_TIMER_MS),
    runStateCheckMs: read.int('SESSION_RUN_STATE_CHECK_MS', 5000, 1, MAX_TIMER_MS),
    unlinkMarkWaitMs: read.int('SESSION_UNLINK_MARK_WAIT_MS', 2000, 0, 20_000),
  };
  if (problems.length) throw new ConfigError(problems);
  return timing;
}

export async function runSessionProcess(cfg: SessionProcessConfig): Promise<() => Promise<void>> {
  const { config, instanceId } = cfg;
  const log = createLogger({ level: config.logLevel, name: 'session' }).child({ instanceId });
  const crypto = new Crypto(cfg.encryptionKey);
  const db = openDatabase({ databaseUrl: cfg.databaseUrl, dataDir: config.dataDir, poolMax: 5, applicationName: `switchboard-session ${instanceId}`, log });
  const row = await startStep('DATABASE_URL', 'cannot read the database', () => db('instances').where({ id: instanceId }).first('id'));
  if (!row) {
    await db.destroy();
    throw new ConfigError([`INSTANCE_ID: instance ${instanceId} does not exist in the database`]);
  }
  await checkEncryptionKeyAtStart(db, crypto).catch(async (err) => {
    await db.destroy();
    throw err;
  });
  const bus = await startStep('NATS_URL', 'cannot open the bus', () => openBus({ natsUrl: cfg.natsUrl, namespace: config.natsNamespace, log, replicas: config.natsStreamReplicas }));
  const mediaStore = await startStep('NATS_URL', 'cannot open the media store', () => openMediaStore({ natsUrl: cfg.natsUrl, namespace: config.natsNamespace, dataDir: config.dataDir, crypto, replicas: config.natsStreamReplicas }));
  // Liveness is the event loop answering; readiness adds the database and the bus. A network
  // outage (WhatsApp unreachable) is neither: the session reconnects by itself.
  const health = cfg.healthPort === undefined ? undefined : startHealthServer(cfg.healthPort, () => checkReadiness({ database: () => db.raw('select 1'), bus: () => bus.pending('commands', '__ready_probe__') }));
  await health?.listening;
  // Its own rows are published right after their commit; the periodic sweep is the backstop for
  // rows a crash or a bus outage left, which every gateway replica also sweeps each second. Every
  // 10 s here, not every second: a thousand idle session pods asked a thousand times a second.
  const relay = new OutboxRelay(db, bus, log, SESSION_OUTBOX_SWEEP_MS);
  relay.start();
  const runtime = new LocalSessionRuntime({
    db,
    bus,
    relay,
    crypto,
    log,
    media: mediaArchive({ db, store: mediaStore, crypto, publicBaseUrl: config.publicBaseUrl, linkTtlSeconds: config.mediaLinkTtlSeconds }),
    driverFactory: await driverFactoryFor(config, { db, log, media: mediaStore }),
    commandAckWaitMs: cfg.ackWaitMs,
    lockRetryMs: cfg.lockRetryMs,
  });
  const rpc = await serveSessionRpc(bus, instanceId, runtime);
  const resumed = await runtime.resume(instanceId);
  log.info({ resumed }, resumed ? 'session: started' : 'session: instance is paused, waiting for start');
  // Level-triggered: the database's `paused` is the desired run state, and a start or stop request
  // is only the prompt to look at it. One lost with the bus, or a pause undone after the worker saw
  // it and stopped, is caught up at the next look.
  const follow = setInterval(() => {
    runtime.followRecordedRunState(instanceId).catch((err: unknown) => log.warn({ err: String(err) }, 'session: run-state check failed'));
  }, cfg.runStateCheckMs);
  follow.unref();

  return async function shutdown() {
    clearInterval(follow);
    await health?.close();
    await rpc.stop();
    const wasRunning = runtime.worker(instanceId) !== undefined;
    // Stopped because the Instance is being deleted or reset (the operator said so before it
    // stopped the pod): the device leaves the phone's Linked devices. Nothing is recorded: the
    // records go next, or the reset records its own state once this process let go.
    const unlinking = wasRunning && (await unlinkRequested(db, instanceId, cfg.unlinkMarkWaitMs).catch(() => false));
    if (unlinking) await runtime.unlinkAtShutdown(instanceId).catch((err: unknown) => log.warn({ err: String(err) }, 'session: could not unlink the device from the phone'));
    await runtime.close();
    // The socket is gone until the next session process takes over, unless the instance was paused
    // meanwhile (a stop this process never heard of; the operator removes the pod of a paused one).
    if (wasRunning && !unlinking && (await recordShutdownState(db, instanceId))) relay.kick();
    await relay.flush().catch(() => undefined);
    await relay.stop();
    await mediaStore.close();
    await bus.close();
    await db.destroy();
  };
}

/** Whether the operator marked the instance for a delete or a reset. A connected session waits
 *  `waitMs` for a mark still to come: with a foreground delete (Argo CD's prune, `kubectl delete
 *  --cascade=foreground`) the garbage collector stops the pod as the operator marks it, and a
 *  device not unlinked now stays on the phone's list with its credentials gone. */
async function unlinkRequested(db: Db, instanceId: string, waitMs: number): Promise<boolean> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const row = await db('instances').where({ id: instanceId }).first('unlink_requested_at', 'state');
    if (row?.unlink_requested_at) return true;
    if (row?.state !== 'connected' || Date.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, UNLINK_MARK_POLL_MS));
  }
}

/** Decided with the instance's row locked, and only while no session holds it (this process let
 *  go; a successor may have taken over): a disconnect that came meanwhile is not overwritten. */
function recordShutdownState(db: Db, instanceId: string): Promise<boolean> {
  return recordStateIfUnheld(db, instanceId, (row) => (row.paused ? { state: 'stopped', reason: 'paused' } : { state: 'reconnecting', reason: 'session_restarting' }));
}

async function start(): Promise<StopService> {
  const cfg = loadSessionConfig();
  const telemetry = await startTelemetry({ serviceName: 'switchboard-session', instanceId: cfg.instanceId });
  const shutdown = await runSessionProcess(cfg);
  async function stop() {
    await shutdown();
    await telemetry.shutdown();
  }
  return Object.assign(stop, { timeoutMs: SESSION_STOP_TIMEOUT_MS });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) runService('session', start);
