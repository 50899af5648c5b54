// The benchmark's output: one table on stdout and the same figures as JSON.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

export interface Row {
  figure: string;
  value: string;
  baseline?: string;
  target?: string;
  pass?: boolean;
}

export function printTable(rows: Row[]): void {
  const cells = rows.map((r) => [r.figure, r.value, r.baseline ?? '', r.target ?? '', r.pass === undefined ? '' : r.pass ? 'PASS' : 'MISS']);
  const head = ['figure', 'value', 'baseline', 'target', ''];
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const line = (c: string[]) => c.map((v, i) => v.padEnd(widths[i])).join(' | ');
  console.log(line(head));
  console.log(widths.map((w) => '-'.repeat(w)).join('-|-'));
  for (const c of cells) console.log(line(c));
}

export function writeJson(path: string, data: unknown): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, JSON.stringify(data, null, 2) + '\n');
}
