// Between scenarios: what one scenario leaves behind (PostgreSQL writing out the hundreds of
// thousands of rows an accept run stored, autovacuum of its tables, the drop of its database, a
// process still exiting) must not land in the next scenario's window. A checkpoint flushes now;
// then the run waits until both cores are quiet for a second (I/O wait counts as busy: it is the
// flush still going), or gives up after 30 s and says so.
import { readFileSync } from 'node:fs';
import knexFactory from 'knex';
import { PG_ADMIN_URL } from '../support/services.ts';

const QUIET_BUSY_SHARE = 0.15;
const QUIET_SAMPLES = 4;
const SAMPLE_MS = 250;
const GIVE_UP_MS = 30_000;

export async function settleMachine(log: (line: string) => void): Promise<void> {
  const started = Date.now();
  await checkpoint().catch((err: unknown) => log(`checkpoint failed (${String(err)}); waiting for a quiet machine anyway`));
  let previous = cpuTimes();
  let quiet = 0;
  let busy = 1;
  while (Date.now() - started < GIVE_UP_MS) {
    await new Promise((r) => setTimeout(r, SAMPLE_MS));
    const now = cpuTimes();
    const total = now.total - previous.total;
    busy = total > 0 ? 1 - (now.idle - previous.idle) / total : 0;
    previous = now;
    quiet = busy < QUIET_BUSY_SHARE ? quiet + 1 : 0;
    if (quiet >= QUIET_SAMPLES) return log(`machine quiet after ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }
  log(`machine still ${(busy * 100).toFixed(0)} % busy after ${GIVE_UP_MS / 1000} s; the next figures may be low`);
}

async function checkpoint(): Promise<void> {
  const admin = knexFactory({ client: 'pg', connection: PG_ADMIN_URL, pool: { min: 0, max: 1 } });
  try {
    await admin.raw('CHECKPOINT');
  } finally {
    await admin.destroy();
  }
}

/** All CPUs' time since boot (/proc/stat, in ticks). */
function cpuTimes(): { idle: number; total: number } {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0].trim().split(/\s+/).slice(1).map(Number);
  const total = fields.slice(0, 8).reduce((a, b) => a + b, 0); // guest time is already in user
  return { idle: fields[3], total };
}
