// How many session pods a rollout may have down at once (SESSION_ROLLOUT_MAX_UNAVAILABLE), as a
// Deployment's maxUnavailable does for its pods. A new template (image, or a setting the sessions
// read) makes every session pod outdated at the same moment: replaced all together, every WhatsApp
// account would reconnect in the same minute, every session would take its connections and
// replay its commands at once, and a template that does not start would take every instance
// down. With a budget the rollout moves on as new pods become Ready, and stops where they do not.
//
// Level-triggered: what counts as down is read from the pod cache each time (pods terminating or
// not Ready), plus the replacements this process started whose new pod does not exist yet; after
// a restart of the operator the cache alone is the truth again.

export type MaxUnavailable = { count: number } | { percent: number };

/** An outdated pod as the budget sees it: serving, down (not Ready), or ended (Failed). */
export type OutdatedPod = 'up' | 'down' | 'ended';

export interface RolloutBudgetOptions {
  max: MaxUnavailable;
  /** Instances whose session pod is down now (terminating, or not Ready). */
  down: () => Set<string>;
  /** Session pods there are (what a percentage is of). */
  pods: () => number;
  /** Told the instances kept waiting that there is room for now, oldest first: to be looked at again. */
  wake: (ids: string[]) => void;
}

export class RolloutBudget {
  /** Outdated pods stopped by this process whose replacement is not Ready yet. */
  private readonly replacing = new Set<string>();
  /** Outdated pods kept for want of budget, in the order they asked, with how they were then. */
  private readonly waiting = new Map<string, OutdatedPod>();

  constructor(private readonly o: RolloutBudgetOptions) {}

  /**
   * True (and counted) when the instance's outdated pod may be stopped now. `up`: it serves, and
   * goes only while fewer than the limit are down (replacements included). `down` (not Ready): its
   * replacement takes nothing more down, but such replacements still go the limit at a time — a
   * database or NATS restart makes every pod not Ready for a while, and replacing them all at
   * once would put a broken new version on every instance. `ended` (Failed): it never comes back,
   * so it always goes.
   */
  tryReplace(id: string, pod: OutdatedPod): boolean {
    // One counted already (its new pod was not seen Ready before the next template came) goes on.
    if (!this.replacing.has(id) && !hasRoom(pod, this.limit(), this.replacing.size, this.currentlyDown())) {
      this.waiting.set(id, pod);
      return false;
    }
    this.waiting.delete(id);
    this.replacing.add(id);
    return true;
  }

  /** The instance's pod runs the current template and is Ready, or it wants no pod (paused,
   *  deleted): it no longer counts against the budget. */
  settled(id: string): void {
    this.waiting.delete(id);
    if (this.replacing.delete(id)) this.wakeWaiting();
  }

  /** Wakes the waiting instances there is room for now (a pod became Ready or went away), by the
   *  rule tryReplace will apply to them, oldest first. */
  wakeWaiting(): void {
    if (!this.waiting.size) return;
    const limit = this.limit(); // once: it counts the pods
    let replacing = this.replacing.size;
    const down = this.currentlyDown();
    const taken: string[] = [];
    for (const [id, pod] of this.waiting) {
      if (!hasRoom(pod, limit, replacing, down)) continue;
      taken.push(id);
      replacing++;
      down.add(id);
    }
    for (const id of taken) this.waiting.delete(id);
    if (taken.length) this.o.wake(taken);
  }

  private currentlyDown(): Set<string> {
    const down = this.o.down();
    for (const id of this.replacing) down.add(id);
    return down;
  }

  /** At least one: a rollout always moves on. */
  private limit(): number {
    const { max } = this.o;
    return Math.max(1, 'count' in max ? max.count : Math.floor((this.o.pods() * max.percent) / 100));
  }
}

/** The rule of tryReplace: see there. */
function hasRoom(pod: OutdatedPod, limit: number, replacing: number, down: Set<string>): boolean {
  if (pod === 'ended') return true;
  return pod === 'down' ? replacing < limit : down.size < limit;
}

/** SESSION_ROLLOUT_MAX_UNAVAILABLE: a whole number (`10`) or a percentage of the session pods (`10%`). */
export function parseMaxUnavailable(raw: string): MaxUnavailable | undefined {
  const match = /^(\d{1,6})(%?)$/.exec(raw.trim());
  if (!match) return undefined;
  const n = Number(match[1]);
  if (match[2]) return n >= 1 && n <= 100 ? { percent: n } : undefined;
  return n >= 1 ? { count: n } : undefined;
}
