import assert from 'node:assert/strict';
import { withDeadline } from '../src/deadline.ts';

describe('withDeadline', () => {
  it('answers with the work when it settles in time, success or failure', async () => {
    assert.equal(await withDeadline(Promise.resolve(7), 1000, () => new Error('late')), 7);
    await assert.rejects(withDeadline(Promise.reject(new Error('own failure')), 1000, () => new Error('late')), /own failure/);
  });

  it('gives up with the caller\'s error, and a late failure of the work goes nowhere', async () => {
    const unhandled: unknown[] = [];
    // Only this work's failure counts: other suites in the process may leave their own.
    const onUnhandled = (reason: unknown) => void (reason instanceof Error && reason.message === 'too late' && unhandled.push(reason));
    process.on('unhandledRejection', onUnhandled);
    try {
      const work = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('too late')), 60));
      await assert.rejects(withDeadline(work, 10, () => new RangeError('gave up')), RangeError);
      await new Promise((r) => setTimeout(r, 120));
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
