// The driver's bounded, timer-free caches: in front of the sealed Signal key store (Baileys'
// default cache starts an interval that nothing stops, one per socket), and of its look-ups of
// group members and numbers.
import type { CacheStore } from '@whiskeysockets/baileys';

/** Entries expire on read after `ttlMs`; the oldest go first once `maxEntries` are held. */
export class TtlCache implements CacheStore {
  private readonly entries = new Map<string, { value: unknown; at: number }>();

  constructor(
    private readonly ttlMs: number,
    private readonly maxEntries: number,
  ) {}

  get<T>(key: string): T | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (Date.now() - entry.at > this.ttlMs) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.value as T;
  }

  set<T>(key: string, value: T): void {
    this.entries.delete(key); // re-inserted last: Map order is age order
    this.entries.set(key, { value, at: Date.now() });
    if (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
  }

  del(key: string): void {
    this.entries.delete(key);
  }

  flushAll(): void {
    this.entries.clear();
  }
}
