// A loopback Kubernetes API server for tests: a real HTTP server that implements the subset of
// the REST API the operator and the gateway use, with the behaviour that matters for them:
// resourceVersion + 409 on stale writes, list/watch with bookmarks and 410 Gone for compacted
// history, the status subresource, finalizers and deletionTimestamp, graceful pod deletion,
// garbage collection of dependents through ownerReferences (asynchronous, after their owner is
// gone; the Background, Foreground and Orphan propagation policies), merge/JSON/apply patches (apply with
// per-manager field ownership and conflicts), and CRD schema validation with defaults and
// x-kubernetes-validations rules (CEL, through the subset in cel.ts; transition rules on update),
// and, for the bearer tokens given a Role, RBAC: a request its rules do not allow is refused with
// 403, as the real server does. Not implemented: admission, field selectors, protobuf,
// authentication (any other token may do anything).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { compileCel } from './cel.ts';

type Obj = Record<string, any>;

interface ResourceType {
  group: string; // '' for the core group
  version: string;
  plural: string;
  kind: string;
  hasStatus: boolean;
  validate?: ValidateFunction;
  /** The version's openAPIV3Schema, for its x-kubernetes-validations rules. */
  schema?: Obj;
}

interface WatchEvent {
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  object: Obj;
  rv: number;
  typeKey: string;
}

interface Watcher {
  typeKey: string;
  namespace?: string;
  labelSelector?: Record<string, string>;
  res: ServerResponse;
  bookmarks: boolean;
  timer?: NodeJS.Timeout;
}

export interface FakeApiServerOptions {
  /** How long a deleted pod stays terminating (kubelet's graceful shutdown); 0 = immediate. */
  podTerminationMs?: number;
  /** Interval of BOOKMARK events on watches that asked for them. */
  bookmarkIntervalMs?: number;
  /** CRD manifests (YAML file paths) whose kinds are served and validated. */
  crdFiles?: string[];
  /** Watch events kept for resuming watches (default 10,000); older ones are compacted. */
  historyLimit?: number;
  /** How long the garbage collector takes to act on a deleted owner (default 50 ms): like the
   *  real one, it works after the DELETE has answered, never within it. */
  garbageCollectionDelayMs?: number;
  /** Bearer token → the rules of its Role in the namespace (RBAC PolicyRules); requests with such
   *  a token are authorized against them. */
  roles?: Record<string, PolicyRule[]>;
}

export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

/** The finalizers through which the garbage collector holds an owner deleted with the Foreground
 *  or Orphan propagation policy, until it has deleted or orphaned the owner's dependents. */
const GC_FINALIZERS: Record<string, string | undefined> = { Background: undefined, Foreground: 'foregroundDeletion', Orphan: 'orphan' };

const BUILTIN: Omit<ResourceType, 'validate'>[] = [
  { group: '', version: 'v1', plural: 'pods', kind: 'Pod', hasStatus: true },
  { group: '', version: 'v1', plural: 'secrets', kind: 'Secret', hasStatus: false },
  { group: '', version: 'v1', plural: 'events', kind: 'Event', hasStatus: false },
  { group: '', version: 'v1', plural: 'configmaps', kind: 'ConfigMap', hasStatus: false },
  { group: 'apps', version: 'v1', plural: 'statefulsets', kind: 'StatefulSet', hasStatus: true },
  { group: 'coordination.k8s.io', version: 'v1', plural: 'leases', kind: 'Lease', hasStatus: false },
];

/** Separates the keys of a field path (label keys contain dots and slashes). */
const SEP = '\u001f';
const MICRO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;

export class FakeApiServer {
  private server?: Server;
  private readonly sockets = new Set<Socket>();
  private readonly types = new Map<string, ResourceType>();
  /** key: typeKey|namespace|name */
  private readonly store = new Map<string, Obj>();
  private readonly history: WatchEvent[] = [];
  private readonly watchers = new Set<Watcher>();
  private rv = 1000;
  /** Events at or below this resourceVersion have been compacted away (watching from them → 410). */
  private compactedThrough = 0;
  private injected: { count: number; match: (method: string, path: string) => boolean; status: number }[] = [];
  private readonly readHooks = new Map<string, { meanwhile: () => Promise<void>; when: (object: Obj) => boolean }>();
  private unavailable = false;
  private port = 0;
  /** Every request as "METHOD path", for assertions. */
  readonly requests: string[] = [];
  /** Every refused request as "METHOD path STATUS" (injected failures excluded). */
  readonly refused: string[] = [];
  /** The garbage collector's work waiting for its delay. */
  private readonly pendingGc = new Set<{ work: () => void; timer: NodeJS.Timeout }>();

  /** Whether the kubelet makes a new pod's container ready at once (a test of readiness turns this
   *  off and marks pods Ready itself, as a real kubelet does once the readiness probe passes). */
  podsReadyAtOnce = true;

