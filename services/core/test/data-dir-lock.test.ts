// One process at a time on an embedded data directory (services/core/src/data-dir-lock.ts), and
// the start of the platform refusing a directory another live server holds, naming DATA_DIR.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DATA_DIR_LOCK_FILE, lockDataDirectory } from '../src/data-dir-lock.ts';
import { loadConfig, openPlatform } from '../src/index.ts';

/** A live Node process other than this one, as another server would be. */
function otherNodeProcess(): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  return new Promise((resolve, reject) => child.once('spawn', () => resolve(child)).once('error', reject));
}

describe('data directory lock', () => {
  let dir: string;
  const lockFile = () => join(dir, DATA_DIR_LOCK_FILE);
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sb-lock-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('is taken with this process id and released', () => {
    const unlock = lockDataDirectory(dir);
    assert.equal(readFileSync(lockFile(), 'utf8'), String(process.pid));
    unlock();
    assert.equal(existsSync(lockFile()), false);
  });

  it('refuses a directory a live process holds, and takes over one whose process is gone', async () => {
    const holder = await otherNodeProcess();
    try {
      writeFileSync(lockFile(), String(holder.pid));
      assert.throws(() => lockDataDirectory(dir), new RegExp(`pid ${holder.pid}`));
    } finally {
      holder.kill('SIGKILL');
      await new Promise((resolve) => holder.once('exit', resolve));
    }
    const unlock = lockDataDirectory(dir); // the holder died without releasing it
    assert.equal(readFileSync(lockFile(), 'utf8'), String(process.pid));
    unlock();
  });

  it('the embedded platform does not start on a directory another server holds, and names DATA_DIR', async () => {
    const holder = await otherNodeProcess();
    try {
      writeFileSync(lockFile(), String(holder.pid));
      const config = loadConfig({ DATA_DIR: dir, LOG_LEVEL: 'silent' });
      await assert.rejects(openPlatform(config, { service: 'test', generateMissingKeys: true, migrate: false }), /^Error: DATA_DIR: cannot be used \(another Switchboard process/);
    } finally {
      holder.kill('SIGKILL');
    }
  });
});
