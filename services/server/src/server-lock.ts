// An embedded server without NATS_URL is the only embedded server on its PostgreSQL database.
//
// Without NATS the bus lives inside the process: the commands of the sends a server accepts reach
// only its own sessions, and at start it queues every queued send again on that bus. Another
// server on the same database would accept sends that no session hears (they would wait until
// they expire) and take over the first one's queue. PGlite has the DATA_DIR lock for this. On
// PostgreSQL a server without NATS holds an advisory lock exclusively and one with NATS holds it
// shared, each on a connection of its own that is probed like a session's owner lock: servers
// with NATS share the work, and a server without it has the database to itself.
import { createHash } from 'node:crypto';
import type { Db } from '@switchboard/core';
import { advisoryLock, type LockProbe } from '@switchboard/session/owner-lock';

export const SERVER_LOCK_KEY = createHash('sha256').update('switchboard/embedded-server').digest().readBigInt64BE(0).toString();

export const ANOTHER_SERVER =
  'a server without NATS_URL must be the only Switchboard server on its database, and another one uses it: give each such server a database of its own, or set NATS_URL on every one of them so that they share the work';

/** `sole`: a server without NATS; `shared`: one with NATS. */
export type ServerLockMode = 'sole' | 'shared';

export interface ServerLock {
  release(): Promise<void>;
}

export interface ServerLockOptions {
  /** Told when the lock was lost and another server holds it now: this one must stop. */
  onTaken(err: Error): void;
  /** How long a start waits for the lock: a server killed a moment ago may still hold it. */
  waitMs?: number;
  /** How often a server whose lock connection was lost (a database restart) tries to take it again. */
  retakeEveryMs?: number;
  probe?: LockProbe;
}

/** Takes the lock or throws ANOTHER_SERVER. Keeps it: a lost connection is followed by attempts
 *  to take it again until one succeeds, or finds another server holding it (`onTaken`). */
export async function holdServerLock(db: Db, mode: ServerLockMode, opts: ServerLockOptions): Promise<ServerLock> {
  const { waitMs = 5_000, retakeEveryMs = 1_000 } = opts;
  let released = false;
  let retakeTimer: NodeJS.Timeout | undefined;
  const retake = async () => {
    const taken = await lock.tryAcquire().catch(() => undefined); // undefined: the database is not back yet
    if (released) return void (await lock.release());
    if (taken === false) return opts.onTaken(new Error(ANOTHER_SERVER));
    if (taken === undefined) {
      retakeTimer = setTimeout(retake, retakeEveryMs);
      retakeTimer.unref();
    }
  };
  const lock = advisoryLock(db, { key: SERVER_LOCK_KEY, shared: mode === 'shared' }, () => void retake(), opts.probe);
  const until = Date.now() + waitMs;
  while (!(await lock.tryAcquire())) {
    if (Date.now() >= until) throw new Error(ANOTHER_SERVER);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return {
    async release() {
      released = true;
      clearTimeout(retakeTimer);
      await lock.release();
    },
  };
}