  constructor(private readonly options: FakeApiServerOptions = {}) {
    for (const t of BUILTIN) this.types.set(typeKeyOf(t.group, t.version, t.plural), t);
    const ajv = new Ajv({ strict: false, useDefaults: true, allErrors: true });
    (addFormatsModule as unknown as (a: Ajv) => void)(ajv);
    for (const file of options.crdFiles ?? []) {
      const crd = parseYaml(readFileSync(file, 'utf8'));
      for (const v of crd.spec.versions) {
        this.types.set(typeKeyOf(crd.spec.group, v.name, crd.spec.names.plural), {
          group: crd.spec.group,
          version: v.name,
          plural: crd.spec.names.plural,
          kind: crd.spec.names.kind,
          hasStatus: Boolean(v.subresources?.status),
          validate: ajv.compile(v.schema.openAPIV3Schema),
          schema: v.schema.openAPIV3Schema,
        });
      }
    }
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async start(port = this.port): Promise<void> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve) => this.server!.listen(port, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
  }

  /** Stops listening and cuts every connection (the API server goes away); start() resumes on the same port. */
  async stop(): Promise<void> {
    for (const w of this.watchers) clearInterval(w.timer);
    this.watchers.clear();
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.server = undefined;
  }

  /** While true every request fails with 503 (an API server that is up but not serving). */
  setUnavailable(value: boolean): void {
    this.unavailable = value;
  }

  /** The next GET of `path` (that finds the object as `when` wants it) answers with the object as
   *  it is now, but only once `meanwhile` has run: whatever that changes, the reader acts on what it
   *  read before (a concurrent writer). */
  afterNextRead(path: string, meanwhile: () => Promise<void>, when: (object: Obj) => boolean = () => true): void {
    this.readHooks.set(path, { meanwhile, when });
  }

  /** The next `count` requests matching fail with `status` (409 by default, as a concurrent writer would cause). */
  injectFailure(count: number, match: (method: string, path: string) => boolean, status = 409): void {
    this.injected.push({ count, match, status });
  }

  /** Forgets the injected failures not yet used up. */
  clearInjectedFailures(): void {
    this.injected = [];
  }

  /** Injected failures not yet used up. */
  get pendingFailures(): number {
    return this.injected.reduce((n, f) => n + f.count, 0);
  }

  /** Ends every open watch abruptly (connection reset), as when an API server or proxy restarts. */
  breakWatches(): void {
    for (const w of this.watchers) {
      clearInterval(w.timer);
      w.res.socket?.destroy();
    }
    this.watchers.clear();
  }

  /** Forgets the event history, so watches resuming from an older resourceVersion get 410 Gone. */
  compact(): void {
    this.compactedThrough = this.rv;
    this.history.length = 0;
  }

  // ---- direct access for tests (no HTTP) ----

  get(group: string, version: string, plural: string, namespace: string, name: string): Obj | undefined {
    const o = this.store.get(storeKey(typeKeyOf(group, version, plural), namespace, name));
    return o ? clone(o) : undefined;
  }

  list(group: string, version: string, plural: string, namespace?: string): Obj[] {
    const tk = typeKeyOf(group, version, plural);
    return [...this.store.entries()]
      .filter(([k, o]) => k.startsWith(`${tk}|`) && (!namespace || o.metadata.namespace === namespace))
      .map(([, o]) => clone(o));
  }

  /** The garbage collector's delay from now on (a test of what is seen before it acts). */
  setGarbageCollectionDelay(ms: number): void {
    this.options.garbageCollectionDelayMs = ms;
  }

  /** Removes an object at once, finalizers and all: a resource whose finalizers were removed by
   *  hand before any controller acted on its delete. */
  forceDelete(group: string, version: string, plural: string, namespace: string, name: string): void {
    const tk = typeKeyOf(group, version, plural);
    const key = storeKey(tk, namespace, name);
    if (!this.store.has(key)) throw new Error(`no ${plural} ${namespace}/${name}`);
    this.destroy(tk, key);
  }

  /** Changes a stored object as a concurrent writer would (bumps resourceVersion, notifies watches). */
  mutate(group: string, version: string, plural: string, namespace: string, name: string, change: (o: Obj) => void): Obj {
    const tk = typeKeyOf(group, version, plural);
    const key = storeKey(tk, namespace, name);
    const o = clone(this.store.get(key));
    if (!o) throw new Error(`no ${plural} ${namespace}/${name}`);
    change(o);
    return this.save(tk, key, o, 'MODIFIED');
  }

