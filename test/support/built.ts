// The Switchboard processes as production starts them: `node dist/<name>.mjs`, built by
// scripts/build.ts once per test run from the current sources. Tests that start a process
// (rather than importing its code) start this file, so what ships is what was tested.
import { join } from 'node:path';
import { buildServices, DIST, type ServiceName } from '../../scripts/build.ts';

let built: Promise<string[]> | undefined;

/** The entry file of one process, built first if this test run has not built yet. */
export async function builtService(name: ServiceName): Promise<string> {
  await (built ??= buildServices());
  return join(DIST, `${name}.mjs`);
}
