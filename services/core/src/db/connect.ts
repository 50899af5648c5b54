// One knex handle for both databases: PostgreSQL (cluster mode) or PGlite in DATA_DIR (embedded).
// The same SQL and migrations run on both, since PGlite is PostgreSQL compiled to WASM.
import { ensurePrivateDirectory } from '../directories.ts';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import knexFactory, { type Knex } from 'knex';
import ClientPgLite from 'knex-pglite';
import { migrationSource } from './migrations/index.ts';
import type { Logger } from '../logger.ts';

export type Db = Knex;

export interface DatabaseOptions {
  databaseUrl?: string;
  dataDir: string;
  poolMax?: number;
  /** Shown in pg_stat_activity (who holds which connections: `switchboard-session <instance>`). */
  applicationName?: string;
  /** Where knex's own messages go (at debug level, first line only). */
  log?: Logger;
}

/** knex prints connection errors with their stack on the console by itself; the caller already
 *  gets the error (a start names the variable, a request answers 503), so keep them to debug. */
function knexLog(log: Logger | undefined): Knex.Config['log'] {
  const debug = (message: unknown) => log?.debug({ knex: String(message).split('\n')[0] }, 'knex');
  return { warn: debug, error: debug, deprecate: debug, debug };
}

// knex-pglite derives the result kind from knex's method name, so `.del()` ("DEL") and
// `.increment()` ("COUNTER") would return raw results instead of affected-row counts as on pg.
class PgliteClient extends (ClientPgLite as any) {
  processResponse(obj: any, runner: unknown) {
    const method = obj.method === 'del' ? 'delete' : obj.method === 'counter' ? 'update' : obj.method;
    return super.processResponse({ ...obj, method }, runner);
  }
}

/** Where PGlite keeps the embedded database. */
function embeddedDatabaseDir(dataDir: string): string {
  return join(dataDir, 'pgdata');
}

/** Whether the embedded database still has to be created (PGlite's initdb takes seconds). */
export function embeddedDatabaseIsNew(dataDir: string): boolean {
  return !existsSync(join(embeddedDatabaseDir(dataDir), 'PG_VERSION'));
}

export function openDatabase(opts: DatabaseOptions): Db {
  if (opts.databaseUrl) {
    return knexFactory({
      client: 'pg',
      connection: { connectionString: opts.databaseUrl, application_name: opts.applicationName ?? 'switchboard' },
      // 20: concurrent transactions share WAL flushes (group commit), which 10 held back under
      // load (most connections sat in COMMIT); still far below PostgreSQL's default 100.
      pool: { min: 0, max: opts.poolMax ?? 20 },
      acquireConnectionTimeout: 10_000,
      log: knexLog(opts.log),
    });
  }
  const dir = embeddedDatabaseDir(opts.dataDir);
  ensurePrivateDirectory(dir);
  return knexFactory({ client: PgliteClient as any, dialect: 'postgres', connection: { filename: dir }, log: knexLog(opts.log) } as Knex.Config);
}

export async function migrate(db: Db): Promise<void> {
  // A database that a newer version already migrated has migrations this code does not list. By
  // default knex then refuses to start ("migration directory is corrupt"), so a previous-version
  // process restarted during a rolling upgrade, or after a rollback, would crash-loop. Migrations
  // only add what older code does not read, so it starts and runs what it knows.
  await db.migrate.latest({ migrationSource, disableMigrationsListValidation: true });
}

/** SQLSTATE of a reference the database refuses: the row it names was deleted, maybe just now. */
export const FOREIGN_KEY_VIOLATION = '23503';

export function isForeignKeyViolation(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === FOREIGN_KEY_VIOLATION;
}

/** Socket errors of a connection to the database server. */
const CONNECTION_ERRNOS = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);
/** SQLSTATE classes and codes of a server that is down, starting, stopping or full: 08 connection
 *  exception, 57P01–57P03 shutdown and start-up, 53300 too many connections; and of a statement
 *  that could not be served in time or was chosen to give way, which the same statement may pass
 *  a moment later: 57014 cancelled (a statement_timeout an administrator set, a cancel),
 *  55P03 lock_timeout, 40P01 deadlock victim, 40001 serialization failure. */
const UNAVAILABLE_STATES = new Set(['57P01', '57P02', '57P03', '53300', '57014', '55P03', '40P01', '40001']);

/** Whether a failure means the database cannot be reached now (a restart, a failover, a full pool),
 *  not that the statement was wrong: worth a 503 and a retry, not a 500. */
export function isDatabaseUnavailable(err: unknown): boolean {
  const e = err as { code?: unknown; name?: unknown; message?: unknown } | null;
  if (!e || typeof e !== 'object') return false;
  if (e.name === 'KnexTimeoutError') return true; // no pool connection became free in time
  const code = typeof e.code === 'string' ? e.code : '';
  if (CONNECTION_ERRNOS.has(code) || UNAVAILABLE_STATES.has(code) || (code.length === 5 && code.startsWith('08'))) return true;
  // node-postgres reports a connection lost mid-query without a code, and knex puts the statement
  // before its message ("select … - Connection terminated unexpectedly").
  return typeof e.message === 'string' && LOST_CONNECTION.test(e.message);
}

/** node-postgres's own words, at the end of the message, for a connection that went away. */
const LOST_CONNECTION = /(^|- )(Connection terminated( unexpectedly| due to connection timeout)?|Client has encountered a connection error and is not queryable|Client was closed and is not queryable)$/;

/** Query options (knex `.options()`) that run a constant statement as a named prepared statement
 *  on PostgreSQL: parsed and planned once per connection instead of on every call. PGlite ignores
 *  the name. The text under one name must never change. */
export function prepared(name: string): { name: string } {
  return { name };
}

/** How long a group-commit batch (CallBatcher) on this database waits for more items. PGlite runs
 *  each statement on the event loop, so no request is read meanwhile: without a wait, each batch
 *  holds one item (measured: 295 accepts/s; with 3 ms, 3,791). PostgreSQL's batches fill while
 *  the previous statement is in flight, so they start at once. */
export function batchGatherMs(db: Db): number {
  return isEmbedded(db) ? 3 : 0;
}

/** True when the handle is PGlite, which has a single connection (no advisory-lock sessions). */
export function isEmbedded(db: Db): boolean {
  return db.client.config.client !== 'pg';
}
