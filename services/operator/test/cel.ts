// A small CEL evaluator for the fake API server: enough of the Common Expression Language for
// the x-kubernetes-validations rules in our CRDs (field access, has(), size(), matches(),
// timestamp(), comparisons, !, &&, ||, ?:). Anything else throws, so a new rule that needs more
// fails the tests loudly instead of passing unchecked.

type Value = unknown;
type Node = (scope: Record<string, Value>) => Value;

class Timestamp {
  constructor(readonly ms: number) {}
  valueOf(): number {
    return this.ms;
  }
}

const TOKEN = /\s*(?:(\d+)|('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|([A-Za-z_][A-Za-z0-9_]*)|(&&|\|\||==|!=|<=|>=|[<>!?:.(),+-]))/y;

function tokenize(source: string): string[] {
  const out: string[] = [];
  TOKEN.lastIndex = 0;
  while (TOKEN.lastIndex < source.trimEnd().length) {
    const at = TOKEN.lastIndex;
    const m = TOKEN.exec(source);
    if (!m) throw new Error(`CEL: cannot read "${source.slice(at)}"`);
    out.push(m[0].trim());
  }
  return out;
}

/** Compiles a rule; the result evaluates it with `self` (and `oldSelf` for transition rules). */
export function compileCel(source: string): (scope: Record<string, Value>) => Value {
  const tokens = tokenize(source);
  let i = 0;
  const peek = () => tokens[i];
  const take = (expected?: string) => {
    const t = tokens[i++];
    if (expected !== undefined && t !== expected) throw new Error(`CEL: expected "${expected}" in ${source}, got "${t}"`);
    return t;
  };

  const ternary = (): Node => {
    const cond = or();
    if (peek() !== '?') return cond;
    take('?');
    const a = ternary();
    take(':');
    const b = ternary();
    return (s) => (cond(s) ? a(s) : b(s));
  };
  const or = (): Node => {
    let left = and();
    while (peek() === '||') {
      take();
      const l = left, r = and();
      left = (s) => Boolean(l(s)) || Boolean(r(s));
    }
    return left;
  };
  const and = (): Node => {
    let left = comparison();
    while (peek() === '&&') {
      take();
      const l = left, r = comparison();
      left = (s) => Boolean(l(s)) && Boolean(r(s));
    }
    return left;
  };
  const comparison = (): Node => {
    const left = additive();
    const op = peek();
    if (!['==', '!=', '<', '<=', '>', '>='].includes(op)) return left;
    take();
    const right = additive();
    return (s) => {
      const a = left(s) as any, b = right(s) as any;
      const eq = a instanceof Timestamp && b instanceof Timestamp ? a.ms === b.ms : JSON.stringify(a) === JSON.stringify(b);
      switch (op) {
        case '==': return eq;
        case '!=': return !eq;
        case '<': return a < b;
        case '<=': return a <= b;
        case '>': return a > b;
        default: return a >= b;
      }
    };
  };
  const additive = (): Node => {
    let left = unary();
    while (peek() === '+' || peek() === '-') {
      const op = take(), l = left, r = unary();
      left = (s) => (op === '+' ? (l(s) as any) + (r(s) as any) : (l(s) as any) - (r(s) as any));
    }
    return left;
  };
  const unary = (): Node => {
    if (peek() === '!') {
      take();
      const inner = unary();
      return (s) => !inner(s);
    }
    return postfix();
  };
  const postfix = (): Node => {
    let node = primary();
    while (peek() === '.') {
      take('.');
      const name = take();
      const base = node;
      if (peek() === '(') {
        const args = callArgs();
        node = (s) => method(base(s), name, args.map((a) => a(s)));
      } else {
        node = select(base, name);
      }
    }
    return node;
  };
  const callArgs = (): Node[] => {
    take('(');
    const args: Node[] = [];
    while (peek() !== ')') {
      args.push(ternary());
      if (peek() === ',') take(',');
    }
    take(')');
    return args;
  };
  const primary = (): Node => {
    const t = take();
    if (t === undefined) throw new Error(`CEL: unexpected end of ${source}`);
    if (t === '(') {
      const inner = ternary();
      take(')');
      return inner;
    }
    if (/^\d+$/.test(t)) return () => Number(t);
    if (/^['"]/.test(t)) {
      const text = t.slice(1, -1).replace(/\\(.)/g, '$1');
      return () => text;
    }
    if (t === 'true' || t === 'false') return () => t === 'true';
    if (t === 'null') return () => null;
    if (t === 'has') {
      // has(a.b.c): is field c present on what a.b evaluates to?
      take('(');
      let base = primary();
      let field = '';
      while (peek() === '.') {
        take('.');
        if (field) base = select(base, field);
        field = take();
      }
      take(')');
      if (!field) throw new Error(`CEL: has() needs a field selection in ${source}`);
      const of = base;
      return (s) => {
        const v = of(s);
        return v != null && typeof v === 'object' && field in v;
      };
    }
    if (t === 'size' || t === 'timestamp') {
      const args = callArgs();
      return (s) => (t === 'size' ? method(args[0](s), 'size', []) : toTimestamp(args[0](s)));
    }
    if (/^[A-Za-z_]/.test(t)) {
      return (s) => {
        if (!(t in s)) throw new Error(`CEL: undeclared reference to '${t}'`);
        return s[t];
      };
    }
    throw new Error(`CEL: unexpected "${t}" in ${source}`);
  };

  const node = ternary();
  if (i !== tokens.length) throw new Error(`CEL: unexpected "${tokens[i]}" in ${source}`);
  return node;
}

function select(base: Node, name: string): Node {
  return (s) => {
    const v = base(s) as Record<string, Value> | undefined;
    if (v == null || typeof v !== 'object' || !(name in v)) throw new Error(`CEL: no such key: ${name}`);
    return v[name];
  };
}

function method(target: Value, name: string, args: Value[]): Value {
  if (name === 'size') {
    if (typeof target === 'string') return [...target].length;
    if (Array.isArray(target)) return target.length;
    if (target && typeof target === 'object') return Object.keys(target).length;
  }
  if (name === 'matches' && typeof target === 'string') return new RegExp(String(args[0])).test(target);
  if (name === 'startsWith' && typeof target === 'string') return target.startsWith(String(args[0]));
  if (name === 'endsWith' && typeof target === 'string') return target.endsWith(String(args[0]));
  throw new Error(`CEL: no such overload: ${typeof target}.${name}()`);
}

function toTimestamp(v: Value): Timestamp {
  const ms = typeof v === 'string' ? Date.parse(v) : NaN;
  if (Number.isNaN(ms)) throw new Error(`CEL: timestamp() of "${String(v)}"`);
  return new Timestamp(ms);
}
