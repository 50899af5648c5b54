// Everything a route may use, passed explicitly. The only module-level state is what belongs to
// the process, not to an app: adminKeyHashes (http/auth.ts) and runStateLanes
// (routes/instances.ts), WeakMaps keyed by these deps,
// qrImages (records.ts, QR text -> PNG, the same for every app; bounded), and ffmpeg's slots and
// resolved binary (media/ffmpeg.ts: the cores and the PATH are the process's).
import type { Bus, Config, Crypto, Db, Logger, MediaStore, Metrics, OutboxRelay, SessionRuntime, SpecStamp } from '@switchboard/core';
import type { SendItemWriter } from './sending/send-item-writer.ts';
import type { InstanceTokenLookup } from './http/instance-token-lookup.ts';
import type { RateWindows } from './http/rate-limit.ts';
import type { StopState } from './listen.ts';
import type { InstanceChanges, InstanceDesiredState } from './kubernetes/instance-resources.ts';

export interface GatewayDeps {
  config: Config;
  db: Db;
  crypto: Crypto;
  bus: Bus;
  relay: OutboxRelay;
  runtime: SessionRuntime;
  media: MediaStore;
  log: Logger;
  adminKey: string;
  /** Cluster mode: keeps Kubernetes Instance resources in step with the API (undefined embedded). */
  resources?: InstanceResources;
  startedAt: Date;
  /** The process's metrics registry (served at GET /metrics); the app creates one when absent. */
  metrics?: Metrics;
  /** Writes accepted sends to the queue, grouped per statement. */
  sendItems: SendItemWriter;
  /** Finds instance tokens, grouped per query. */
  instanceTokens: InstanceTokenLookup;
  /** Where the rate limit counts: the replicas' shared windows in cluster mode; this process's
   *  own when absent (embedded). */
  rateWindows?: RateWindows;
  /** Set once the server begins to stop (listen's `close`): readiness fails from then on. */
  stopState?: StopState;
}

/** Kubernetes Instance/Project resources written by the gateway in cluster mode. */
export interface InstanceResources {
  apply(instance: InstanceDesiredState): Promise<void>;
  /** The new version of the resource's spec, when the change made one. */
  update(id: string, changes: InstanceChanges): Promise<SpecStamp | undefined>;
  requestReset(id: string): Promise<void>;
  delete(id: string): Promise<void>;
}
