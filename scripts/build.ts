// Builds what production runs: one ES module per process in dist/ (gateway, session, dispatcher,
// operator, and server for embedded mode), each started with plain `node dist/<name>.mjs`.
//
// Our own TypeScript (the service and the @switchboard/* workspace packages it imports) is compiled
// and inlined; npm packages stay imports, loaded from node_modules as usual, which keeps them
// where OpenTelemetry's instrumentation expects them. A lazy import of our own code (the Baileys
// driver, the Kubernetes client) stays lazy: it becomes a chunk file of its own (dist/<name>-<hash>.mjs)
// loaded only when needed. Why a build at all (docs/decisions.md): a process started through tsx carries
// its loader and the transformed sources, tens of MiB per process, and a session runs as one
// process per instance. Tests import the sources through tsx; tests that start a process build
// into a directory of their own run (test/support/built.ts) and start these files.
//
//   node --import tsx scripts/build.ts     (make build; make run calls it)
import { mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import { basename, dirname, join, relative, sep } from 'node:path';
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

/** Chunks of an earlier build are removed once they are this old: a process started from that
 *  build has long loaded the lazy parts it needs. */
const STALE_CHUNK_MS = 3600_000;

const ROOT_PACKAGES = join(ROOT, 'node_modules') + sep;
const RESOLVING = Symbol('resolving');

/** Every import that is neither relative nor one of our workspace packages is an npm package (or a
 *  built-in): left as an import. A package npm installed inside one workspace (services/x/
 *  node_modules) is out of reach from the output directory, so its import names the file found
 *  from the importer. */
function npmPackagesExternal(outdir: string): Plugin {
  return {
    name: 'npm-packages-external',
    setup(b) {
      b.onResolve({ filter: /^[^./]/ }, async (args) => {
        if (args.pluginData === RESOLVING || args.path.startsWith('@switchboard/')) return undefined;
        if (isBuiltin(args.path)) return { path: args.path, external: true };
        const found = await b.resolve(args.path, { resolveDir: args.resolveDir, kind: args.kind, pluginData: RESOLVING });
        if (found.errors.length > 0 || found.path.startsWith(ROOT_PACKAGES)) return { path: args.path, external: true };
        return { path: relative(outdir, found.path).split(sep).join('/'), external: true };
      });
    },
  };
}

/** Builds every entry point into `outdir` (inside the repository, so that npm packages resolve
 *  from its node_modules); returns the paths written. Files are written beside their final name
 *  and renamed into place, chunks before the entry points that import them, so a process
 *  starting meanwhile never reads half a build. */
export async function buildServices(outdir = DIST): Promise<string[]> {
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: ENTRY_POINTS,
    outdir,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    splitting: true,
    platform: 'node',
    format: 'esm',
    target: 'node20.19',
    sourcemap: 'linked',
    plugins: [npmPackagesExternal(outdir)],
    write: false,
    logLevel: 'warning',
  });
  mkdirSync(outdir, { recursive: true });
  const entries = entryFileNames();
  const chunksFirst = [...result.outputFiles].sort((a, b) => Number(entries.has(basename(a.path))) - Number(entries.has(basename(b.path))));
  for (const file of chunksFirst) {
    const temporary = `${file.path}.${process.pid}.tmp`;
    writeFileSync(temporary, file.contents);
    renameSync(temporary, file.path);
  }
  removeStaleChunks(outdir, new Set(result.outputFiles.map((f) => basename(f.path))));
  return result.outputFiles.map((f) => relative(ROOT, f.path));
}

function entryFileNames(): Set<string> {
  return new Set(Object.keys(ENTRY_POINTS).flatMap((name) => [`${name}.mjs`, `${name}.mjs.map`]));
}

/** Chunks (every .mjs but the entry points, named with a content hash) of earlier builds. */
function removeStaleChunks(outdir: string, written: Set<string>): void {
  const entries = entryFileNames();
  for (const name of readdirSync(outdir)) {
    const path = join(outdir, name);
    if (!/\.mjs(\.map)?$/.test(name) || entries.has(name) || written.has(name)) continue;
    if (Date.now() - statSync(path).mtimeMs > STALE_CHUNK_MS) rmSync(path, { force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const started = Date.now();
  const written = await buildServices();
  const entries = Object.keys(ENTRY_POINTS).map((name) => `dist/${name}.mjs`);
  console.log(`build: ${entries.join(', ')} and ${written.filter((f) => f.endsWith('.mjs')).length - entries.length} chunks (${Date.now() - started} ms)`);
}
