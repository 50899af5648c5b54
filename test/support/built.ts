// The Switchboard processes as production starts them: `node <dir>/<name>.mjs`, built by
// scripts/build.ts once per test run from the current sources. Tests that start a process
// (rather than importing its code) start these files, so what ships is what was tested.
//
// Each test run builds into a directory of its own (dist/test-runs/<pid>): a `make build` or
// another run in the same checkout must not swap the code under a cluster that restarts processes.
import { mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { buildServices, DIST, type ServiceName } from '../../scripts/build.ts';

const RUNS = join(DIST, 'test-runs');
const ABANDONED_MS = 24 * 3600_000;

let built: Promise<string> | undefined;

/** The entry file of one process, built first if this test run has not built yet. */
export async function builtService(name: ServiceName): Promise<string> {
  return join(await (built ??= buildForThisRun()), `${name}.mjs`);
}

async function buildForThisRun(): Promise<string> {
  mkdirSync(RUNS, { recursive: true });
  // Runs that were killed before they could clean up.
  for (const dir of readdirSync(RUNS)) {
    if (Date.now() - statSync(join(RUNS, dir)).mtimeMs > ABANDONED_MS) rmSync(join(RUNS, dir), { recursive: true, force: true });
  }
  const outdir = join(RUNS, String(process.pid));
  process.once('exit', () => rmSync(outdir, { recursive: true, force: true }));
  await buildServices(outdir);
  return outdir;
}
