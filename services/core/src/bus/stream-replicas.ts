// NATS_STREAM_REPLICAS: on how many JetStream servers of a NATS cluster each stream of the
// deployment (commands, events, the media bucket) is kept. With 3, losing one server loses no
// command, event or file and stops nothing; consumers take the stream's count, so a session's
// position in its commands survives the server too. Processes only ever raise a stream's count:
// one started with a lower value (a debug pod, a job without the setting) must not take the
// replicas away from everyone; lowering is an operator's act, with the nats CLI.
import { JetStreamApiError } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';

/** JetStream's answers to a stream it cannot place: replicas on a single server, or more
 *  replicas than the cluster has servers. */
const CANNOT_PLACE = new Set([10074, 10005]);

const needsCluster = (replicas: number) => `NATS_STREAM_REPLICAS=${replicas} needs a NATS cluster of at least ${replicas} JetStream servers`;

/** Refuses replicas a single server cannot give before any stream is touched: NATS 2.9 takes an
 *  update of an existing stream to more replicas on a single server and keeps one copy. */
export function assertCanReplicate(nc: NatsConnection, replicas: number): void {
  if (replicas > 1 && !nc.info?.cluster) throw new Error(`${needsCluster(replicas)}; the server at ${nc.getServer()} is not part of one: use 1 with a single server`);
}

/** The error to start-up with: NATS's own answer says nothing of the setting that caused it. */
export function explainReplicasRefusal(err: unknown, replicas: number): unknown {
  if (replicas <= 1 || !(err instanceof JetStreamApiError) || !CANNOT_PLACE.has(err.code)) return err;
  return new Error(`${needsCluster(replicas)} (NATS answered: ${err.message}); use 1 with a single server`);
}

/** The count an existing stream is brought to: the setting's, unless it has more already. */
export function replicasToKeep(existing: number | undefined, wanted: number): number {
  return Math.max(existing ?? 1, wanted);
}
