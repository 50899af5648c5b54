// A process started with another ENCRYPTION_KEY than the one its database was written with (a new
// DATA_DIR against an existing DATABASE_URL, a wrong Secret) would start, answer /ready, and then
// fail every sealed token, webhook secret and session credential: 500s, sessions retrying
// forever, webhook deliveries exhausted. It refuses to start instead, naming the variable.
import type { Crypto } from './crypto.ts';
import type { Db } from './db/connect.ts';
import { startStep } from './service-main.ts';

const UNDEFINED_TABLE = '42P01';

export class EncryptionKeyMismatch extends Error {
  constructor() {
    super('the database was written with another key; start with that key (embedded: the encryption-key file of the DATA_DIR that created it; cluster: the Secret the other processes use)');
    this.name = 'EncryptionKeyMismatch';
  }
}

/** The start step every process runs once its database is open (and migrated, where it migrates). */
export function checkEncryptionKeyAtStart(db: Db, crypto: Crypto): Promise<void> {
  return startStep('ENCRYPTION_KEY', 'does not fit this database', () => checkEncryptionKey(db, crypto));
}

/** Records the key's fingerprint on first use and checks it on every later start. A database
 *  written before fingerprints were kept is checked against one of its sealed tokens first. */
export async function checkEncryptionKey(db: Db, crypto: Crypto): Promise<void> {
  const fingerprint = crypto.keyFingerprint();
  let recorded: string | undefined;
  try {
    recorded = await recordedFingerprint(db);
  } catch (err) {
    if ((err as { code?: unknown }).code === UNDEFINED_TABLE) return; // not migrated yet: a session process never migrates, its gateway checks
    throw err;
  }
  if (recorded === undefined) {
    if (!(await opensExistingSeal(db, crypto))) throw new EncryptionKeyMismatch();
    await db.raw('insert into encryption_key_check (id, fingerprint) values (1, ?) on conflict (id) do nothing', [fingerprint]);
    recorded = await recordedFingerprint(db); // a process with another key may have recorded first
  }
  if (recorded !== fingerprint) throw new EncryptionKeyMismatch();
}

async function recordedFingerprint(db: Db): Promise<string | undefined> {
  const row = await db('encryption_key_check').where({ id: 1 }).first('fingerprint');
  return row?.fingerprint;
}

/** True when no token is sealed yet, or the key opens one. */
async function opensExistingSeal(db: Db, crypto: Crypto): Promise<boolean> {
  const row = await db('instances').whereNotNull('token_sealed').first('token_sealed');
  if (!row) return true;
  try {
    crypto.open(row.token_sealed);
    return true;
  } catch {
    return false;
  }
}
