// The Signal key cache the Baileys driver shares between its sockets: bounded, expiring, timer-free.
import assert from 'node:assert/strict';
import { KeyCache } from '../src/drivers/baileys/key-cache.ts';

describe('KeyCache', () => {
  it('expires entries on read and drops the oldest past its size', async () => {
    const cache = new KeyCache(40, 3);
    for (const k of ['a', 'b', 'c']) cache.set(k, k.toUpperCase());
    cache.set('a', 'A2'); // rewritten: now the newest
    cache.set('d', 'D');
    assert.deepEqual(['a', 'b', 'c', 'd'].map((k) => cache.get(k)), ['A2', undefined, 'C', 'D']);
    await new Promise((resolve) => setTimeout(resolve, 60));
    assert.equal(cache.get('a'), undefined);
    assert.equal(cache.size, 2, 'an expired entry read is removed');
    cache.flushAll();
    assert.equal(cache.size, 0);
  });
});
