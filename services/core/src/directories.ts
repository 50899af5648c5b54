// Creating a data directory and its missing parents. Node's own `mkdirSync(…, { recursive: true })`
// never returns when a parent exists but refuses new entries with ENOENT (under /proc, say), so a
// bad DATA_DIR hung the start instead of failing it; one component at a time fails at once.
import { chmodSync, mkdirSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

/** Creates the directory and its missing parents, all with `mode` when given. */
export function ensureDirectory(path: string, mode?: number): void {
  const missing: string[] = [];
  for (let dir = resolve(path); !exists(dir); dir = dirname(dir)) {
    missing.unshift(dir);
    if (dirname(dir) === dir) break;
  }
  for (const dir of missing) {
    try {
      mkdirSync(dir, { mode });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err; // created meanwhile by another process
    }
  }
  if (!statSync(path).isDirectory()) throw Object.assign(new Error(`EEXIST: file already exists and is not a directory, mkdir '${path}'`), { code: 'EEXIST' });
}

/** A directory only its owner may enter, existing or not: the embedded database writes its files
 *  readable by everyone (as the umask allows), and they hold messages, tokens' hashes and
 *  sessions' credentials. One made by an earlier version is closed too. */
export function ensurePrivateDirectory(path: string): void {
  ensureDirectory(path, 0o700);
  if ((statSync(path).mode & 0o077) !== 0) chmodSync(path, 0o700);
}

function exists(path: string): boolean {
  try {
    statSync(path);
    return true;
  } catch {
    return false;
  }
}
