// Statistics (counts by UTC date, direction and type) and diagnostics.
import { z } from 'zod';
import type { Knex } from 'knex';
import { mediaStats, problems } from '@switchboard/core';
import type { GatewayDeps } from '../deps.ts';
import { route } from '../http/route.ts';
import { API_VERSION } from '../openapi.ts';
import { DATE_TIME, StatsQuery } from '../schemas.ts';
import { assertProjectExists, loadInstance } from './common.ts';

const DAY_MS = 86_400_000;

/** The UTC date of a date, or of a date and time (UTC without an offset). */
function parseDay(value: string | undefined, field: string): Date | undefined {
  if (value === undefined) return undefined;
  const invalid = () => problems.validation([{ path: field, message: 'must be a valid date such as 2026-01-31, or a date and time such as 2026-01-31T18:00:00-03:00' }]);
  const g = DATE_TIME.exec(value)?.groups;
  if (!g) throw invalid();
  const midnight = new Date(`${g.date}T00:00:00Z`);
  // The round trip refuses 2026-02-30, which Date would roll over into March.
  if (Number.isNaN(midnight.getTime()) || midnight.toISOString().slice(0, 10) !== g.date) throw invalid();
  const [h, m, s, oh, om] = [g.h, g.m, g.s, g.oh, g.om].map((v) => Number(v ?? 0));
  // ISO 8601's 24:00 is the end of the day; a leap second (:60) counts as the second before it.
  const endOfDay = h === 24 && m === 0 && s === 0;
  if ((h > 23 && !endOfDay) || m > 59 || s > 60 || oh > 23 || om > 59) throw invalid();
  const offsetMinutes = (g.sign === '-' ? -1 : 1) * (oh * 60 + om);
  const instant = midnight.getTime() + ((h * 60 + m - offsetMinutes) * 60 + Math.min(s, 59)) * 1000;
  const d = new Date(Math.floor(instant / DAY_MS) * DAY_MS);
  // PostgreSQL has no year 0; a time zone offset can move a date and time into it, or into 10000.
  const year = d.getUTCFullYear();
  if (year < 1 || year > 9999) throw problems.validation([{ path: field, message: 'must be a date between 0001-01-01 and 9999-12-31' }]);
  return d;
}

/** A UTC midnight as PostgreSQL reads it, for any year from 1 to 10000 (the day after `to`
 *  9999-12-31, which an ISO string would write as +010000 and PostgreSQL refuse). */
function sqlMidnight(d: Date): string {
  return `${sqlDay(d)} 00:00:00+00`;
}

/** The UTC date of `d` as PostgreSQL reads a date (years 1 to 9999). */
function sqlDay(d: Date): string {
  return `${String(d.getUTCFullYear()).padStart(4, '0')}-${d.toISOString().slice(-19, -14)}`;
}

export const adminRoutes = [
  route({
    method: 'get',
    path: '/api/stats',
    auth: 'admin',
    tag: 'admin',
    summary: 'Message counts by UTC date, direction and type (inclusive from/to dates; a date and time counts on its UTC date)',
    query: StatsQuery,
    responses: {
      200: z.object({ from: z.string(), to: z.string(), rows: z.array(z.object({ date: z.string(), direction: z.enum(['outbound', 'inbound']), type: z.string(), count: z.number() })) }),
      404: 'project or instance absent',
    },
    handler: async ({ deps, query }) => {
      // Defaults: the 30 days up to today; a lone `from` runs to today (or to itself, if later).
      // Any range is allowed: only days with messages produce rows.
      const today = new Date(new Date().toISOString().slice(0, 10) + 'T00:00:00Z');
      const givenFrom = parseDay(query.from, 'from');
      const to = parseDay(query.to, 'to') ?? (givenFrom && givenFrom > today ? givenFrom : today);
      const from = givenFrom ?? new Date(to.getTime() - 29 * DAY_MS);
      if (from > to) throw problems.validation([{ path: 'from', message: 'must not be after to' }]);
      // A mistyped id is a 404, not a range without traffic.
      await assertProjectExists(deps, query.projectId);
      if (query.instanceId) await loadInstance(deps, query.instanceId);
      const rows = await countMessages(deps, from, new Date(to.getTime() + DAY_MS), query.projectId, query.instanceId);
      return { body: { from: from.toISOString().slice(0, 10), to: to.toISOString().slice(0, 10), rows } };
    },
  }),
  route({
    method: 'get',
    path: '/api/diagnostics',
    auth: 'admin',
    tag: 'admin',
    summary: 'State of instances, queues, deliveries and the media volume',
    responses: { 200: z.record(z.string(), z.unknown()) },
    handler: async ({ deps }) => ({ body: await diagnostics(deps) }),
  }),
];

