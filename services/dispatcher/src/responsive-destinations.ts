// Which destinations answer quickly enough to be worth claiming ahead for. A claim waiting behind a
// slow or silent receiver only holds its row (until the lease guard hands it back) and, counted
// against the overall cap of waiting claims, would keep healthy destinations from prefetching. So
// a destination earns its prefetch by answering an attempt quickly, and keeps it while it goes on
// doing so; a destination never seen, or silent for a while, gets only its concurrency.

/** An answer within this is quick. */
export const QUICK_ANSWER_MS = 1000;
/** A destination stays responsive this long after its last quick answer. */
export const RESPONSIVE_FOR_MS = 10_000;

export class ResponsiveDestinations {
  private readonly lastQuickAnswer = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now) {}

  /** An attempt to this destination got an HTTP response (any status) after `tookMs`. */
  answered(key: string, tookMs: number): void {
    if (tookMs <= QUICK_ANSWER_MS) this.lastQuickAnswer.set(key, this.now());
  }

  isResponsive(key: string): boolean {
    const at = this.lastQuickAnswer.get(key);
    if (at === undefined) return false;
    if (this.now() - at <= RESPONSIVE_FOR_MS) return true;
    this.lastQuickAnswer.delete(key);
    return false;
  }
}
