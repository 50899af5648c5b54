// Request strings the database cannot store (NUL, unpaired surrogates) are refused up front with
// a 400 naming the field, instead of failing in PostgreSQL as a 500 (DESIGN §8: bad input never
// yields a 5xx). Path ids with them cannot name anything, so they are simply not found.
import { isStorableText, problems, type FieldProblem } from '@switchboard/core';

const MESSAGE = 'must not contain NUL characters or unpaired UTF-16 surrogates';
const MAX_REPORTED = 20;
/** No schema nests deeper; deeper input must not exhaust the stack here (a body deeper than this
 *  is refused before it is parsed: http/body.ts). */
export const MAX_DEPTH = 32;
/** No request has more than a few dozen values: a body of millions (a 40 MB send body of empty
 *  keys) is refused before it is parsed (http/body.ts), walked and validated, each of which would
 *  hold the event loop for seconds. */
export const MAX_VALUES = 10_000;

export function assertStorableParams(params: Record<string, string>): void {
  if (Object.values(params).some((v) => typeof v === 'string' && !isStorableText(v))) throw problems.notFound('The resource');
}

export function assertStorableInput(value: unknown, where: 'body' | 'query'): void {
  const found: FieldProblem[] = [];
  const budget = { left: MAX_VALUES };
  collect(value, [], found, budget);
  if (budget.left < 0) throw tooManyValues(where);
  if (found.length > 0) throw problems.validation(found.map((f) => ({ path: f.path || where, message: f.message })));
}

export function tooDeep(where: 'body' | 'query') {
  return problems.validation([{ path: where, message: `nests deeper than ${MAX_DEPTH} levels; no request needs that` }]);
}

export function tooManyValues(where: 'body' | 'query') {
  return problems.validation([{ path: where, message: `has more than ${MAX_VALUES} values; no request needs that many` }]);
}

function collect(value: unknown, path: string[], out: FieldProblem[], budget: { left: number }): void {
  if (out.length >= MAX_REPORTED || path.length > MAX_DEPTH || --budget.left < 0) return;
  if (typeof value === 'string') {
    if (!isStorableText(value)) out.push({ path: path.join('.'), message: MESSAGE });
  } else if (Array.isArray(value)) {
    for (let i = 0; i < value.length && budget.left >= 0; i++) collect(value[i], [...path, String(i)], out, budget);
  } else if (value !== null && typeof value === 'object') {
    const keys = Object.keys(value);
    if (keys.length > MAX_VALUES) budget.left = -1;
    for (let i = 0; i < keys.length && budget.left >= 0; i++) {
      const key = keys[i];
      const item = (value as Record<string, unknown>)[key];
      if (isStorableText(key)) collect(item, [...path, key], out, budget);
      else out.push({ path: [...path, toPrintable(key)].join('.'), message: `field name ${MESSAGE}` });
    }
  }
}

/** A field name fit to echo back in the error. */
function toPrintable(key: string): string {
  return JSON.stringify(key).slice(1, -1);
}
