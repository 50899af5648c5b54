// Request strings the database cannot store (NUL, unpaired surrogates) are refused up front with
// a 400 naming the field, instead of failing in PostgreSQL as a 500 (DESIGN §8: bad input never
// yields a 5xx). Path ids with them cannot name anything, so they are simply not found.
import { isStorableText, problems, type FieldProblem } from '@switchboard/core';

const MESSAGE = 'must not contain NUL characters or unpaired UTF-16 surrogates';
const MAX_REPORTED = 20;
/** No schema nests deeper; deeper input is refused by the schema, and must not exhaust the stack here. */
const MAX_DEPTH = 32;

export function assertStorableParams(params: Record<string, string>): void {
  if (Object.values(params).some((v) => typeof v === 'string' && !isStorableText(v))) throw problems.notFound('The resource');
}

export function assertStorableInput(value: unknown, where: 'body' | 'query'): void {
  const found: FieldProblem[] = [];
  collect(value, [], found);
  if (found.length > 0) throw problems.validation(found.map((f) => ({ path: f.path || where, message: f.message })));
}

function collect(value: unknown, path: string[], out: FieldProblem[]): void {
  if (out.length >= MAX_REPORTED || path.length > MAX_DEPTH) return;
  if (typeof value === 'string') {
    if (!isStorableText(value)) out.push({ path: path.join('.'), message: MESSAGE });
  } else if (Array.isArray(value)) {
    value.forEach((item, i) => collect(item, [...path, String(i)], out));
  } else if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      if (isStorableText(key)) collect(item, [...path, key], out);
      else out.push({ path: [...path, toPrintable(key)].join('.'), message: `field name ${MESSAGE}` });
    }
  }
}

/** A field name fit to echo back in the error. */
function toPrintable(key: string): string {
  return JSON.stringify(key).slice(1, -1);
}
