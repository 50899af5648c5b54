// Runs async tasks one after another in submission order. Baileys emits events synchronously and
// does not wait for handlers; the driver must still report to its listener in order.
export class SerialQueue {
  private tail: Promise<void> = Promise.resolve();

  constructor(private readonly onError: (error: unknown) => void) {}

  /** Queues a task; a failure is reported to onError and does not stop later tasks. */
  post(task: () => Promise<unknown>): void {
    this.tail = this.tail.then(task).then(
      () => undefined,
      (error) => this.onError(error),
    );
  }

  /** Resolves once everything queued so far has finished. */
  idle(): Promise<void> {
    return this.tail;
  }
}
