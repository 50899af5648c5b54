// One process at a time uses an embedded data directory: PGlite takes no lock of its own, so two
// servers started on one DATA_DIR (on different ports, say) would both write to the database
// files. The lock is a file holding its owner's pid, created exclusively. A lock whose process is
// gone (a crash, kill -9) is taken over, and so is one naming this very process, which is what a
// container restarted with the same pid finds.
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { ensureDirectory } from './directories.ts';

export const DATA_DIR_LOCK_FILE = 'switchboard.lock';

/** Takes the lock and returns the function that releases it; throws when a live process holds it. */
export function lockDataDirectory(dataDir: string): () => void {
  ensureDirectory(dataDir);
  const path = join(dataDir, DATA_DIR_LOCK_FILE);
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o600);
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return () => {
        if (readPid(path) === process.pid) unlinkSync(path);
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const holder = readPid(path);
      if (holder !== undefined && holder !== process.pid && isRunningNode(holder)) {
        throw new Error(`another Switchboard process (pid ${holder}) is using ${dataDir}; stop it or choose another DATA_DIR`);
      }
      try {
        unlinkSync(path); // stale: its process is gone
      } catch (unlinkErr) {
        if ((unlinkErr as NodeJS.ErrnoException).code !== 'ENOENT') throw unlinkErr;
      }
    }
  }
  throw new Error(`its lock file ${path} keeps coming back; another process is starting on it`);
}

function readPid(path: string): number | undefined {
  try {
    const pid = Number(readFileSync(path, 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** A live process that is Node (where /proc says which program it is): after a reboot the pid in
 *  a stale lock may belong to something else. */
function isRunningNode(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('node');
  } catch {
    return true; // no /proc (macOS): alive is all we can tell
  }
}
