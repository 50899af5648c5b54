import assert from 'node:assert/strict';
import { WorkQueue } from '../src/work-queue.ts';

describe('operator: work queue', () => {
  it('dedupes queued keys and never processes one key concurrently (re-runs it once after)', async () => {
    const runs: string[] = [];
    const active = new Set<string>();
    let overlap = false;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const queue = new WorkQueue({
      concurrency: 2,
      handler: async (key) => {
        if (active.has(key)) overlap = true;
        active.add(key);
        runs.push(key);
        if (key === 'x' || key === 'y') await gate;
        active.delete(key);
      },
    });
    queue.add('x');
    queue.add('y'); // both workers busy now
    queue.add('a');
    queue.add('a'); // queued twice: processed once
    queue.add('x'); // being processed: processed once more afterwards, not in parallel
    queue.add('x');
    assert.equal(queue.length, 1);
    release();
    await new Promise((r) => setTimeout(r, 20));
    await queue.idle();
    assert.deepEqual([...runs].sort(), ['a', 'x', 'x', 'y']);
    assert.equal(overlap, false);
    queue.stop();
  });

  it('retries failures with per-key exponential backoff and resets it after a success', async () => {
    const times: number[] = [];
    const queue = new WorkQueue({
      baseDelayMs: 20,
      maxDelayMs: 1000,
      handler: async () => {
        times.push(Date.now());
        if (times.length < 4) throw new Error('not yet');
      },
    });
    queue.add('k');
    const deadline = Date.now() + 3000;
    while (times.length < 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    assert.equal(times.length, 4);
    const gaps = times.slice(1).map((t, i) => t - times[i]);
    assert.ok(gaps[0] >= 18 && gaps[1] >= 38 && gaps[2] >= 78, `backoff doubles: ${gaps}`);
    assert.equal(queue.backoffFor('k'), 20, 'success forgets the failures');
    assert.equal(queue.backoffFor('other'), 20, 'backoff is per key');
    queue.stop();
  });
});
