// A bounded memo for pure functions of a string that every attempt would otherwise recompute (a
// sealed secret's plaintext, a URL's parse). Bounded by clearing when full: simpler than LRU and
// enough, since the working set (instances, destinations delivering now) is far smaller.

export class RecentValues<T> {
  private readonly values = new Map<string, T>();

  constructor(
    private readonly compute: (key: string) => T,
    private readonly max = 4096,
  ) {}

  /** compute(key), remembered; a computation that throws is not remembered. */
  get(key: string): T {
    let value = this.values.get(key);
    if (value === undefined) {
      value = this.compute(key);
      if (this.values.size >= this.max) this.values.clear();
      this.values.set(key, value);
    }
    return value;
  }
}