  // ---- HTTP ----

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://x');
    const method = req.method ?? 'GET';
    this.requests.push(`${method} ${url.pathname}${url.searchParams.get('watch') ? '?watch' : ''}`);
    try {
      if (this.unavailable) return sendStatus(res, 503, 'ServiceUnavailable', 'the server is currently unable to handle the request');
      const failure = this.injected.find((f) => f.count > 0 && f.match(method, url.pathname));
      if (failure) {
        failure.count--;
        return sendStatus(res, failure.status, failure.status === 409 ? 'Conflict' : 'InternalError', 'injected failure: the object has been modified; please apply your changes to the latest version and try again');
      }
      const route = this.route(url.pathname);
      if (!route) return sendStatus(res, 404, 'NotFound', `the server could not find the requested resource (${url.pathname})`);
      this.authorize(req.headers.authorization, method, route, url);
      const body = await readBody(req);
      if (!route.name) {
        if (method === 'GET' && ['true', '1'].includes(url.searchParams.get('watch') ?? '')) return this.watch(route, url, res);
        if (method === 'GET') return send(res, 200, this.listObjects(route, url));
        if (method === 'POST') return send(res, 201, this.create(route, parseJson(body)));
        return sendStatus(res, 405, 'MethodNotAllowed', `${method} is not supported here`);
      }
      const contentType = (req.headers['content-type'] ?? '').split(';')[0].trim();
      switch (method) {
        case 'GET': {
          const object = structuredClone(this.read(route));
          const hook = this.readHooks.get(url.pathname);
          if (hook?.when(object)) {
            this.readHooks.delete(url.pathname);
            await hook.meanwhile();
          }
          return send(res, 200, object);
        }
        case 'PUT':
          return send(res, 200, this.replace(route, parseJson(body)));
        case 'PATCH':
          return await this.patch(route, contentType, body, url, res);
        case 'DELETE':
          return send(res, 200, this.remove(route, deleteOptions(url, body)));
        default:
          return sendStatus(res, 405, 'MethodNotAllowed', `${method} is not supported here`);
      }
    } catch (err) {
      if (err instanceof ApiError) {
        this.refused.push(`${method} ${url.pathname} ${err.status}`);
        return sendStatus(res, err.status, err.reason, err.message);
      }
      return sendStatus(res, 500, 'InternalError', String(err));
    }
  }

  /** RBAC for the tokens given a Role: the request's verb on its resource (and subresource) must
   *  be one a rule grants, for that name when the rule lists names. */
  private authorize(authorization: string | undefined, method: string, route: Route, url: URL): void {
    const token = /^Bearer (.+)$/.exec(authorization ?? '')?.[1] ?? '';
    const rules = this.options.roles?.[token];
    if (!rules) return;
    const watch = ['true', '1'].includes(url.searchParams.get('watch') ?? '');
    const verb = ({ GET: route.name ? 'get' : watch ? 'watch' : 'list', POST: 'create', PUT: 'update', PATCH: 'patch', DELETE: 'delete' } as Record<string, string>)[method] ?? method.toLowerCase();
    const resource = route.status ? `${route.type.plural}/status` : route.type.plural;
    const grants = (r: PolicyRule) =>
      r.apiGroups.some((g) => g === '*' || g === route.type.group) &&
      r.resources.some((x) => x === '*' || x === resource) &&
      r.verbs.some((v) => v === '*' || v === verb) &&
      (!r.resourceNames?.length || (route.name !== undefined && r.resourceNames.includes(route.name)));
    if (rules.some(grants)) return;
    throw new ApiError(403, 'Forbidden', `${route.type.plural} is forbidden: User "${token}" cannot ${verb} resource "${resource}" in API group "${route.type.group}" in the namespace "${route.namespace ?? ''}"`);
  }

  private route(path: string): Route | undefined {
    const m =
      /^\/api\/(v1)\/(?:namespaces\/([^/]+)\/)?([^/]+)(?:\/([^/]+))?(?:\/(status))?$/.exec(path) ??
      /^\/apis\/([^/]+\/[^/]+)\/(?:namespaces\/([^/]+)\/)?([^/]+)(?:\/([^/]+))?(?:\/(status))?$/.exec(path);
    if (!m) return undefined;
    const [group, version] = m[1].includes('/') ? m[1].split('/') : ['', m[1]];
    const typeKey = typeKeyOf(group, version, m[3]);
    const type = this.types.get(typeKey);
    if (!type) return undefined;
    if (m[5] && !type.hasStatus) return undefined;
    return { type, typeKey, namespace: m[2], name: m[4], status: Boolean(m[5]) };
  }

  private listObjects(route: Route, url: URL): Obj {
    const selector = parseSelector(url.searchParams.get('labelSelector'));
    const items = this.matching(route.typeKey, route.namespace, selector);
    return { apiVersion: apiVersionOf(route.type), kind: `${route.type.kind}List`, metadata: { resourceVersion: String(this.rv) }, items };
  }

  private matching(typeKey: string, namespace: string | undefined, selector?: Record<string, string>): Obj[] {
    const out: Obj[] = [];
    for (const [k, o] of this.store) {
      if (!k.startsWith(`${typeKey}|`)) continue;
      if (namespace && o.metadata.namespace !== namespace) continue;
      if (!labelsMatch(o, selector)) continue;
      out.push(clone(o));
    }
    return out;
  }

  private watch(route: Route, url: URL, res: ServerResponse): void {
    const selector = parseSelector(url.searchParams.get('labelSelector'));
    const from = url.searchParams.get('resourceVersion') ?? '';
    res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
    const write = (type: string, object: Obj) => res.write(`${JSON.stringify({ type, object })}\n`);
    if (from !== '' && from !== '0' && Number(from) < this.compactedThrough) {
      // Real API servers answer 200 and send a Status ERROR event, then close the stream.
      write('ERROR', statusBody(410, 'Expired', `too old resource version: ${from} (${this.compactedThrough})`));
      res.end();
      return;
    }
    if (from === '' || from === '0') {
      for (const o of this.matching(route.typeKey, route.namespace, selector)) write('ADDED', o);
    } else {
      for (const e of this.history) {
        if (e.rv > Number(from) && e.typeKey === route.typeKey && inScope(e.object, route.namespace, selector)) write(e.type, e.object);
      }
    }
    const watcher: Watcher = { typeKey: route.typeKey, namespace: route.namespace, labelSelector: selector, res, bookmarks: url.searchParams.get('allowWatchBookmarks') === 'true' };
    if (watcher.bookmarks) {
      watcher.timer = setInterval(() => {
        write('BOOKMARK', { apiVersion: apiVersionOf(route.type), kind: route.type.kind, metadata: { resourceVersion: String(this.rv) } });
      }, this.options.bookmarkIntervalMs ?? 1000);
    }
    const timeout = Number(url.searchParams.get('timeoutSeconds') ?? 0);
    if (timeout > 0) setTimeout(() => this.endWatch(watcher), timeout * 1000).unref();
    this.watchers.add(watcher);
    res.on('close', () => this.endWatch(watcher));
  }

  private endWatch(w: Watcher): void {
    clearInterval(w.timer);
    if (this.watchers.delete(w)) w.res.end();
  }

  private read(route: Route): Obj {
    const o = this.store.get(this.keyOf(route));
    if (!o) throw notFound(route);
    return clone(o);
  }

  private create(route: Route, body: Obj): Obj {
    if (!body?.metadata?.name) throw new ApiError(422, 'Invalid', 'metadata.name: Required value: name is required');
    if (body.metadata.namespace && route.namespace && body.metadata.namespace !== route.namespace) {
      throw new ApiError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
    }
    const name = body.metadata.name;
    const key = storeKey(route.typeKey, route.namespace ?? '', name);
    if (this.store.has(key)) throw new ApiError(409, 'AlreadyExists', `${route.type.plural} "${name}" already exists`);
    const o = clone(body);
    o.apiVersion = apiVersionOf(route.type);
    o.kind = route.type.kind;
    if (route.type.hasStatus && route.type.validate) delete o.status; // the status subresource ignores status on create
    o.metadata = {
      ...o.metadata,
      namespace: route.namespace,
      uid: randomUUID(),
      creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
      generation: 1,
    };
    delete o.metadata.deletionTimestamp;
    // The kubelet starts it at once, and its container is ready at once (or when a test says).
    if (route.type.kind === 'Pod') o.status = { phase: 'Running', conditions: [{ type: 'Ready', status: this.podsReadyAtOnce ? 'True' : 'False' }] };
    this.validate(route.type, o);
    return this.save(route.typeKey, key, o, 'ADDED');
  }

  private replace(route: Route, body: Obj): Obj {
    const key = this.keyOf(route);
    const current = this.store.get(key);
    if (!current) throw notFound(route);
    this.checkVersion(route, current, body?.metadata?.resourceVersion, true);
    const next = route.status ? { ...clone(current), status: body.status } : this.mergeMain(route, current, body);
    return this.commit(route, key, current, next);
  }

  private async patch(route: Route, contentType: string, raw: string, url: URL, res: ServerResponse): Promise<void> {
    const key = this.keyOf(route);
    const current = this.store.get(key);
    if (contentType === 'application/apply-patch+yaml') {
      const manager = url.searchParams.get('fieldManager');
      if (!manager) throw new ApiError(400, 'BadRequest', 'PATCH, application/apply-patch+yaml requires fieldManager to be set');
      const applied = parseYaml(raw) as Obj;
      if (!current) {
        const created = this.create(route, applied);
        this.setOwnership(route.typeKey, created, manager, applied);
        return send(res, 201, this.store.get(key)!);
      }
      this.checkVersion(route, current, applied.metadata?.resourceVersion, false);
      const next = this.apply(current, applied, manager, url.searchParams.get('force') === 'true', route.status);
      return send(res, 200, this.commit(route, key, current, next));
    }
    if (!current) throw notFound(route);
    const patch = parseJson(raw);
    let patched: Obj;
    if (contentType === 'application/json-patch+json') patched = jsonPatch(clone(current), patch);
    else if (contentType === 'application/merge-patch+json' || contentType === 'application/strategic-merge-patch+json') patched = mergePatch(clone(current), patch);
    else throw new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml`);
    this.checkVersion(route, current, patched.metadata?.resourceVersion, false);
    const next = route.status ? { ...clone(current), status: patched.status } : this.mergeMain(route, current, patched);
    send(res, 200, this.commit(route, key, current, next));
  }

  private remove(route: Route, options: Obj): Obj {
    const key = this.keyOf(route);
    const current = this.store.get(key);
    if (!current) throw notFound(route);
    const pre = options.preconditions ?? {};
    if ((pre.uid && pre.uid !== current.metadata.uid) || (pre.resourceVersion && pre.resourceVersion !== current.metadata.resourceVersion)) {
      throw new ApiError(409, 'Conflict', `Precondition failed for ${route.type.plural} "${route.name}"`);
    }
    const graceful = route.type.kind === 'Pod' && (this.options.podTerminationMs ?? 0) > 0 && options.gracePeriodSeconds !== 0;
    const gcFinalizer = gcFinalizerFor(options);
    if (current.metadata.finalizers?.length || graceful || gcFinalizer) {
      if (current.metadata.deletionTimestamp) return clone(current);
      const o = clone(current);
      if (gcFinalizer) {
        o.metadata.finalizers = [...(o.metadata.finalizers ?? []), gcFinalizer];
        this.afterGcDelay(() => this.finishPropagation(key, o.metadata.uid, gcFinalizer));
      }
      o.metadata.deletionTimestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
      if (o.metadata.generation !== undefined) o.metadata.generation += 1; // as the real server does on a graceful delete
      o.metadata.deletionGracePeriodSeconds = graceful ? Math.ceil((this.options.podTerminationMs ?? 0) / 1000) : 0;
      const saved = this.save(route.typeKey, key, o, 'MODIFIED');
      if (graceful) {
        setTimeout(() => {
          const still = this.store.get(key);
          if (still && still.metadata.uid === o.metadata.uid && !still.metadata.finalizers?.length) this.destroy(route.typeKey, key);
        }, this.options.podTerminationMs).unref();
      }
      return saved;
    }
    return this.destroy(route.typeKey, key);
  }

  // ---- storage ----

  private keyOf(route: Route): string {
    return storeKey(route.typeKey, route.namespace ?? '', route.name!);
  }

  private checkVersion(route: Route, current: Obj, given: string | undefined, required: boolean): void {
    if (!given) {
      if (required && route.type.validate) throw new ApiError(422, 'Invalid', 'metadata.resourceVersion: Invalid value: 0x0: must be specified for an update');
      return;
    }
    if (given !== current.metadata.resourceVersion) {
      throw new ApiError(409, 'Conflict', `Operation cannot be fulfilled on ${route.type.plural} "${route.name}": the object has been modified; please apply your changes to the latest version and try again`);
    }
  }

  /** A write to the main resource: status is kept when the status subresource exists; immutable metadata is kept. */
  private mergeMain(route: Route, current: Obj, body: Obj): Obj {
    const next = clone(body);
    next.apiVersion = current.apiVersion;
    next.kind = current.kind;
    if (route.type.hasStatus) next.status = clone(current.status);
    const m = current.metadata;
    next.metadata = { ...next.metadata, name: m.name, namespace: m.namespace, uid: m.uid, creationTimestamp: m.creationTimestamp, generation: m.generation, managedFields: m.managedFields };
    if (m.deletionTimestamp) {
      next.metadata.deletionTimestamp = m.deletionTimestamp;
      next.metadata.deletionGracePeriodSeconds = m.deletionGracePeriodSeconds;
      // Finalizers can only be removed from an object being deleted, never added.
      const added = (next.metadata.finalizers ?? []).filter((f: string) => !(m.finalizers ?? []).includes(f));
      if (added.length) throw new ApiError(422, 'Invalid', 'metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted');
    } else {
      delete next.metadata.deletionTimestamp;
    }
    return next;
  }

  private commit(route: Route, key: string, current: Obj, next: Obj): Obj {
    this.validate(route.type, next, current); // fills in the schema's defaults first
    // Compared as the server stores them (keys sorted, defaults filled in): neither the order of
    // the keys sent nor leaving out a defaulted field is a change.
    const same = (a: Obj, b: Obj) => JSON.stringify(sortedKeys(a)) === JSON.stringify(sortedKeys(b));
    if (!same(strip(current), strip(next)) && !route.status) next.metadata.generation = (current.metadata.generation ?? 1) + 1;
    if (same(next, { ...current, metadata: { ...current.metadata, resourceVersion: next.metadata.resourceVersion } })) {
      return clone(current); // a no-op write does not change the resourceVersion
    }
    if (next.metadata.deletionTimestamp && !next.metadata.finalizers?.length) {
      const graceful = route.type.kind === 'Pod' && (this.options.podTerminationMs ?? 0) > 0;
      if (!graceful) {
        this.store.set(key, next);
        return this.destroy(route.typeKey, key);
      }
    }
    return this.save(route.typeKey, key, next, 'MODIFIED');
  }

  private validate(type: ResourceType, o: Obj, old?: Obj): void {
    // Like the real server: fields the schema does not name are dropped, not refused, so a write of
    // a field missing from the CRD is lost (and a status compared with what was written never matches).
    if (type.schema) pruneUnknown(o, type.schema, true);
    if (type.kind === 'Lease') {
      for (const f of ['acquireTime', 'renewTime']) {
        if (o.spec?.[f] !== undefined && !MICRO_TIME.test(o.spec[f])) {
          throw new ApiError(400, 'BadRequest', `Lease in version "v1" cannot be handled as a Lease: spec.${f}: parsing time "${o.spec[f]}" as MicroTime`);
        }
      }
    }
    if (type.kind === 'Secret') {
      for (const [k, v] of Object.entries(o.data ?? {})) {
        if (typeof v !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(v)) throw new ApiError(400, 'BadRequest', `Secret data "${k}" is not base64`);
      }
    }
    if (type.validate && !(type.validate(o) as boolean)) {
      const detail = (type.validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message}`).join('; ');
      throw new ApiError(422, 'Invalid', `${type.kind}.${type.group} "${(o as Obj).metadata?.name}" is invalid: ${detail}`);
    }
    const broken = type.schema ? ruleViolations(type.schema, o, old, '') : [];
    if (broken.length) throw new ApiError(422, 'Invalid', `${type.kind}.${type.group} "${o.metadata?.name}" is invalid: ${broken.join('; ')}`);
  }

  private save(typeKey: string, key: string, given: Obj, type: WatchEvent['type']): Obj {
    // A custom resource is kept as unstructured JSON, which the real server writes back with every
    // object's keys in sorted order (Go's encoding of maps), whatever order the client sent.
    const o = this.types.get(typeKey)?.schema ? sortedKeys(given) : given;
    o.metadata.resourceVersion = String(++this.rv);
    this.store.set(key, o);
    this.publish({ type, object: clone(o), rv: this.rv, typeKey });
    return clone(o);
  }

  private destroy(typeKey: string, key: string): Obj {
    const o = this.store.get(key)!;
    this.store.delete(key);
    const gone = clone(o);
    gone.metadata.resourceVersion = String(++this.rv);
    this.publish({ type: 'DELETED', object: gone, rv: this.rv, typeKey });
    this.afterGcDelay(() => this.collectGarbage(o.metadata.uid));
    return gone;
  }

  private afterGcDelay(work: () => void): void {
    const entry = {
      work,
      timer: setTimeout(() => {
        this.pendingGc.delete(entry);
        work();
      }, this.options.garbageCollectionDelayMs ?? 50).unref(),
    };
    this.pendingGc.add(entry);
  }

  /** Does now what the garbage collector has pending, instead of after its delay. */
  collectGarbageNow(): void {
    for (const entry of [...this.pendingGc]) {
      clearTimeout(entry.timer);
      this.pendingGc.delete(entry);
      entry.work();
    }
  }

  /** The stored objects that name `ownerUid` among their owners, with their store keys. */
  private dependentsOf(ownerUid: string): [string, Obj][] {
    return [...this.store].filter(([, o]) => (o.metadata.ownerReferences ?? []).some((r: Obj) => r.uid === ownerUid));
  }

  private routeOf(key: string, o: Obj): Route {
    const [typeKey] = key.split('|');
    return { type: this.types.get(typeKey)!, typeKey, namespace: o.metadata.namespace, name: o.metadata.name, status: false };
  }

  /** The garbage collector: dependents of a deleted owner are deleted too (background propagation). */
  private collectGarbage(ownerUid: string): void {
    for (const [k, o] of this.dependentsOf(ownerUid)) {
      if (this.store.get(k) === o) this.remove(this.routeOf(k, o), {});
    }
  }

  /** Foreground: the owner stays (deletionTimestamp, `foregroundDeletion`) until its dependents
   *  are gone, their own finalizers and grace periods included. Orphan: the dependents lose their
   *  reference to it, and stay. Then the collector's finalizer is removed, and with it the owner
   *  when no other finalizer holds it. */
  private finishPropagation(key: string, ownerUid: string, finalizer: string): void {
    const owner = this.store.get(key);
    if (!owner || owner.metadata.uid !== ownerUid) return;
    const dependents = this.dependentsOf(ownerUid);
    if (finalizer === 'orphan') {
      for (const [k, o] of dependents) {
        const next = clone(o);
        next.metadata.ownerReferences = o.metadata.ownerReferences.filter((r: Obj) => r.uid !== ownerUid);
        if (!next.metadata.ownerReferences.length) delete next.metadata.ownerReferences;
        this.save(this.routeOf(k, o).typeKey, k, next, 'MODIFIED');
      }
    } else if (dependents.length) {
      for (const [k, o] of dependents) if (!o.metadata.deletionTimestamp) this.remove(this.routeOf(k, o), {});
      return this.afterGcDelay(() => this.finishPropagation(key, ownerUid, finalizer));
    }
    const next = clone(owner);
    next.metadata.finalizers = owner.metadata.finalizers.filter((f: string) => f !== finalizer);
    this.commit(this.routeOf(key, owner), key, owner, next); // gone with its last finalizer
  }

  private publish(e: WatchEvent): void {
    this.history.push(e);
    // Like etcd's compaction: a watch that would need a dropped event gets 410 Gone, never a gap.
    if (this.history.length > (this.options.historyLimit ?? 10_000)) this.compactedThrough = this.history.shift()!.rv;
    for (const w of this.watchers) {
      if (w.typeKey === e.typeKey && inScope(e.object, w.namespace, w.labelSelector)) w.res.write(`${JSON.stringify({ type: e.type, object: e.object })}\n`);
    }
  }

  // ---- server-side apply (simplified: ownership of leaf fields per manager, lists atomic) ----

  private apply(current: Obj, applied: Obj, manager: string, force: boolean, statusOnly: boolean): Obj {
    const owners = ownershipOf(current);
    const appliedFields = leafPaths(statusOnly ? { status: applied.status } : withoutStatus(applied));
    const conflicts: string[] = [];
    for (const [path, value] of appliedFields) {
      const owner = [...owners.entries()].find(([m, fields]) => m !== manager && fields.has(path));
      if (owner && JSON.stringify(getPath(current, path)) !== JSON.stringify(value) && !force) conflicts.push(`conflict with "${owner[0]}": .${path.split(SEP).join('.')}`);
    }
    if (conflicts.length) throw new ApiError(409, 'Conflict', `Apply failed with ${conflicts.length} conflict(s): ${conflicts.join(', ')}`);
    const next = clone(current);
    // Fields this manager applied before but no longer applies are removed, unless another manager owns them.
    for (const path of owners.get(manager) ?? []) {
      if (appliedFields.has(path)) continue;
      if ([...owners.entries()].some(([m, f]) => m !== manager && f.has(path))) continue;
      deletePath(next, path);
    }
    for (const [path, value] of appliedFields) {
      setPath(next, path, value);
      if (force) for (const [m, f] of owners) if (m !== manager) f.delete(path);
    }
    owners.set(manager, new Set(appliedFields.keys()));
    next.metadata.managedFields = [...owners.entries()].map(([m, f]) => ({ manager: m, operation: 'Apply', fieldsV1: [...f] }));
    return statusOnly ? { ...clone(current), status: next.status, metadata: next.metadata } : next;
  }

  private setOwnership(typeKey: string, created: Obj, manager: string, applied: Obj): void {
    const key = storeKey(typeKey, created.metadata.namespace ?? '', created.metadata.name);
    const o = this.store.get(key)!;
    o.metadata.managedFields = [{ manager, operation: 'Apply', fieldsV1: [...leafPaths(withoutStatus(applied)).keys()] }];
  }
}

