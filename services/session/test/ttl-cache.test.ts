// The Baileys driver's caches: bounded, expiring, timer-free.
import assert from 'node:assert/strict';
import { TtlCache } from '../src/drivers/baileys/ttl-cache.ts';

describe('TtlCache', () => {
  it('expires entries on read and drops the oldest past its size', async () => {
    const cache = new TtlCache(40, 3);
    for (const k of ['a', 'b', 'c']) cache.set(k, k.toUpperCase());
    cache.set('a', 'A2'); // rewritten: now the newest
    cache.set('d', 'D');
    assert.deepEqual(['a', 'b', 'c', 'd'].map((k) => cache.get(k)), ['A2', undefined, 'C', 'D']);
    cache.del('c');
    assert.equal(cache.get('c'), undefined);
    await new Promise((resolve) => setTimeout(resolve, 60));
    assert.equal(cache.get('a'), undefined, 'expired');
    cache.set('e', 'E');
    cache.flushAll();
    assert.equal(cache.get('e'), undefined);
  });
});
