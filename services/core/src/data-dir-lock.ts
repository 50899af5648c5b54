// One process at a time uses an embedded data directory: PGlite takes no lock of its own, so two
// servers started on one DATA_DIR (on different ports, say) would both write to the database
// files. The lock is a file holding its owner's pid and, on Linux, that process's start time,
// created exclusively. A lock whose process is gone (a crash, kill -9) is taken over, and so is
// one naming this very process, which is what a container restarted with the same pid finds, and
// one whose pid now belongs to a process started at another time (the pid was reused).
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { ensureDirectory } from './directories.ts';

export const DATA_DIR_LOCK_FILE = 'switchboard.lock';

/** Takes the lock and returns the function that releases it; throws when a live process holds it. */
export function lockDataDirectory(dataDir: string): () => void {
  ensureDirectory(dataDir, 0o700); // a new one is private; one given is left as its owner set it
  const path = join(dataDir, DATA_DIR_LOCK_FILE);
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o600);
      writeSync(fd, [process.pid, startTimeOf(process.pid)].filter((v) => v !== undefined).join(' '));
      closeSync(fd);
      return () => {
        if (readHolder(path)?.pid === process.pid) unlinkSync(path);
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const holder = readHolder(path);
      if (holder !== undefined && holder.pid !== process.pid && isRunningHolder(holder)) {
        throw new Error(`another Switchboard process (pid ${holder.pid}) is using ${dataDir}; stop it or choose another DATA_DIR`);
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

interface LockHolder {
  pid: number;
  /** Clock ticks after boot at which it started (/proc/<pid>/stat); absent where there is no /proc. */
  startTime?: string;
}

function readHolder(path: string): LockHolder | undefined {
  try {
    const [pidText, startTime] = readFileSync(path, 'utf8').trim().split(/\s+/);
    const pid = Number(pidText);
    return Number.isInteger(pid) && pid > 0 ? { pid, startTime } : undefined;
  } catch {
    return undefined;
  }
}

/** The lock's own process, still running. Where /proc tells, the process with that pid must be
 *  Node and have started when the lock's did: after a reboot, or once pids wrap round, the pid of
 *  a stale lock may belong to another program, or to another Node process. */
function isRunningHolder(holder: LockHolder): boolean {
  try {
    process.kill(holder.pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    if (!readFileSync(`/proc/${holder.pid}/cmdline`, 'utf8').includes('node')) return false;
  } catch {
    return true; // no /proc (macOS): alive is all we can tell
  }
  return holder.startTime === undefined || startTimeOf(holder.pid) === holder.startTime;
}

/** Field 22 of /proc/<pid>/stat, read after the command name's closing parenthesis (the name
 *  itself may hold spaces and parentheses). */
export function startTimeOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}
