// The WhatsApp Web version a socket announces. Baileys ships a fixed one, and WhatsApp refuses
// versions it has retired (close 405), after which every reconnect would be refused the same way.
// So each socket announces the current version, read from WhatsApp Web (shared by every session
// of the process, read again after a while or a 405); when it cannot be read (no route to the
// internet), Baileys' own is used, and the read is not tried again for a while.
import { fetchLatestWaWebVersion, type WAVersion } from '@whiskeysockets/baileys';

export interface WebVersionSource {
  /** The version to announce; undefined: Baileys' own. */
  current(): Promise<WAVersion | undefined>;
  /** WhatsApp refused `version` (undefined: Baileys' own), which a socket announced: read the
   *  version again before the next socket, unless one read since then already replaced it. */
  refused(version: WAVersion | undefined): void;
}

export interface WebVersionOptions {
  /** Reads the latest version (Baileys' fetchLatestWaWebVersion); tests pass their own. */
  fetchLatest?: (options: { signal: AbortSignal }) => Promise<{ version: WAVersion; isLatest: boolean }>;
  /** How long a version read is used (default 6 h). */
  keepMs?: number;
  /** How long after a failed read Baileys' own version is used before trying again (default 10 min). */
  retryAfterMs?: number;
  /** How long a read may take (default 5 s): a socket waits for it. */
  timeoutMs?: number;
  now?: () => number;
}

export function webVersionSource(opts: WebVersionOptions = {}): WebVersionSource {
  const fetchLatest = opts.fetchLatest ?? ((o) => fetchLatestWaWebVersion(o));
  const keepMs = opts.keepMs ?? 6 * 3600_000;
  const retryAfterMs = opts.retryAfterMs ?? 600_000;
  const timeoutMs = opts.timeoutMs ?? 5_000;
  const now = opts.now ?? Date.now;
  let known: { version: WAVersion | undefined; until: number } | undefined;
  let reading: Promise<WAVersion | undefined> | undefined;

  const read = async (): Promise<WAVersion | undefined> => {
    const latest = await fetchLatest({ signal: AbortSignal.timeout(timeoutMs) }).catch(() => undefined);
    const version = latest?.isLatest ? latest.version : undefined;
    known = { version, until: now() + (version ? keepMs : retryAfterMs) };
    return version;
  };

  return {
    current() {
      if (known && now() < known.until) return Promise.resolve(known.version);
      // Sessions starting together share one read.
      reading ??= read().finally(() => (reading = undefined));
      return reading;
    },
    refused(version) {
      if (known && sameVersion(known.version, version)) known = undefined;
    },
  };
}

function sameVersion(a: WAVersion | undefined, b: WAVersion | undefined): boolean {
  return a === b || (a !== undefined && b !== undefined && a.every((part, i) => part === b[i]));
}