// ---- helpers ----

const compiledRules = new Map<string, ReturnType<typeof compileCel>>();

/** x-kubernetes-validations of the schema, evaluated where the value is present; rules using oldSelf only on update. */
function ruleViolations(schema: Obj, value: unknown, old: unknown, path: string): string[] {
  if (value === undefined) return [];
  const out: string[] = [];
  for (const { rule, message } of schema['x-kubernetes-validations'] ?? []) {
    if (/\boldSelf\b/.test(rule) && old === undefined) continue;
    let fn = compiledRules.get(rule);
    if (!fn) compiledRules.set(rule, (fn = compileCel(rule)));
    let ok: unknown;
    try {
      ok = fn({ self: value, oldSelf: old });
    } catch (err) {
      ok = String(err);
    }
    if (ok !== true) out.push(`${path || '<root>'}: Invalid value: ${message ?? `failed rule: ${rule}`}`);
  }
  if (value && typeof value === 'object' && !Array.isArray(value)) {
    for (const [k, sub] of Object.entries<Obj>(schema.properties ?? {})) {
      out.push(...ruleViolations(sub, (value as Obj)[k], (old as Obj | undefined)?.[k], `${path}.${k}`));
    }
  }
  if (Array.isArray(value) && schema.items) value.forEach((v, i) => out.push(...ruleViolations(schema.items, v, undefined, `${path}[${i}]`)));
  return out;
}

