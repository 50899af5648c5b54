// zod → problem document with one entry per field: its first problem (a value too long and of the
// wrong pattern would otherwise be listed twice).
import type { z } from 'zod';
import { problems, type FieldProblem } from '@switchboard/core';

export function parseOrThrow<T>(schema: z.ZodType<T>, value: unknown, where: 'body' | 'query'): T {
  // reportInput lets fieldProblems tell a missing field from one of the wrong type; the input
  // itself never leaves this module.
  const result = schema.safeParse(value, { reportInput: true });
  if (result.success) return result.data;
  throw problems.validation(fieldProblems(result.error, where));
}

export function fieldProblems(error: z.ZodError, where: 'body' | 'query'): FieldProblem[] {
  const byPath = new Map<string, string>();
  const add = (path: string, message: string) => byPath.has(path) || byPath.set(path, message);
  for (const issue of error.issues) {
    const base = issue.path.map(String);
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) add([...base, key].join('.'), 'unknown field');
      continue;
    }
    add(base.join('.') || where, issue.code === 'invalid_type' && issue.input === undefined ? 'required' : issue.message);
  }
  return [...byPath].map(([path, message]) => ({ path, message }));
}
