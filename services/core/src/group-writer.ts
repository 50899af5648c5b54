// Group commit for concurrent writers: a batch starts at once when none is under way (a lone item
// waits for nothing), and items that arrive while it runs form the next batch. Each caller gets
// the result for its own item.

export class GroupWriter<In, Out> {
  private waiting: { item: In; settle: (out: Out) => void; fail: (err: unknown) => void }[] = [];
  private writing: Promise<void> | undefined;

  /** `writeBatch` returns one result per item, in the order given. */
  constructor(
    private readonly writeBatch: (items: In[]) => Promise<Out[]>,
    private readonly maxBatch: number,
  ) {}

  submit(item: In): Promise<Out> {
    return new Promise((settle, fail) => {
      this.waiting.push({ item, settle, fail });
      this.startWriting();
    });
  }

  /** Resolves when nothing is waiting or being written (shutdown, tests). */
  async idle(): Promise<void> {
    while (this.writing) await this.writing;
  }

  private startWriting(): void {
    if (this.writing || !this.waiting.length) return;
    this.writing = this.writeNext().finally(() => {
      this.writing = undefined;
      this.startWriting();
    });
  }

  private async writeNext(): Promise<void> {
    const batch = this.waiting.splice(0, this.maxBatch);
    try {
      const results = await this.writeBatch(batch.map((w) => w.item));
      batch.forEach((w, i) => w.settle(results[i]));
    } catch (err) {
      for (const w of batch) w.fail(err);
    }
  }
}
