// zod → problem document with one entry per field problem.
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
  const out: FieldProblem[] = [];
  for (const issue of error.issues) {
    const base = issue.path.map(String);
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) out.push({ path: [...base, key].join('.'), message: 'unknown field' });
      continue;
    }
    const path = base.join('.') || where;
    out.push({ path, message: issue.code === 'invalid_type' && issue.input === undefined ? 'required' : issue.message });
  }
  return out;
}
