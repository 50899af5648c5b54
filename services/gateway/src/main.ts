// The gateway process of cluster mode (PostgreSQL + NATS; sessions run as their own pods and are
// reached over NATS; Instance resources are kept in step when running inside Kubernetes).
import { OutboxRelay, STOP_TIMEOUT_MS, checkTelemetryEnv, loadConfig, readEnvironment, requireSettings, openPlatform, runService, startMediaRetention, startEventRetention, startMessageRetention, startTelemetry, withChosenPort, type StopService } from '@switchboard/core';
import { RemoteSessionRuntime, expirySweepIntervalMs, startExpirySweeper } from '@switchboard/session';
import { createGatewayApp } from './app.ts';
import { SendItemWriter } from './sending/send-item-writer.ts';
import { InstanceTokenLookup } from './http/instance-token-lookup.ts';
import { SharedRateWindows } from './http/shared-rate-windows.ts';
import { listen } from './listen.ts';
import type { InstanceResources } from './deps.ts';

async function kubernetesResources(): Promise<InstanceResources | undefined> {
  if (!process.env.KUBERNETES_SERVICE_HOST && !process.env.KUBECONFIG) return undefined;
  const { KubernetesInstanceResources } = await import('./kubernetes/instance-resources.ts');
  return KubernetesInstanceResources.fromEnvironment();
}

async function start(): Promise<StopService> {
  const environment = readEnvironment({
    config: () => loadConfig(),
    required: () =>
      requireSettings(process.env, {
        DATABASE_URL: 'for the gateway process (cluster mode uses PostgreSQL)',
        NATS_URL: 'for the gateway process (cluster mode uses NATS JetStream)',
        ADMIN_API_KEY: 'in cluster mode (none is generated there)',
        ENCRYPTION_KEY: 'in cluster mode (every process seals and opens secrets with the same key)',
      }),
    telemetry: () => checkTelemetryEnv(),
  });
  const config = await withChosenPort(environment.config);
  const telemetry = await startTelemetry({ serviceName: 'switchboard-gateway' });
  const platform = await openPlatform(config, { service: 'gateway', generateMissingKeys: false, migrate: true });
  const { db, bus, media, crypto, log } = platform;
  const relay = new OutboxRelay(db, bus, log);
  relay.start();
  const runtime = new RemoteSessionRuntime({ db, bus, crypto, log, relay });
  const sweeper = startExpirySweeper({ db, relay, log, intervalMs: expirySweepIntervalMs(config.sendExpiryMs) });
  const retention = startMediaRetention({ db, store: media, maxAgeMs: config.mediaRetentionMs, log });
  const eventRetention = startEventRetention({ db, maxAgeMs: config.eventRetentionMs, log });
  const messageRetention = startMessageRetention({ db, maxAgeMs: config.messageRetentionMs, log });
  const resources = await kubernetesResources();
  const stopState = { stopping: false };
  const rateWindows = new SharedRateWindows({ db, limit: config.rateLimitPerMinute, log });
  const app = createGatewayApp({ config, db, crypto, bus, relay, runtime, media, log, adminKey: platform.adminKey, resources, startedAt: new Date(), sendItems: new SendItemWriter(db), instanceTokens: new InstanceTokenLookup(db), rateWindows, stopState });
  const http = await listen(app, config.port, config.host, stopState);
  log.info({ port: http.port, kubernetes: Boolean(resources) }, 'gateway listening');

  async function stop() {
    log.info({ drainMs: config.shutdownDelayMs }, 'gateway stopping');
    await http.close({ drainMs: config.shutdownDelayMs });
    await rateWindows.stop();
    await sweeper.stop();
    await Promise.all([retention.stop(), eventRetention.stop(), messageRetention.stop()]);
    await runtime.close();
    await relay.stop();
    await platform.close();
    await telemetry.shutdown();
  }
  return Object.assign(stop, { timeoutMs: STOP_TIMEOUT_MS + config.shutdownDelayMs });
}

runService('gateway', start);
