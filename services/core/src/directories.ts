// Creating a data directory and its missing parents. Node's own `mkdirSync(…, { recursive: true })`
// never returns when a parent exists but refuses new entries with ENOENT (under /proc, say), so a
// bad DATA_DIR hung the start instead of failing it; one component at a time fails at once.
import { mkdirSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

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

function exists(path: string): boolean {
  try {
    statSync(path);
    return true;
  } catch {
    return false;
  }
}
