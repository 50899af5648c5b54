// Groups concurrent calls into batches handled by one function — group commit for writes, one
// query for many look-ups: a batch starts at once when none is under way (a lone item waits for
// nothing), and items that arrive while it runs form the next batch. Each caller gets the result
// for its own item. With `gatherMs`, a batch that is not full first waits that long for more
// items: fewer, fuller statements for a little latency — for writes nobody waits on, and on
// PGlite, which runs each statement on the event loop itself, so that without the wait no
// request is read while a batch runs and every batch holds one item.

export class CallBatcher<In, Out> {
  private waiting: { item: In; settle: (out: Out) => void; fail: (err: unknown) => void }[] = [];
  private running: Promise<void> | undefined;
  private gathering: NodeJS.Timeout | undefined;

  /** `handleBatch` returns one result per item, in the order given. `gatherMs`: how long a batch
   *  that is not full waits for more items before it starts (0: it starts at once). */
  constructor(
    private readonly handleBatch: (items: In[]) => Promise<Out[]>,
    private readonly maxBatch: number,
    private readonly gatherMs = 0,
  ) {}

  submit(item: In): Promise<Out> {
    return new Promise((settle, fail) => {
      this.waiting.push({ item, settle, fail });
      this.startNext();
    });
  }

  /** Resolves when nothing is waiting or being handled (shutdown, tests); a gathering batch starts now. */
  async idle(): Promise<void> {
    this.startNext(true);
    while (this.running) await this.running;
  }

  private startNext(gathered = false): void {
    if (this.running || !this.waiting.length) return;
    if (!gathered && this.gatherMs > 0 && this.waiting.length < this.maxBatch) {
      this.gathering ??= setTimeout(() => this.startNext(true), this.gatherMs);
      return;
    }
    clearTimeout(this.gathering);
    this.gathering = undefined;
    this.running = this.runNext().finally(() => {
      this.running = undefined;
      this.startNext();
    });
  }

  private async runNext(): Promise<void> {
    const batch = this.waiting.splice(0, this.maxBatch);
    try {
      const results = await this.handleBatch(batch.map((w) => w.item));
      batch.forEach((w, i) => w.settle(results[i]));
    } catch (err) {
      for (const w of batch) w.fail(err);
    }
  }
}