interface Route {
  type: ResourceType;
  typeKey: string;
  namespace?: string;
  name?: string;
  status: boolean;
}

class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

function typeKeyOf(group: string, version: string, plural: string): string {
  return `${group}/${version}/${plural}`;
}

function storeKey(typeKey: string, namespace: string, name: string): string {
  return `${typeKey}|${namespace}|${name}`;
}

function apiVersionOf(t: ResourceType): string {
  return t.group ? `${t.group}/${t.version}` : t.version;
}

function notFound(route: Route): ApiError {
  return new ApiError(404, 'NotFound', `${route.type.plural}${route.type.group ? '.' + route.type.group : ''} "${route.name}" not found`);
}

function statusBody(code: number, reason: string, message: string): Obj {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
}

function send(res: ServerResponse, status: number, body: Obj): void {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

function sendStatus(res: ServerResponse, status: number, reason: string, message: string): void {
  send(res, status, statusBody(status, reason, message));
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function parseJson(raw: string): any {
  try {
    return JSON.parse(raw);
  } catch {
    throw new ApiError(400, 'BadRequest', 'the request body is not valid JSON');
  }
}

/** The API server's pruning of a structural schema: an object whose schema names its properties
 *  loses the others, unless the schema keeps unknown fields or is a map (additionalProperties).
 *  At the root, apiVersion, kind and metadata are never pruned. */
function pruneUnknown(value: unknown, schema: Obj | undefined, root = false): void {
  if (!schema || schema['x-kubernetes-preserve-unknown-fields']) return;
  if (Array.isArray(value)) return value.forEach((item) => pruneUnknown(item, schema.items));
  if (value === null || typeof value !== 'object') return;
  const object = value as Obj;
  for (const key of Object.keys(object)) {
    if (root && ['apiVersion', 'kind', 'metadata'].includes(key)) continue;
    const field = schema.properties?.[key] ?? (typeof schema.additionalProperties === 'object' ? schema.additionalProperties : undefined);
    if (field) pruneUnknown(object[key], field);
    else if (schema.properties && !schema.additionalProperties) delete object[key];
  }
}

function sortedKeys(v: any): any {
  if (Array.isArray(v)) return v.map(sortedKeys);
  if (v === null || typeof v !== 'object') return v;
  return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortedKeys(v[k])]));
}

