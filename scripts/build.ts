// Builds what production runs: one ES module per process in dist/ (gateway, session, dispatcher,
// operator, and server for embedded mode), each started with plain `node dist/<name>.mjs`.
//
// Our own TypeScript (the service and the @switchboard/* workspace packages it imports) is compiled
// and inlined; npm packages stay imports, loaded from node_modules as usual, which keeps them
// where OpenTelemetry's instrumentation expects them. Why a build at all (docs/decisions.md): a
// process started through tsx carries its loader and the transformed sources, about 70 MiB of
// memory per process, and a session runs as one process per instance. Tests import the sources
// through tsx; the cluster suites run these files.
//
//   node --import tsx scripts/build.ts     (make build; make run and the cluster test harness call it)
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type Plugin } from 'esbuild';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const DIST = join(ROOT, 'dist');

export type ServiceName = 'gateway' | 'session' | 'dispatcher' | 'operator' | 'server';

export const ENTRY_POINTS: Record<ServiceName, string> = {
  gateway: 'services/gateway/src/main.ts',
  session: 'services/session/src/main.ts',
  dispatcher: 'services/dispatcher/src/main.ts',
  operator: 'services/operator/src/main.ts',
  server: 'services/server/src/main.ts',
};

const ROOT_PACKAGES = join(ROOT, 'node_modules') + sep;
const RESOLVING = Symbol('resolving');

/** Every import that is neither relative nor one of our workspace packages is an npm package (or a
 *  built-in): left as an import. A package npm installed inside one workspace (services/x/
 *  node_modules) is out of reach from dist/, so its import names the file found from the importer. */
const npmPackagesExternal: Plugin = {
  name: 'npm-packages-external',
  setup(b) {
    b.onResolve({ filter: /^[^./]/ }, async (args) => {
      if (args.pluginData === RESOLVING || args.path.startsWith('@switchboard/')) return undefined;
      if (isBuiltin(args.path)) return { path: args.path, external: true };
      const found = await b.resolve(args.path, { resolveDir: args.resolveDir, kind: args.kind, pluginData: RESOLVING });
      if (found.errors.length > 0 || found.path.startsWith(ROOT_PACKAGES)) return { path: args.path, external: true };
      return { path: relative(DIST, found.path).split(sep).join('/'), external: true };
    });
  },
};

/** Builds every entry point; returns the paths written. Files are written beside their final
 *  name and renamed into place, so a process starting meanwhile never reads half a file. */
export async function buildServices(): Promise<string[]> {
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: ENTRY_POINTS,
    outdir: DIST,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20.19',
    sourcemap: 'linked',
    plugins: [npmPackagesExternal],
    write: false,
    logLevel: 'warning',
  });
  mkdirSync(DIST, { recursive: true });
  for (const file of result.outputFiles) {
    const temporary = `${file.path}.${process.pid}.tmp`;
    writeFileSync(temporary, file.contents);
    renameSync(temporary, file.path);
  }
  return result.outputFiles.map((f) => relative(ROOT, f.path));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const started = Date.now();
  const written = await buildServices();
  console.log(`build: ${written.filter((f) => f.endsWith('.mjs')).join(', ')} (${Date.now() - started} ms)`);
}
