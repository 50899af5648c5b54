// The webhook dispatcher: intake (bus → delivery rows) plus the delivery scheduler (rows →
// signed POSTs). The embedded server runs it in-process with startDispatcher(); cluster mode runs
// main.ts as its own deployment, any number of replicas on one database.
import { randomUUID } from 'node:crypto';
import type { Bus, Config, Crypto, Logger, Metrics, Subscription } from '@switchboard/core';
import type { Knex } from 'knex';
import { DEFAULT_RETRY_AFTER_CAP_MS } from './backoff.ts';
import { createEgressClient, type EgressClient } from './egress.ts';
import { startIntake, type IntakeOptions } from './intake.ts';
import { DeliveryScheduler, DEFAULT_SCHEDULER_OPTIONS, type SchedulerOptions } from './scheduler.ts';
import { livenessOptions, ReplicaLiveness } from './replica-liveness.ts';
import { releaseLeasesOf } from './store.ts';

export interface DispatcherOptions extends Partial<SchedulerOptions> {
  retryAfterCapMs?: number;
  /** The replica's name, kept with its leases. A stable one (`embedded` for the one process of a
   *  PGlite data dir, the pod's uid in Kubernetes) lets a dispatcher restarted after a crash take
   *  back at once what it had claimed; two live dispatchers must never share one. Default: a name
   *  of this process alone (a crashed one's claims then go to another replica once it is found
   *  gone, see replica-liveness.ts). */
  leaseOwner?: string;
  /** How often this replica records that it is alive, and after how long without that another
   *  replica hands back its leases (replica-liveness.ts; defaults 5 s and 20 s). */
  replicaHeartbeatMs?: number;
  replicaGoneAfterMs?: number;
  /** Replace the egress client (tests: a resolver that simulates DNS). */
  egress?: EgressClient;
  /** false: run only the scheduler, without consuming the event stream. */
  consumeEvents?: boolean;
  intake?: IntakeOptions;
}

export interface DispatcherDeps {
  db: Knex;
  bus: Bus;
  crypto: Crypto;
  config: Pick<Config, 'webhookRetrySchedule' | 'webhookAllowPrivateTargets'>;
  log: Logger;
  /** Where webhook attempts, exhaustion and open breakers are counted (optional). */
  metrics?: Metrics;
}

export interface Dispatcher {
  /** Look for due deliveries now (e.g. after the gateway reset one for a manual retry). */
  kick(): void;
  stop(): Promise<void>;
}

export async function startDispatcher(args: DispatcherDeps & DispatcherOptions): Promise<Dispatcher> {
  const { db, bus, crypto, config, log } = args;
  const attemptTimeoutMs = args.attemptTimeoutMs ?? DEFAULT_SCHEDULER_OPTIONS.attemptTimeoutMs;
  const ownEgress = args.egress === undefined;
  if (args.leaseOwner) {
    const released = await releaseLeasesOf(db, args.leaseOwner);
    if (released) log.info({ released, leaseOwner: args.leaseOwner }, 'dispatcher: took back the deliveries it had claimed before it restarted');
  }
  const leaseOwner = args.leaseOwner ?? `dispatcher-${randomUUID()}`;
  const egress = args.egress ?? createEgressClient({ allowPrivateTargets: config.webhookAllowPrivateTargets, timeoutMs: attemptTimeoutMs });
  const scheduler = new DeliveryScheduler(
    { db, crypto, egress, log, metrics: args.metrics, leaseOwner, timing: { schedule: config.webhookRetrySchedule, retryAfterCapMs: args.retryAfterCapMs ?? DEFAULT_RETRY_AFTER_CAP_MS } },
    pickSchedulerOptions(args),
  );
  const liveness = new ReplicaLiveness(
    { db, log, name: leaseOwner, onReleased: () => scheduler.kick() },
    livenessOptions(args.replicaHeartbeatMs, args.replicaGoneAfterMs),
  );
  scheduler.start();
  await liveness.start();

  let intake: Subscription | undefined;
  if (args.consumeEvents !== false) {
    try {
      intake = await startIntake({ db, bus, log, schedule: config.webhookRetrySchedule, onPending: (destinations) => scheduler.claimFor(destinations), handOff: scheduler }, args.intake);
    } catch (err) {
      await scheduler.stop();
      await liveness.stop();
      if (ownEgress) await egress.close();
      throw err;
    }
  }
  log.info({ consumeEvents: intake !== undefined }, 'dispatcher started');

  return {
    kick: () => scheduler.kick(),
    async stop() {
      await intake?.stop();
      await scheduler.stop();
      await liveness.stop();
      if (ownEgress) await egress.close();
    },
  };
}

function pickSchedulerOptions(o: DispatcherOptions): Partial<SchedulerOptions> {
  const picked: Partial<SchedulerOptions> = {};
  for (const key of Object.keys(DEFAULT_SCHEDULER_OPTIONS) as (keyof SchedulerOptions)[]) {
    if (o[key] !== undefined) picked[key] = o[key];
  }
  return picked;
}

export { computeSignature, signatureHeaders, verifySignature, SIGNATURE_PREFIX } from './signing.ts';
export { isPublicAddress, checkWebhookUrl, createEgressClient, EgressError, type EgressClient, type EgressOptions } from './egress.ts';
export { DeliveryScheduler, type SchedulerOptions } from './scheduler.ts';
export { startIntake, sweepUnroutedEvents, routeAndRecord, DISPATCHER_DURABLE } from './intake.ts';
