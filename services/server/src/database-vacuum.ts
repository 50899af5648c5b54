// Embedded storage (PGlite) has no autovacuum or autoanalyze: nothing else reclaims the space of
// deleted and updated rows (the outbox's, written and deleted for every message, grew by about
// 1.5 KB a send for good) or keeps the planner's statistics current. The embedded server runs
// both now and then; on a database this size they take milliseconds. PostgreSQL does it itself.
import { startPeriodicJob, type Db, type Logger, type PeriodicJob } from '@switchboard/core';

export interface DatabaseVacuumOptions {
  db: Db;
  log: Pick<Logger, 'error'>;
  /** Default 10 minutes, the first a minute after the start. */
  intervalMs?: number;
  firstRunAfterMs?: number;
}

export function startDatabaseVacuum(opts: DatabaseVacuumOptions): PeriodicJob<void> {
  return startPeriodicJob(async () => void (await opts.db.raw('VACUUM (ANALYZE)')), {
    name: 'database vacuum',
    firstRunAfterMs: opts.firstRunAfterMs ?? 60_000,
    intervalMs: opts.intervalMs ?? 600_000,
    log: opts.log,
  });
}
