// Groups concurrent calls into batches handled by one function — group commit for writes, one
// query for many look-ups: a batch starts at once when none is under way (a lone item waits for
// nothing), and items that arrive while it runs form the next batch. Each caller gets the result
// for its own item.

export class CallBatcher<In, Out> {
  private waiting: { item: In; settle: (out: Out) => void; fail: (err: unknown) => void }[] = [];
  private running: Promise<void> | undefined;

  /** `handleBatch` returns one result per item, in the order given. */
  constructor(
    private readonly handleBatch: (items: In[]) => Promise<Out[]>,
    private readonly maxBatch: number,
  ) {}

  submit(item: In): Promise<Out> {
    return new Promise((settle, fail) => {
      this.waiting.push({ item, settle, fail });
      this.startNext();
    });
  }

  /** Resolves when nothing is waiting or being handled (shutdown, tests). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  private startNext(): void {
    if (this.running || !this.waiting.length) return;
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
