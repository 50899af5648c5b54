// NATS_STREAM_REPLICAS: on how many JetStream servers of a NATS cluster each stream of the
// deployment (commands, events, the media bucket) is kept. With 3, losing one server loses no
// command, event or file and stops nothing; consumers take the stream's count, so a session's
// position in its commands survives the server too.
import { JetStreamApiError } from '@nats-io/jetstream';

/** JetStream's answers to a stream it cannot place: replicas on a single server, or more
 *  replicas than the cluster has servers. */
const CANNOT_PLACE = new Set([10074, 10005]);

/** The error to start-up with: NATS's own answer says nothing of the setting that caused it. */
export function explainReplicasRefusal(err: unknown, replicas: number): unknown {
  if (replicas <= 1 || !(err instanceof JetStreamApiError) || !CANNOT_PLACE.has(err.code)) return err;
  return new Error(
    `NATS_STREAM_REPLICAS=${replicas} needs a NATS cluster of at least ${replicas} JetStream servers (NATS answered: ${err.message}); use 1 with a single server`,
  );
}
