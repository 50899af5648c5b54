// A work queue of object keys in the style of client-go's: a key waiting in the queue is queued
// once however often it is added (dedupe); a key being processed is never handed to a second
// worker (added again meanwhile, it is processed once more afterwards); failures are retried
// with per-key exponential backoff, and success resets the key's backoff.

export interface WorkQueueOptions {
  /** Processes one key. Return a delay to look at the key again later (polling); throw to retry with backoff. */
  handler: (key: string) => Promise<number | void>;
  concurrency?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  onError?: (key: string, err: unknown, retryInMs: number) => void;
}

export class WorkQueue {
  private readonly queue: string[] = [];
  private readonly queued = new Set<string>();
  private readonly processing = new Set<string>();
  /** Keys added while being processed: they go back into the queue when their worker finishes. */
  private readonly dirty = new Set<string>();
  private readonly timers = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private readonly failures = new Map<string, number>();
  private active = 0;
  private stopped = false;
  private idleWaiters: (() => void)[] = [];

  constructor(private readonly options: WorkQueueOptions) {}

  add(key: string): void {
    if (this.stopped) return;
    if (this.processing.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    this.queued.add(key);
    this.queue.push(key);
    this.pump();
  }

  /** Adds the key after a delay; an earlier pending delay for the same key wins. */
  addAfter(key: string, delayMs: number): void {
    if (this.stopped) return;
    if (delayMs <= 0) return this.add(key);
    const at = Date.now() + delayMs;
    const pending = this.timers.get(key);
    if (pending && pending.at <= at) return;
    if (pending) clearTimeout(pending.timer);
    const timer = setTimeout(() => {
      this.timers.delete(key);
      this.add(key);
    }, delayMs);
    this.timers.set(key, { at, timer });
  }

  /** The backoff the key's next failure would get: base · 2^failures, capped. */
  backoffFor(key: string): number {
    const base = this.options.baseDelayMs ?? 200;
    const max = this.options.maxDelayMs ?? 60_000;
    return Math.min(max, base * 2 ** (this.failures.get(key) ?? 0));
  }

  get length(): number {
    return this.queue.length;
  }

  /** Resolves when no key is queued or being processed (keys waiting out a delay do not count). */
  async idle(): Promise<void> {
    if (this.isIdle()) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  stop(): void {
    this.stopped = true;
    for (const { timer } of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    this.queue.length = 0;
    this.queued.clear();
  }

  private isIdle(): boolean {
    return this.queue.length === 0 && this.active === 0;
  }

  private pump(): void {
    const concurrency = this.options.concurrency ?? 2;
    while (!this.stopped && this.active < concurrency && this.queue.length) {
      const key = this.queue.shift()!;
      this.queued.delete(key);
      this.processing.add(key);
      this.active++;
      void this.process(key);
    }
  }

  private async process(key: string): Promise<void> {
    try {
      const again = await this.options.handler(key);
      this.failures.delete(key);
      if (typeof again === 'number') this.addAfter(key, again);
    } catch (err) {
      const delay = this.backoffFor(key);
      this.failures.set(key, (this.failures.get(key) ?? 0) + 1);
      this.options.onError?.(key, err, delay);
      this.addAfter(key, delay);
    } finally {
      this.processing.delete(key);
      this.active--;
      if (this.dirty.delete(key)) this.add(key);
      this.pump();
      if (this.isIdle()) for (const w of this.idleWaiters.splice(0)) w();
    }
  }
}
