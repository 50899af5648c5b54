// An informer that keeps running: client-node's ListWatch (list, then watch from the list's
// resourceVersion, relist on 410 Gone) plus what it lacks for a controller: it asks for watch
// bookmarks (so a resumed watch starts from a recent resourceVersion) and a server-side watch
// timeout (so a connection that died silently is replaced within minutes), restarts with backoff
// after an error (ListWatch stops for good on any error other than 410), and resyncs — hands
// every cached object to the handler again — at a fixed interval, so a missed event or a failed
// reconcile that was dropped never leaves an object unreconciled for long.
import { ListWatch, Watch, type KubeConfig, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';

export interface InformerOptions<T extends KubernetesObject> {
  kubeConfig: KubeConfig;
  /** API path of the collection, e.g. /apis/switchboard.dev/v1alpha1/namespaces/ns/instances */
  path: string;
  list: () => Promise<KubernetesListObject<T>>;
  labelSelector?: string;
  /** Called for every add, update, delete and resync, with the object's newest known state. */
  onObject: (obj: T, deleted: boolean) => void;
  resyncMs?: number;
  restartMinMs?: number;
  restartMaxMs?: number;
  /** Server-side timeout of each watch request; default 5–10 min, randomised like client-go's. */
  watchTimeoutSeconds?: () => number;
  onError?: (err: unknown, restartInMs: number) => void;
}

export class ResilientInformer<T extends KubernetesObject> {
  private readonly listWatch: ListWatch<T>;
  private restartTimer?: NodeJS.Timeout;
  private resyncTimer?: NodeJS.Timeout;
  private failures = 0;
  /** When the current run (the first start or the last restart) began (Date.now()). */
  private startedAt = 0;
  private synced = false;
  private running = false;

  constructor(private readonly options: InformerOptions<T>) {
    const list = async () => {
      const result = await options.list();
      this.synced = true;
      return result;
    };
    this.listWatch = new ListWatch<T>(options.path, new BookmarkWatch(options.kubeConfig, options.watchTimeoutSeconds ?? (() => 300 + Math.floor(Math.random() * 300))), list, false, options.labelSelector);
    this.listWatch.on('add', (o) => options.onObject(o, false));
    this.listWatch.on('update', (o) => options.onObject(o, false));
    this.listWatch.on('delete', (o) => options.onObject(o, true));
    this.listWatch.on('error', (err) => this.scheduleRestart(err));
  }

  async start(): Promise<void> {
    this.running = true;
    this.startedAt = Date.now();
    await this.listWatch.start();
    if (!this.running) return; // stopped while listing
    const resyncMs = this.options.resyncMs ?? 300_000;
    this.resyncTimer = setInterval(() => this.resync(), resyncMs);
  }

  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.restartTimer);
    clearInterval(this.resyncTimer);
    await this.listWatch.stop();
  }

  /** True once the first list has completed: before that an absent object may merely be unseen. */
  get hasSynced(): boolean {
    return this.synced;
  }

  get(name: string, namespace?: string): T | undefined {
    return this.listWatch.get(name, namespace);
  }

  list(namespace?: string): readonly T[] {
    return this.listWatch.list(namespace);
  }

  resync(): void {
    for (const o of this.listWatch.list()) this.options.onObject(o, false);
  }

  private scheduleRestart(err: unknown): void {
    if (!this.running) return;
    const min = this.options.restartMinMs ?? 500;
    const max = this.options.restartMaxMs ?? 30_000;
    // A run that stayed up longer than the longest wait earns a fast restart again; one refused at
    // once (an API server down, a watch RBAC forbids) keeps backing off. Not ListWatch's 'connect':
    // it fires before each attempt, not once one works. (A restart resumes the watch without a
    // new list, so a successful list would not tell either.)
    if (Date.now() - this.startedAt > max) this.failures = 0;
    const delay = Math.min(max, min * 2 ** this.failures);
    this.failures++;
    this.options.onError?.(err, delay);
    clearTimeout(this.restartTimer);
    this.restartTimer = setTimeout(() => {
      if (!this.running) return;
      this.startedAt = Date.now();
      void this.listWatch.start();
    }, delay);
  }
}

/** client-node's Watch with bookmarks and a timeout requested (ListWatch passes only resourceVersion and selectors). */
class BookmarkWatch extends Watch {
  constructor(
    kubeConfig: KubeConfig,
    private readonly timeoutSeconds: () => number,
  ) {
    super(kubeConfig);
  }

  override watch(path: string, queryParams: Record<string, string | number | boolean | undefined>, callback: (phase: string, apiObj: any, watchObj?: any) => void, done: (err: any) => void): Promise<AbortController> {
    // The API server ends the watch after timeoutSeconds; ListWatch then resumes from the last resourceVersion.
    return super.watch(path, { ...queryParams, allowWatchBookmarks: true, timeoutSeconds: this.timeoutSeconds() }, callback, done);
  }
}
