import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CallBatcher } from '../src/call-batcher.ts';
import { batchGatherMs, openDatabase } from '../src/index.ts';

describe('CallBatcher', () => {
  const recording = () => {
    const batches: number[][] = [];
    const handle = async (items: number[]) => {
      batches.push(items);
      await new Promise((r) => setTimeout(r, 5));
      return items.map((n) => n * 10);
    };
    return { batches, handle };
  };

  it('starts a lone item at once; items arriving meanwhile form the next batch; each caller gets its own result', async () => {
    const { batches, handle } = recording();
    const batcher = new CallBatcher(handle, 100);
    const first = batcher.submit(1);
    const rest = [batcher.submit(2), batcher.submit(3)];
    assert.deepEqual(await Promise.all([first, ...rest]), [10, 20, 30]);
    assert.deepEqual(batches, [[1], [2, 3]]);
  });

  it('with gatherMs, a batch waits for more items unless it is full; idle() starts a gathering batch now', async () => {
    const { batches, handle } = recording();
    const batcher = new CallBatcher(handle, 3, 30);
    const gathered = [batcher.submit(1)];
    await new Promise((r) => setTimeout(r, 10));
    gathered.push(batcher.submit(2));
    assert.deepEqual(batches, [], 'still gathering');
    assert.deepEqual(await Promise.all(gathered), [10, 20]);
    assert.deepEqual(batches, [[1, 2]]);

    const full = [4, 5, 6].map((n) => batcher.submit(n)); // a full batch starts without waiting
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(batches[1], [4, 5, 6]);
    await Promise.all(full);

    const late = batcher.submit(7);
    await batcher.idle();
    assert.deepEqual(batches[2], [7]);
    assert.equal(await late, 70);
  });
});

describe('batchGatherMs', () => {
  it('gathers on PGlite (statements run on the event loop), not on PostgreSQL', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sb-gather-'));
    const embedded = openDatabase({ dataDir: dir });
    const server = openDatabase({ databaseUrl: 'postgres://127.0.0.1:5432/test', dataDir: dir });
    try {
      // PGlite starts creating its database when the handle is made; a handle destroyed before
      // that ends leaves it running, and removing its directory then fails it after the test.
      await embedded.raw('select 1');
      assert.ok(batchGatherMs(embedded) > 0);
      assert.equal(batchGatherMs(server), 0);
    } finally {
      await embedded.destroy();
      await server.destroy();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