function clone<T>(v: T): T {
  return v === undefined ? v : JSON.parse(JSON.stringify(v));
}

function parseSelector(raw: string | null): Record<string, string> | undefined {
  if (!raw) return undefined;
  const out: Record<string, string> = {};
  for (const part of raw.split(',')) {
    const [k, v] = part.split('=');
    out[k.trim()] = (v ?? '').trim();
  }
  return out;
}

function labelsMatch(o: Obj, selector?: Record<string, string>): boolean {
  if (!selector) return true;
  return Object.entries(selector).every(([k, v]) => o.metadata?.labels?.[k] === v);
}

function inScope(o: Obj, namespace: string | undefined, selector?: Record<string, string>): boolean {
  return (!namespace || o.metadata.namespace === namespace) && labelsMatch(o, selector);
}

/** The object without the fields that do not count as a spec change (metadata, status). */
function strip(o: Obj): Obj {
  const { metadata: _m, status: _s, ...rest } = o;
  return rest;
}

function withoutStatus(o: Obj): Obj {
  const { status: _s, apiVersion: _a, kind: _k, ...rest } = o;
  const meta = { ...(rest.metadata ?? {}) };
  for (const f of ['name', 'namespace', 'resourceVersion', 'uid', 'managedFields', 'creationTimestamp', 'generation']) delete meta[f];
  return { ...rest, metadata: meta };
}

