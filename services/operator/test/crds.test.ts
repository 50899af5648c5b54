// The CRDs themselves (crds/*.yaml): what `kubectl get` shows, short names, the status
// subresource, conditions as a map keyed by type, and a structural schema the API server accepts
// (it rejects a CRD whose schema is not structural). Their CEL rules must compile in cel.ts,
// which the fake API server uses to enforce them.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { compileCel } from './cel.ts';
import { CRD_FILES } from './helpers.ts';

type Obj = Record<string, any>;
const crds = Object.fromEntries(CRD_FILES.map((f) => parseYaml(readFileSync(f, 'utf8'))).map((c: Obj) => [c.spec.names.kind, c]));

/** Where a structural schema breaks the rules of apiextensions.k8s.io/v1 (a subset that catches real mistakes). */
function structuralProblems(s: Obj, path: string, root = false): string[] {
  const out: string[] = [];
  if (!s.type && !s['x-kubernetes-int-or-string'] && !s['x-kubernetes-preserve-unknown-fields']) out.push(`${path}: no type`);
  if (s.properties && s.additionalProperties !== undefined) out.push(`${path}: properties and additionalProperties together`);
  if (s.type === 'array' && !s.items) out.push(`${path}: array without items`);
  for (const k of ['$ref', 'definitions', 'dependencies', 'id']) if (k in s) out.push(`${path}: ${k} is not allowed`);
  if (s['x-kubernetes-list-type'] === 'map') {
    const keys: string[] = s['x-kubernetes-list-map-keys'] ?? [];
    if (!keys.length) out.push(`${path}: list-type map without list-map-keys`);
    for (const k of keys) if (!(s.items?.required ?? []).includes(k) && s.items?.properties?.[k]?.default === undefined) out.push(`${path}: map key ${k} must be required or defaulted`);
  }
  for (const [k, sub] of Object.entries<Obj>(s.properties ?? {})) {
    if (root && k === 'metadata') {
      if (Object.keys(sub).some((key) => key !== 'type') || sub.type !== 'object') out.push('metadata: only `type: object` is allowed at the root');
      continue;
    }
    out.push(...structuralProblems(sub, `${path}.${k}`));
  }
  if (s.items) out.push(...structuralProblems(s.items, `${path}[]`));
  return out;
}

function rules(s: Obj): string[] {
  return [...(s['x-kubernetes-validations'] ?? []).map((r: Obj) => r.rule), ...Object.values<Obj>(s.properties ?? {}).flatMap(rules), ...(s.items ? rules(s.items) : [])];
}

/** The schema node a printer column's simple JSONPath (.a.b or .a.b[?(@.type=="X")].c) points at. */
function schemaAt(schema: Obj, jsonPath: string): Obj | undefined {
  let node: Obj | undefined = schema;
  for (const part of jsonPath.replace(/\[\?\(@\.[a-z]+=="[^"]+"\)\]/g, '[]').split('.').slice(1)) {
    const list = part.endsWith('[]');
    node = node?.properties?.[list ? part.slice(0, -2) : part];
    if (list) node = node?.items;
  }
  return node;
}

describe('CRDs', () => {
  for (const kind of ['Instance', 'Project']) {
    const crd = crds[kind];
    const version = crd.spec.versions[0];
    const schema = version.schema.openAPIV3Schema;

    it(`${kind}: named, namespaced, served with a status subresource and a short name`, () => {
      assert.equal(crd.metadata.name, `${crd.spec.names.plural}.${crd.spec.group}`);
      assert.equal(crd.spec.group, 'switchboard.dev');
      assert.equal(crd.spec.scope, 'Namespaced');
      assert.equal(version.name, 'v1alpha1');
      assert.ok(version.served && version.storage);
      assert.deepEqual(version.subresources, { status: {} });
      assert.equal(crd.spec.names.shortNames.length, 1);
      assert.ok(crd.spec.names.categories.includes('switchboard'));
    });

    it(`${kind}: has a structural schema with conditions as a map keyed by type`, () => {
      assert.deepEqual(structuralProblems(schema, '', true), []);
      const conditions = schema.properties.status.properties.conditions;
      assert.equal(conditions['x-kubernetes-list-type'], 'map');
      assert.deepEqual(conditions['x-kubernetes-list-map-keys'], ['type']);
      assert.deepEqual([...conditions.items.required].sort(), ['lastTransitionTime', 'message', 'reason', 'status', 'type']);
      assert.equal(schema.properties.status.properties.observedGeneration.type, 'integer');
      // metav1.Condition's own validation: a type is a qualified name.
      assert.equal(conditions.items.properties.type.pattern, String.raw`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`);
      assert.deepEqual(conditions.items, crds.Instance.spec.versions[0].schema.openAPIV3Schema.properties.status.properties.conditions.items, 'every kind describes conditions alike');
      assert.ok(schema.properties.spec.properties.displayName.maxLength, 'lengths are bounded');
    });

    it(`${kind}: limits the name (the record id) with CEL rules that compile`, () => {
      const all = rules(schema);
      assert.ok(all.some((r) => r.includes('metadata.name.size() <= 40')));
      assert.ok(all.some((r) => r.includes('metadata.name.matches(')));
      for (const rule of all) assert.doesNotThrow(() => compileCel(rule), rule);
    });

    it(`${kind}: printer columns point at fields of the schema`, () => {
      for (const c of version.additionalPrinterColumns) {
        if (c.jsonPath === '.metadata.creationTimestamp') continue;
        const node = schemaAt(schema, c.jsonPath);
        assert.ok(node, `${c.name}: ${c.jsonPath} is not in the schema`);
        assert.equal(node.type, c.type === 'date' ? 'string' : c.type, `${c.name}: type`);
      }
    });
  }

  it('Instance: kubectl get shows State, Phone, Project and Age; the short name is sbi', () => {
    const version = crds.Instance.spec.versions[0];
    const columns = version.additionalPrinterColumns.map((c: Obj) => `${c.name}=${c.jsonPath}`);
    assert.deepEqual(columns, ['State=.status.state', 'Phone=.status.phone', 'Project=.spec.projectRef', 'Age=.metadata.creationTimestamp']);
    assert.deepEqual(crds.Instance.spec.names.shortNames, ['sbi']);
    assert.deepEqual(crds.Project.spec.names.shortNames, ['sbp']);
    const states = version.schema.openAPIV3Schema.properties.status.properties.state.enum;
    assert.deepEqual(states, ['stopped', 'starting', 'awaiting_scan', 'connected', 'reconnecting', 'logged_out']);
  });
});
