// Our messages' headers are plain records; NATS carries them as MsgHdrs. Keys NATS reserves
// (`Nats-…`, such as Nats-Msg-Id) are NATS's business: never sent from a record, never handed on.
import { headers as natsHeaders, type MsgHdrs } from '@nats-io/transport-node';

const RESERVED = /^nats-/i;

/** NATS headers for a record; undefined for an empty one. Refuses a reserved key. */
export function toNatsHeaders(record: Record<string, string> | undefined): MsgHdrs | undefined {
  const entries = Object.entries(record ?? {});
  if (entries.length === 0) return undefined;
  const h = natsHeaders();
  for (const [key, value] of entries) {
    if (RESERVED.test(key)) throw new Error(`header ${key} uses the reserved Nats- prefix`);
    h.set(key, value);
  }
  return h;
}

/** A message's own headers as a record, without NATS's reserved ones. */
export function fromNatsHeaders(h: MsgHdrs | undefined): Record<string, string> {
  const record: Record<string, string> = {};
  for (const key of h?.keys() ?? []) if (!RESERVED.test(key)) record[key] = h!.get(key);
  return record;
}
