// Operator process: `node --import tsx services/operator/src/main.ts`. Campaigns for the Lease;
// only the leader runs the controller. Losing the lease ends the process (the Deployment starts
// a fresh one that campaigns again), so a stale leader never keeps reconciling.
import { CoordinationV1Api, KubeConfig } from '@kubernetes/client-node';
import { ConfigError, runService, Crypto, createLogger, loadConfig, migrate, openDatabase, startHealthServer } from '@switchboard/core';
import { Controller } from './controller.ts';
import { InstanceStore } from './instance-store.ts';
import { LeaderElector } from './leader-election.ts';
import { loadOperatorConfig } from './operator-config.ts';

async function start(): Promise<() => Promise<void>> {
  const config = loadConfig();
  const operator = loadOperatorConfig();
  if (!config.databaseUrl) throw new ConfigError(['DATABASE_URL: required for the operator (cluster mode uses PostgreSQL)']);
  if (!config.encryptionKey) throw new ConfigError(['ENCRYPTION_KEY: required for the operator (instance tokens are sealed with it)']);
  const logger = createLogger({ level: config.logLevel, name: 'operator' });
  const db = openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, poolMax: 4 });
  await migrate(db);
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromDefault(); // in-cluster service account, or KUBECONFIG outside
  const controller = new Controller({ kubeConfig, namespace: operator.namespace, store: new InstanceStore(db, new Crypto(config.encryptionKey)), session: operator.session, logger });
  const elector = new LeaderElector({
    api: kubeConfig.makeApiClient(CoordinationV1Api),
    namespace: operator.namespace,
    leaseName: operator.leaseName,
    identity: operator.identity,
    onStartedLeading: async () => {
      logger.info({ identity: operator.identity }, 'became leader; starting the controller');
      await controller.start();
    },
    onStoppedLeading: async () => {
      logger.warn('lost leadership; exiting so a fresh process campaigns again');
      await controller.stop();
      process.exit(1);
    },
    onError: (err) => logger.warn({ err: String(err) }, 'leader election round failed'),
  });
  const health = startHealthServer(operator.healthPort, async () => {
    await db.raw('select 1');
    return { leader: elector.isLeader };
  });
  elector.start();
  return async function stop() {
    await health.close();
    await controller.stop();
    await elector.stop();
    await db.destroy();
  };
}

runService('operator', start);
