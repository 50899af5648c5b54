import assert from 'node:assert/strict';
import { newId, newMessengerId, newResourceId, RESOURCE_ID } from '../src/ids.ts';

describe('ids', () => {
  it('newId: prefix, time order, 12 random base-36 characters, no repeats', () => {
    const ids = Array.from({ length: 5000 }, () => newId('msg'));
    for (const id of ids) assert.match(id, /^msg_[0-9a-z]{21}$/);
    assert.equal(new Set(ids).size, ids.length);
    const first = newId('msg');
    const later = (() => {
      const until = Date.now() + 2;
      while (Date.now() < until);
      return newId('msg');
    })();
    assert.ok(first.slice(0, 13) < later.slice(0, 13), 'the time part sorts by creation');
  });

  it('newId: ids made in one millisecond sort in the order they were made', () => {
    // Thousands of ids take a few milliseconds, so most share theirs with the previous id.
    const ids = Array.from({ length: 5000 }, (_, i) => newId(i % 2 ? 'evt' : 'msg').slice(4));
    const sharing = ids.filter((id, i) => i > 0 && id.slice(0, 9) === ids[i - 1].slice(0, 9)).length;
    assert.ok(sharing > 1000, `${sharing} ids shared a millisecond`);
    for (let i = 1; i < ids.length; i++) assert.ok(ids[i - 1] < ids[i], `${ids[i - 1]} before ${ids[i]}`);
  });

  it('newResourceId is a Kubernetes name; newMessengerId is 3EB0 + 18 upper-case hex digits, the shape of WhatsApp Web ids', () => {
    for (let i = 0; i < 1000; i++) {
      assert.match(newResourceId('inst'), RESOURCE_ID);
      assert.match(newMessengerId(), /^3EB0[0-9A-F]{18}$/);
    }
  });

  it('draws every character about equally often (no modulo bias), across pool refills', () => {
    const counts = new Map<string, number>();
    const n = 20_000; // × 12 characters: many 4 KiB refills
    // newResourceId is all random characters (newId's continue the previous id within a millisecond).
    for (let i = 0; i < n; i++) for (const c of newResourceId('inst').slice(5, 17)) counts.set(c, (counts.get(c) ?? 0) + 1);
    assert.equal(counts.size, 36);
    const expected = (n * 12) / 36;
    // With bias the first 4 characters ('0'–'3') would be drawn 8/256 instead of 1/36 of the
    // time: +12.5 % (7500 vs 6667). One count's standard deviation is ≈ 80 (1.2 %): a 5 % bound
    // (4.1 σ) failed about one run in 800 by chance alone; 8 % (6.6 σ) never does, and the bias
    // still lands ≥ 3.5 σ beyond it.
    for (const [c, k] of counts) assert.ok(Math.abs(k - expected) / expected < 0.08, `${c}: ${k} vs ${expected.toFixed(0)}`);
  });
});