/** Outbound = API sends plus messages typed on the phone itself; inbound = everything else received. */
async function countMessages(deps: GatewayDeps, from: Date, until: Date, projectId?: string, instanceId?: string) {
  // One snapshot for the three reads: a retention sweep that committed between them would be counted twice.
  const found = await deps.db.transaction((trx) => readCounts(trx, from, until, projectId, instanceId), { isolationLevel: 'repeatable read' });
  const counts = new Map<string, { date: string; direction: string; type: string; count: number }>();
  for (const r of found) {
    const k = `${r.date}|${r.direction}|${r.type}`;
    const row = counts.get(k) ?? { date: r.date, direction: r.direction, type: r.type, count: 0 };
    row.count += Number(r.count);
    counts.set(k, row);
  }
  return [...counts.values()].sort((a, b) => a.date.localeCompare(b.date) || a.direction.localeCompare(b.direction) || a.type.localeCompare(b.type));
}

/** Counts of the messages still recorded, and of those message retention deleted (migration 023). */
async function readCounts(db: Knex.Transaction, from: Date, until: Date, projectId?: string, instanceId?: string): Promise<{ date: string; direction: string; type: string; count: string | number }[]> {
  const scope = (q: any, table: string) => {
    q.where(`${table}.created_at`, '>=', sqlMidnight(from)).andWhere(`${table}.created_at`, '<', sqlMidnight(until));
    if (instanceId) q.andWhere(`${table}.instance_id`, instanceId);
    if (projectId) q.whereIn(`${table}.instance_id`, db('instances').select('id').where({ project_id: projectId }));
    return q;
  };
  const day = (table: string) => db.raw(`to_char(${table}.created_at at time zone 'UTC', 'YYYY-MM-DD') as date`);
  const sends = scope(db('send_items').select(day('send_items'), db.raw(`'outbound' as direction`), 'type').count({ count: '*' }), 'send_items').groupByRaw('1, 2, 3');
  const received = scope(
    db('incoming')
      .select(day('incoming'), db.raw(`case when from_me then 'outbound' else 'inbound' end as direction`), 'type')
      .count({ count: '*' })
      .where('from_api', false),
    'incoming',
  ).groupByRaw('1, 2, 3');
  const deleted = db('message_counts')
    .select(db.raw(`to_char(date, 'YYYY-MM-DD') as date`), 'direction', 'type')
    .sum({ count: 'count' })
    .where('date', '>=', sqlDay(from))
    .andWhere('date', '<=', sqlDay(new Date(until.getTime() - DAY_MS)))
    .modify((q) => {
      if (instanceId) q.andWhere('instance_id', instanceId);
      if (projectId) q.whereIn('instance_id', db('instances').select('id').where({ project_id: projectId }));
    })
    .groupByRaw('1, 2, 3');
  return [...(await sends), ...(await received), ...(await deleted)];
}

async function diagnostics(deps: GatewayDeps) {
  const { db } = deps;
  const group = async (table: string, column: string): Promise<Record<string, number>> => {
    const rows = await db(table).select(column).count({ count: '*' }).groupBy(column);
    return Object.fromEntries(rows.map((r: any) => [r[column], Number(r.count)]));
  };
  const [instances, sends, deliveries, media, outbox] = await Promise.all([
    group('instances', 'state'),
    group('send_items', 'status'),
    group('deliveries', 'status'),
    mediaStats(db),
    db('outbox').count({ count: '*' }).first(),
  ]);
  const perInstance = await db('send_items').select('instance_id').count({ queued: '*' }).where({ status: 'queued' }).groupBy('instance_id');
  return {
    version: API_VERSION,
    uptimeSeconds: Math.round((Date.now() - deps.startedAt.getTime()) / 1000),
    instances: { total: Object.values(instances).reduce((a, b) => a + b, 0), byState: instances },
    queues: { byStatus: sends, queuedByInstance: Object.fromEntries(perInstance.map((r: any) => [r.instance_id, Number(r.queued)])) },
    deliveries: { byStatus: deliveries },
    outbox: { pending: Number(outbox?.count ?? 0) },
    media,
  };
}
