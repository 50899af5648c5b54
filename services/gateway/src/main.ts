// The gateway process of cluster mode (PostgreSQL + NATS; sessions run as their own pods and are
// reached over NATS; Instance resources are kept in step when running inside Kubernetes).
import { ConfigError, OutboxRelay, loadConfig, openPlatform, runService, startMediaRetention, startTelemetry, withChosenPort } from '@switchboard/core';
import { RemoteSessionRuntime, expirySweepIntervalMs, startExpirySweeper } from '@switchboard/session';
import { createGatewayApp } from './app.ts';
import { SendItemWriter } from './sending/send-item-writer.ts';
import { InstanceTokenLookup } from './http/instance-token-lookup.ts';
import { listen } from './listen.ts';
import type { InstanceResources } from './deps.ts';

async function kubernetesResources(): Promise<InstanceResources | undefined> {
  if (!process.env.KUBERNETES_SERVICE_HOST && !process.env.KUBECONFIG) return undefined;
  const { KubernetesInstanceResources } = await import('./kubernetes/instance-resources.ts');
  return KubernetesInstanceResources.fromEnvironment();
}

async function start(): Promise<() => Promise<void>> {
  const config = await withChosenPort(loadConfig());
  const problems = [!config.databaseUrl && 'DATABASE_URL: required for the gateway process', !config.natsUrl && 'NATS_URL: required for the gateway process'].filter(Boolean);
  if (problems.length) throw new ConfigError(problems as string[]);
  const telemetry = await startTelemetry({ serviceName: 'switchboard-gateway' });
  const platform = await openPlatform(config, { service: 'gateway', generateMissingKeys: false, migrate: true });
  const { db, bus, media, crypto, log } = platform;
  const relay = new OutboxRelay(db, bus, log);
  relay.start();
  const runtime = new RemoteSessionRuntime({ db, bus, crypto, log, relay });
  const sweeper = startExpirySweeper({ db, relay, log, intervalMs: expirySweepIntervalMs(config.sendExpiryMs) });
  const retention = startMediaRetention({ db, store: media, maxAgeMs: config.mediaRetentionMs, intervalMs: 3600_000, log });
  const resources = await kubernetesResources();
  const app = createGatewayApp({ config, db, crypto, bus, relay, runtime, media, log, adminKey: platform.adminKey, resources, startedAt: new Date(), sendItems: new SendItemWriter(db), instanceTokens: new InstanceTokenLookup(db) });
  const http = await listen(app, config.port, config.host);
  log.info({ port: http.port, kubernetes: Boolean(resources) }, 'gateway listening');

  return async function stop() {
    log.info('gateway stopping');
    await http.close();
    await sweeper.stop();
    retention.stop();
    await runtime.close();
    await relay.stop();
    await platform.close();
    await telemetry.shutdown();
  };
}

runService('gateway', start);