function mergePatch(target: any, patch: any): any {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out = target && typeof target === 'object' && !Array.isArray(target) ? target : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

function jsonPatch(doc: Obj, ops: Obj[]): Obj {
  if (!Array.isArray(ops)) throw new ApiError(400, 'BadRequest', 'a JSON patch must be an array');
  for (const op of ops) {
    const parts = String(op.path).split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
    const last = parts.pop()!;
    let parent: any = doc;
    for (const p of parts) {
      if (parent?.[p] === undefined) throw new ApiError(422, 'Invalid', `the path ${op.path} does not exist`);
      parent = parent[p];
    }
    const index = Array.isArray(parent) ? (last === '-' ? parent.length : Number(last)) : last;
    switch (op.op) {
      case 'test':
        if (JSON.stringify(parent[index]) !== JSON.stringify(op.value)) throw new ApiError(422, 'Invalid', `the test of ${op.path} failed`);
        break;
      case 'remove':
        if (parent[index] === undefined) throw new ApiError(422, 'Invalid', `the path ${op.path} does not exist`);
        if (Array.isArray(parent)) parent.splice(index as number, 1);
        else delete parent[index];
        break;
      case 'add':
        if (Array.isArray(parent)) parent.splice(index as number, 0, op.value);
        else parent[index] = op.value;
        break;
      case 'replace':
        if (parent[index] === undefined) throw new ApiError(422, 'Invalid', `the path ${op.path} does not exist`);
        parent[index] = op.value;
        break;
      default:
        throw new ApiError(400, 'BadRequest', `unsupported JSON patch op ${op.op}`);
    }
  }
  return doc;
}

/** Leaf fields of an applied configuration as dotted paths (arrays are atomic leaves). */
function leafPaths(o: Obj, prefix = '', out = new Map<string, unknown>()): Map<string, unknown> {
  for (const [k, v] of Object.entries(o ?? {})) {
    const path = prefix ? `${prefix}${SEP}${k}` : k;
    if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length) leafPaths(v, path, out);
    else out.set(path, v);
  }
  return out;
}

