// The WhatsApp Web version source: one read shared, kept for a while, read again after a refusal,
// and Baileys' own version (undefined) while the read fails.
import assert from 'node:assert/strict';
import type { WAVersion } from '@whiskeysockets/baileys';
import { webVersionSource } from '../src/drivers/baileys/web-version.ts';

describe('WhatsApp Web version source', () => {
  function source(answers: Array<WAVersion | 'fails' | 'not latest'>) {
    let clock = 0;
    const signals: AbortSignal[] = [];
    const versions = webVersionSource({
      keepMs: 1000,
      retryAfterMs: 100,
      now: () => clock,
      fetchLatest: async ({ signal }) => {
        signals.push(signal);
        const answer = answers[signals.length - 1];
        if (answer === 'fails') throw new Error('getaddrinfo ENOTFOUND web.whatsapp.com');
        return answer === 'not latest' ? { version: [2, 3000, 0], isLatest: false } : { version: answer, isLatest: true };
      },
    });
    return { versions, signals, advance: (ms: number) => (clock += ms) };
  }

  it('reads once for sessions starting together, keeps the version, and reads again when it is old', async () => {
    const s = source([[2, 3000, 7], [2, 3000, 8]]);
    const [a, b] = await Promise.all([s.versions.current(), s.versions.current()]);
    assert.deepEqual([a, b, s.signals.length], [[2, 3000, 7], [2, 3000, 7], 1]);
    assert.ok(s.signals[0] instanceof AbortSignal, 'the read has a time limit');
    s.advance(999);
    assert.deepEqual(await s.versions.current(), [2, 3000, 7]);
    s.advance(1);
    assert.deepEqual(await s.versions.current(), [2, 3000, 8]);
    assert.equal(s.signals.length, 2);
  });

  it('reads again at once after WhatsApp refused the version, once for all sockets that announced it', async () => {
    const s = source([[2, 3000, 7], [2, 3000, 9], [2, 3000, 10]]);
    await s.versions.current();
    s.versions.refused([2, 3000, 7]);
    assert.deepEqual(await s.versions.current(), [2, 3000, 9]);
    // Other sockets that announced the old version close too: the new read stands.
    s.versions.refused([2, 3000, 7]);
    s.versions.refused(undefined);
    assert.deepEqual([await s.versions.current(), s.signals.length], [[2, 3000, 9], 2]);
  });

  it('gives up a read that takes longer than its time limit', async () => {
    let reads = 0;
    const versions = webVersionSource({
      timeoutMs: 20,
      fetchLatest: ({ signal }) => {
        reads++;
        return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
      },
    });
    assert.equal(await versions.current(), undefined);
    assert.equal(reads, 1);
  });

  it("uses Baileys' own version while the read fails or finds no version, and tries again later", async () => {
    const s = source(['fails', 'not latest', [2, 3000, 5]]);
    assert.equal(await s.versions.current(), undefined);
    assert.equal(await s.versions.current(), undefined, 'not tried again at once');
    assert.equal(s.signals.length, 1);
    s.advance(100);
    assert.equal(await s.versions.current(), undefined);
    s.advance(100);
    assert.deepEqual(await s.versions.current(), [2, 3000, 5]);
  });
});
