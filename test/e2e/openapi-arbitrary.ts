// fast-check arbitraries from the JSON Schemas of an OpenAPI 3.1 document: enough of JSON Schema
// for the documents zod-openapi writes (types, enums, const, lengths, patterns, ranges, objects,
// arrays, anyOf/oneOf, nullable type lists and local $refs). Values it makes satisfy the schema.
import fc from 'fast-check';

type Schema = Record<string, any>;

/** Field-name hints for rules that live in zod refinements, not in the schema (e.g. phone forms). */
const HINTS: Record<string, fc.Arbitrary<unknown>> = {
  phone: fc.oneof(fc.stringMatching(/^\d{8,15}$/), fc.stringMatching(/^\d{1,12}-group$/), fc.stringMatching(/^\d{1,18}@g\.us$/), fc.stringMatching(/^\d{1,15}@lid$/)),
};

export function arbitraryFor(schema: Schema | undefined, root: Schema, name?: string, depth = 0): fc.Arbitrary<unknown> {
  if (!schema || depth > 6) return fc.constant(null);
  if (schema.$ref) return arbitraryFor(resolveRef(root, schema.$ref), root, name, depth + 1);
  if (name && HINTS[name] && (schema.type === 'string' || schema.type === undefined)) return HINTS[name];
  if ('const' in schema) return fc.constant(schema.const);
  if (schema.enum) return fc.constantFrom(...schema.enum);
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives) return fc.oneof(...alternatives.map((s: Schema) => arbitraryFor(s, root, name, depth + 1)));
  if (Array.isArray(schema.type)) return fc.oneof(...schema.type.map((t: string) => arbitraryFor({ ...schema, type: t }, root, name, depth + 1)));
  switch (schema.type) {
    case 'null':
      return fc.constant(null);
    case 'boolean':
      return fc.boolean();
    case 'integer':
      return fc.integer({ min: schema.minimum ?? -1_000_000, max: schema.maximum ?? 1_000_000 });
    case 'number':
      return fc.double({ min: schema.minimum ?? -1e6, max: schema.maximum ?? 1e6, noNaN: true });
    case 'string':
      return stringFor(schema);
    case 'array':
      return fc.array(arbitraryFor(schema.items, root, undefined, depth + 1), { minLength: schema.minItems ?? 0, maxLength: Math.min(schema.maxItems ?? 4, 4) });
    case 'object':
    default:
      return objectFor(schema, root, depth);
  }
}

function stringFor(schema: Schema): fc.Arbitrary<string> {
  const minLength = schema.minLength ?? 0;
  const maxLength = Math.min(schema.maxLength ?? 80, Math.max(minLength, 80));
  if (schema.pattern) {
    return fc.stringMatching(new RegExp(schema.pattern)).filter((s) => s.length >= minLength && s.length <= (schema.maxLength ?? Infinity));
  }
  return fc.string({ minLength, maxLength });
}

function objectFor(schema: Schema, root: Schema, depth: number): fc.Arbitrary<unknown> {
  const properties: Record<string, Schema> = schema.properties ?? {};
  const required = new Set<string>(schema.required ?? []);
  const entries = Object.fromEntries(Object.entries(properties).map(([k, s]) => [k, arbitraryFor(s, root, k, depth + 1)]));
  return fc.record(entries, { requiredKeys: Object.keys(properties).filter((k) => required.has(k)) });
}

function resolveRef(root: Schema, ref: string): Schema {
  if (!ref.startsWith('#/')) throw new Error(`only local $refs are supported: ${ref}`);
  return ref
    .slice(2)
    .split('/')
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((node: any, key) => node?.[key], root);
}

/** The JSON Pointer of a path inside the document (for ajv's `<id>#/...` references). */
export function pointer(...segments: string[]): string {
  return '/' + segments.map((s) => s.replace(/~/g, '~0').replace(/\//g, '~1')).join('/');
}