function ownershipOf(o: Obj): Map<string, Set<string>> {
  const owners = new Map<string, Set<string>>();
  for (const e of o.metadata.managedFields ?? []) owners.set(e.manager, new Set(e.fieldsV1 ?? []));
  return owners;
}

function getPath(o: Obj, path: string): unknown {
  return path.split(SEP).reduce<any>((v, k) => (v == null ? undefined : v[k]), o);
}

function setPath(o: Obj, path: string, value: unknown): void {
  const parts = path.split(SEP);
  let cur: any = o;
  for (const p of parts.slice(0, -1)) cur = cur[p] && typeof cur[p] === 'object' ? cur[p] : (cur[p] = {});
  cur[parts.at(-1)!] = clone(value);
}

function deletePath(o: Obj, path: string): void {
  const parts = path.split(SEP);
  const parent = getPath(o, parts.slice(0, -1).join(SEP)) as any;
  if (parts.length === 1) delete o[parts[0]];
  else if (parent && typeof parent === 'object') delete parent[parts.at(-1)!];
}

/** DeleteOptions come in the body or, as client-node sends gracePeriodSeconds, the query; the query wins. */
function deleteOptions(url: URL, body: string): Obj {
  const options: Obj = body ? parseJson(body) : {};
  const grace = url.searchParams.get('gracePeriodSeconds');
  if (grace !== null) options.gracePeriodSeconds = Number(grace);
  const policy = url.searchParams.get('propagationPolicy');
  if (policy !== null) options.propagationPolicy = policy;
  const orphan = url.searchParams.get('orphanDependents');
  if (orphan !== null) options.orphanDependents = orphan === 'true';
  return options;
}

/** The garbage collector's finalizer for the delete's propagation policy (none for Background,
 *  the default; the deprecated orphanDependents means Orphan). */
function gcFinalizerFor(options: Obj): string | undefined {
  const policy = options.propagationPolicy ?? (options.orphanDependents === true ? 'Orphan' : 'Background');
  if (!Object.hasOwn(GC_FINALIZERS, policy)) throw new ApiError(422, 'Invalid', `DeleteOptions.propagationPolicy: Unsupported value: "${policy}": supported values: "Foreground", "Background", "Orphan"`);
  return GC_FINALIZERS[policy];
}
