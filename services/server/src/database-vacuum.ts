// Embedded storage (PGlite) has no autovacuum or autoanalyze: nothing else reclaims the space of
// deleted and updated rows (the outbox's, written and deleted for every message, grew by about
// 1.5 KB a send for good) or keeps the planner's statistics current. The embedded server vacuums
// the tables whose rows are updated or deleted, one at a time (PGlite runs each statement on the
// event loop: requests get their turn in between), and analyzes every table now and then.
// PostgreSQL does both itself.
import { startPeriodicJob, type Db, type Logger, type PeriodicJob } from '@switchboard/core';

/** Tables with updates and deletes (retention's among them); the others only grow. */
const CHURNING_TABLES = ['outbox', 'media_purge', 'instances', 'sandbox_ledger', 'deliveries', 'send_items', 'incoming', 'message_counts', 'auth_state', 'dispatcher_replicas', 'events', 'media'];
/** One run in this many also analyzes the whole database (it samples a bounded number of rows). */
const ANALYZE_EVERY_RUNS = 6;

export interface DatabaseVacuumOptions {
  db: Db;
  log: Pick<Logger, 'error'>;
  /** Default 10 minutes, the first a minute after the start. */
  intervalMs?: number;
  firstRunAfterMs?: number;
}

export function startDatabaseVacuum(opts: DatabaseVacuumOptions): PeriodicJob<void> {
  let runs = 0;
  return startPeriodicJob(
    async () => {
      for (const table of CHURNING_TABLES) {
        await opts.db.raw('VACUUM ??', [table]);
        await new Promise((resolve) => setImmediate(resolve));
      }
      if (runs++ % ANALYZE_EVERY_RUNS === 0) await opts.db.raw('ANALYZE');
    },
    { name: 'database vacuum', firstRunAfterMs: opts.firstRunAfterMs ?? 60_000, intervalMs: opts.intervalMs ?? 600_000, log: opts.log },
  );
}
