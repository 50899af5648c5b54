// An embedded server without NATS_URL is the only Switchboard server on its PostgreSQL database.
//
// Without NATS the bus lives inside the process: the commands of the sends a server accepts reach
// only its own sessions, and at start it queues every queued send again on that bus. Another
// server on the same database would accept sends that no session hears (they would wait until
// they expire) and take over the first one's queue. PGlite has the DATA_DIR lock for this. On
// PostgreSQL a server without NATS holds an advisory lock exclusively and one with NATS holds it
// shared, each on a connection of its own, which the database releases when the process dies:
// servers with NATS share the work, and a server without it has the database to itself.
import { createHash } from 'node:crypto';
import type pg from 'pg';
import type { Db, Logger } from '@switchboard/core';
import { openLockConnection } from '@switchboard/session/owner-lock';

const LOCK_KEY = createHash('sha256').update('switchboard/embedded-server').digest().readBigInt64BE(0).toString();

export const ANOTHER_SERVER =
  'a server without NATS_URL must be the only Switchboard server on its database, and another one uses it: give each such server a database of its own, or set NATS_URL on every one of them so that they share the work';

/** `sole`: a server without NATS; `shared`: one with NATS. */
export type ServerLockMode = 'sole' | 'shared';

export interface ServerLock {
  release(): Promise<void>;
}

export interface ServerLockOptions {
  /** How long a start waits for the lock: a server killed a moment ago may still hold it. */
  waitMs?: number;
  /** How often a server whose lock connection closed (a database restart) takes it again. */
  retakeEveryMs?: number;
}

/** Takes the lock or throws ANOTHER_SERVER; keeps it, taking it again after a database restart. */
export async function holdServerLock(db: Db, log: Logger, mode: ServerLockMode, opts: ServerLockOptions = {}): Promise<ServerLock> {
  const { waitMs = 5_000, retakeEveryMs = 2_000 } = opts;
  const until = Date.now() + waitMs;
  let client: pg.Client | null | undefined = await tryLock(db, mode);
  while (!client) {
    if (Date.now() >= until) throw new Error(ANOTHER_SERVER);
    await new Promise((resolve) => setTimeout(resolve, 250));
    client = await tryLock(db, mode);
  }
  let released = false;
  let retakeTimer: NodeJS.Timeout | undefined;
  let warned = false;
  const keep = (held: pg.Client) => {
    held.once('end', () => {
      if (released) return;
      client = undefined;
      retake();
    });
  };
  const retake = () => {
    retakeTimer = setTimeout(async () => {
      const taken = await tryLock(db, mode).catch(() => undefined);
      if (released) return void (await taken?.end().catch(() => undefined));
      if (taken) {
        client = taken;
        warned = false;
        return keep(taken);
      }
      // Null: another server took it while the database was away; undefined: not back yet.
      if (taken === null && !warned) {
        warned = true;
        log.error(`${ANOTHER_SERVER}; stop one of them`);
      }
      retake();
    }, retakeEveryMs);
    retakeTimer.unref();
  };
  keep(client);
  return {
    async release() {
      released = true;
      clearTimeout(retakeTimer);
      await client?.end().catch(() => undefined);
    },
  };
}

/** The lock's connection, or null when another server holds the lock in a way that excludes this one. */
async function tryLock(db: Db, mode: ServerLockMode): Promise<pg.Client | null> {
  const client = await openLockConnection(db);
  try {
    const take = mode === 'sole' ? 'pg_try_advisory_lock' : 'pg_try_advisory_lock_shared';
    const { rows } = await client.query(`SELECT ${take}($1::bigint) AS ok`, [LOCK_KEY]);
    if (rows[0]?.ok) return client;
  } catch (err) {
    await client.end().catch(() => undefined);
    throw err;
  }
  await client.end().catch(() => undefined);
  return null;
}
