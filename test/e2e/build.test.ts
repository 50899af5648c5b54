// scripts/build.ts: what production runs. Every process starts from its file; lazy parts stay lazy
// (a sandbox session must not load Baileys, a gateway outside Kubernetes not the Kubernetes
// client); chunks of earlier builds go once old, and only those.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildServices, DIST, ENTRY_POINTS, type ServiceName } from '../../scripts/build.ts';

describe('build (scripts/build.ts)', function () {
  this.timeout(60_000);
  let outdir: string;

  before(async () => {
    mkdirSync(DIST, { recursive: true });
    outdir = mkdtempSync(join(DIST, 'build-test-'));
    await buildServices(outdir);
  });
  after(() => rmSync(outdir, { recursive: true, force: true }));

  /** The npm packages a file imports at load time (static imports only). */
  const staticImports = (file: string) => [...readFileSync(join(outdir, file), 'utf8').matchAll(/^import .*? from "([^"]+)";$/gm)].map((m) => m[1]);

  it('starts every process from its file: each loads and checks its configuration', () => {
    for (const name of Object.keys(ENTRY_POINTS) as ServiceName[]) {
      if (name === 'server') continue; // the embedded server needs no configuration; config.test.ts starts it
      const run = spawnSync(process.execPath, [join(outdir, `${name}.mjs`)], { env: { PATH: process.env.PATH }, encoding: 'utf8', timeout: 30_000 });
      assert.equal(run.status, 2, `${name}: ${run.stderr}`);
      assert.match(run.stderr, /^configuration error: /m, name);
    }
  });

  it('keeps lazy imports lazy: Baileys and the Kubernetes client load only when used', () => {
    const chunks = (entry: string): string[] => {
      const seen = new Set<string>();
      const visit = (file: string) => {
        for (const spec of staticImports(file).filter((s) => s.startsWith('./') && !seen.has(s))) {
          seen.add(spec);
          visit(spec);
        }
      };
      visit(entry);
      return [entry, ...seen];
    };
    for (const entry of ['session.mjs', 'server.mjs', 'gateway.mjs']) {
      const loaded = chunks(entry).flatMap(staticImports);
      assert.ok(!loaded.includes('@whiskeysockets/baileys'), `${entry} loads Baileys at start`);
      assert.ok(!loaded.includes('@kubernetes/client-node'), `${entry} loads the Kubernetes client at start`);
      assert.ok(!loaded.some((p) => p.startsWith('@opentelemetry/sdk-node')), `${entry} loads the tracing SDK at start`);
    }
  });

  it('removes chunks of earlier builds once they are an hour old, never the current ones', async () => {
    const old = join(outdir, 'chunk-OLDBUILD.mjs');
    const recent = join(outdir, 'chunk-RECENTBUILD.mjs');
    writeFileSync(old, '');
    writeFileSync(recent, '');
    const twoHoursAgo = new Date(Date.now() - 2 * 3600_000);
    utimesSync(old, twoHoursAgo, twoHoursAgo);
    const written = await buildServices(outdir);
    assert.ok(!existsSync(old), 'an old chunk is removed');
    assert.ok(existsSync(recent), 'a recent one may still be loaded by a process started from its build');
    for (const file of written) assert.ok(existsSync(join(DIST, '..', file)), `${file} is kept`);
  });
});
