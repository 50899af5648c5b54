// One process at a time on an embedded data directory (services/core/src/data-dir-lock.ts), key files
// a killed first start leaves, and the start of the platform refusing a directory another live
// server holds, naming DATA_DIR.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DATA_DIR_LOCK_FILE, lockDataDirectory, startTimeOf } from '../src/data-dir-lock.ts';
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

  /** What a lock of `pid` holds: its pid and its start time. */
  const lockOf = (pid: number) => `${pid} ${startTimeOf(pid)}`;

  it('is taken with this process id and start time, and released', () => {
    const unlock = lockDataDirectory(dir);
    assert.match(startTimeOf(process.pid) ?? '', /^\d+$/);
    assert.equal(readFileSync(lockFile(), 'utf8'), lockOf(process.pid));
    unlock();
    assert.equal(existsSync(lockFile()), false);
  });

  it('takes over a lock whose pid now belongs to another Node process (the pid was reused)', async () => {
    const other = await otherNodeProcess();
    try {
      // What a killed server's lock reads after a reboot, its pid now another Node process's.
      writeFileSync(lockFile(), `${other.pid} 1`);
      const unlock = lockDataDirectory(dir);
      assert.equal(readFileSync(lockFile(), 'utf8'), lockOf(process.pid));
      unlock();
      // A lock written before start times were recorded (the pid alone) is still honoured.
      writeFileSync(lockFile(), String(other.pid));
      assert.throws(() => lockDataDirectory(dir), new RegExp(`pid ${other.pid}`));
    } finally {
      other.kill('SIGKILL');
    }
  });

  it('refuses a directory a live process holds, and takes over one whose process is gone', async () => {
    const holder = await otherNodeProcess();
    try {
      writeFileSync(lockFile(), lockOf(holder.pid!));
      assert.throws(() => lockDataDirectory(dir), new RegExp(`pid ${holder.pid}`));
    } finally {
      holder.kill('SIGKILL');
      await new Promise((resolve) => holder.once('exit', resolve));
    }
    const unlock = lockDataDirectory(dir); // the holder died without releasing it
    assert.equal(readFileSync(lockFile(), 'utf8'), lockOf(process.pid));
    unlock();
  });

  it('the embedded platform replaces empty key files (a first start killed while writing them) and shows the new key', async function () {
    this.timeout(30_000);
    writeFileSync(join(dir, 'admin-key'), '');
    writeFileSync(join(dir, 'encryption-key'), '');
    const config = loadConfig({ DATA_DIR: dir, LOG_LEVEL: 'silent' });
    const platform = await openPlatform(config, { service: 'test', generateMissingKeys: true, migrate: false });
    try {
      assert.match(platform.adminKey, /^\S{32,}$/);
      assert.equal(platform.adminKeyGenerated, true, 'nobody has seen it: it is shown');
      assert.equal(readFileSync(join(dir, 'admin-key'), 'utf8').trim(), platform.adminKey);
      assert.equal(Buffer.from(readFileSync(join(dir, 'encryption-key'), 'utf8').trim(), 'base64').length, 32);
      assert.deepEqual(readdirSync(dir).filter((f) => f.endsWith('.new')), [], 'no staging file is left');
    } finally {
      await platform.close();
    }
  });

  it('the embedded platform does not start on a directory another server holds, and names DATA_DIR', async () => {
    const holder = await otherNodeProcess();
    try {
      writeFileSync(lockFile(), lockOf(holder.pid!));
      const config = loadConfig({ DATA_DIR: dir, LOG_LEVEL: 'silent' });
      await assert.rejects(openPlatform(config, { service: 'test', generateMissingKeys: true, migrate: false }), /^Error: DATA_DIR: cannot be used \(another Switchboard process/);
    } finally {
      holder.kill('SIGKILL');
    }
  });
});
