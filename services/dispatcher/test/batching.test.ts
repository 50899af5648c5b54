// The dispatcher's round-trip savers (issue 10): claims capped per destination that carry what the
// attempt sends, batched "delivered" writes fenced per row, batched intake routing.
import assert from 'node:assert/strict';
import type { Knex } from 'knex';
import { DeliveredWriter } from '../src/delivered-writer.ts';
import { IntakeBatcher, sweepUnroutedEvents } from '../src/intake.ts';
import { claimDueDeliveries, insertDeliveries, recordDeliveredBatch, recordFailure, releaseClaim, releaseLeasesOf, type ClaimedDelivery } from '../src/store.ts';
import { createInstance, crypto, FAST_SCHEDULE, log, openTestDatabase, recordRoutedEvent, recordTestEvent } from './support.ts';

describe('dispatcher batching (PostgreSQL)', () => {
  let db: Knex;
  let drop: () => Promise<void>;

  beforeEach(async () => {
    ({ db, drop } = await openTestDatabase());
  });
  afterEach(async () => drop());

  const claim = (opts: { limit?: number; perDestinationLimit?: number; freeSlots?: Record<string, number> } = {}) =>
    claimDueDeliveries(db, { limit: opts.limit ?? 32, leaseMs: 60_000, leaseOwner: 'replica-test', excludeDestinations: [], perDestinationLimit: opts.perDestinationLimit ?? 2, freeSlots: opts.freeSlots });

  it('claims at most the per-destination limit (or free slots) of each destination, with the body and secret', async () => {
    const a = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    const b = await createInstance(db, { webhook: { url: 'https://b.example/hook' } });
    for (let i = 0; i < 5; i++) await recordRoutedEvent(db, a.id);
    for (let i = 0; i < 5; i++) await recordRoutedEvent(db, b.id);

    const first = await claim({ freeSlots: { 'https://b.example/hook': 1 } });
    assert.equal(first.filter((c) => c.instanceId === a.id).length, 2);
    assert.equal(first.filter((c) => c.instanceId === b.id).length, 1);
    for (const c of first) {
      const event = await db('events').where({ id: c.eventId }).first('body');
      assert.equal(c.material?.body, event.body, 'the exact stored body');
      assert.equal(crypto.open(c.material!.secretSealed!), c.instanceId === a.id ? a.secret : b.secret);
    }
    // Claimed rows are leased: the next claim takes the following ones, never the same.
    const second = await claim();
    assert.equal(second.length, 4);
    assert.ok(second.every((c) => !first.some((f) => f.eventId === c.eventId)));
    // Rows left unclaimed by the cap are untouched (still due, no attempt counted).
    const open = await db('deliveries').where('next_attempt_at', '<=', db.fn.now()).select('attempts');
    assert.equal(open.length, 3);
    assert.ok(open.every((r) => r.attempts === 0));
  });

  it('claims for named destinations alone, within their free slots, however many others have due rows', async () => {
    const named = await createInstance(db, { webhook: { url: 'https://named.example/hook' } });
    const busy = await createInstance(db, { webhook: { url: 'https://busy.example/hook' } });
    const other = await createInstance(db, { webhook: { url: 'https://other.example/hook' } });
    for (const inst of [named, busy, other]) for (let i = 0; i < 4; i++) await recordRoutedEvent(db, inst.id);

    const claims = await claimDueDeliveries(db, {
      limit: 32,
      leaseMs: 60_000,
      leaseOwner: 'replica-test',
      excludeDestinations: [],
      perDestinationLimit: 3,
      freeSlots: { 'https://busy.example/hook': 1 },
      onlyDestinations: ['https://named.example/hook', 'https://busy.example/hook', 'https://named.example/hook', 'https://idle.example/hook'],
    });
    assert.deepEqual(claims.map((c) => c.instanceId).sort(), [named.id, named.id, named.id, busy.id].sort());
    assert.ok(claims.every((c) => c.material?.body), 'with what the attempt sends');
    const due = await db('deliveries').where('next_attempt_at', '<=', db.fn.now()).select('instance_id');
    assert.equal(due.filter((r) => r.instance_id === other.id).length, 4, 'the destination not named is untouched');
  });

  it('skips excluded destinations (URLs, however many share a host), and takes the oldest due rows overall', async () => {
    const dead = await createInstance(db, { webhook: { url: 'https://Dead.Example:8443/hook?x=1' } });
    const ok = await createInstance(db, { webhook: { url: 'https://dead.example:8443/other-hook' } });
    for (let i = 0; i < 6; i++) await recordRoutedEvent(db, dead.id);
    for (let i = 0; i < 3; i++) await recordRoutedEvent(db, ok.id);

    const claims = await claimDueDeliveries(db, { limit: 32, leaseMs: 60_000, leaseOwner: 'replica-test', excludeDestinations: ['https://Dead.Example:8443/hook?x=1'], perDestinationLimit: 10 });
    assert.deepEqual(new Set(claims.map((c) => c.instanceId)), new Set([ok.id]));
    assert.equal(claims.length, 3);

    // Without exclusion, the overall limit keeps the oldest due rows of all destinations.
    await db('deliveries').update({ next_attempt_at: db.raw("now() - interval '1 minute'") });
    await db('deliveries').where({ instance_id: ok.id }).update({ next_attempt_at: db.raw("now() - interval '2 minutes'") });
    const oldest = await claimDueDeliveries(db, { limit: 4, leaseMs: 60_000, leaseOwner: 'replica-test', excludeDestinations: [], perDestinationLimit: 10 });
    assert.equal(oldest.filter((c) => c.instanceId === ok.id).length, 3);
    assert.equal(oldest.length, 4);
  });

  it('takes a URL longer than an index entry may be (2,000 characters of a 3-byte script), in its path or its host', async () => {
    // Varied characters: a repeated one compresses, and would fit an index entry after all.
    const han = (i: number) => String.fromCodePoint(0x4e00 + ((i * 7919) % 20000));
    const host = Array.from({ length: 95 }, (_, l) => Array.from({ length: 20 }, (_, c) => han(l * 20 + c)).join('')).join('.');
    for (const url of [`https://long.example/${Array.from({ length: 2000 }, (_, i) => han(i)).join('')}`, `https://${host}.cn/`]) {
      const inst = await createInstance(db, { webhook: { url } });
      for (let i = 0; i < 3; i++) await recordRoutedEvent(db, inst.id);
      const claims = await claim({ freeSlots: { [url]: 2 } });
      assert.deepEqual(claims.filter((c) => c.instanceId === inst.id).map((c) => c.url), [url, url]);
    }
  });

  it('a replica restarted under its name takes back its leases at once, and nothing else', async () => {
    const inst = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    for (let i = 0; i < 6; i++) await recordRoutedEvent(db, inst.id);
    const lease = { leaseMs: 60_000, excludeDestinations: [], perDestinationLimit: 6 };
    const [failed, handedBack, takenOver, ...mine] = await claimDueDeliveries(db, { ...lease, limit: 5, leaseOwner: 'replica-a' });
    const [theirs] = await claimDueDeliveries(db, { ...lease, limit: 1, leaseOwner: 'replica-b' });
    // Ended leases: a failed attempt's retry is scheduled, a claim handed back is due later, and a
    // lease another dispatcher (one that knows nothing of owners) took over after it lapsed.
    await recordFailure(db, failed, { statusCode: 500, error: 'http_500', retryInMs: 60_000 });
    await releaseClaim(db, handedBack, new Date(Date.now() + 60_000));
    await db('deliveries').where({ event_id: takenOver.eventId }).update({ next_attempt_at: db.raw("now() + interval '10 minutes'") });

    assert.equal(await releaseLeasesOf(db, 'replica-a'), 2);
    const due = await db('deliveries').where('next_attempt_at', '<=', db.fn.now()).pluck('event_id');
    assert.deepEqual(due.sort(), mine.map((c) => c.eventId).sort());
    const later = await db('deliveries').where('next_attempt_at', '>', db.fn.now()).pluck('event_id');
    assert.deepEqual(later.sort(), [failed, handedBack, takenOver, theirs].map((c) => c.eventId).sort(), 'schedules and the other replica\'s lease stand');
  });

  it('records delivered attempts in one statement, each fenced on its own lease', async () => {
    const inst = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    for (let i = 0; i < 3; i++) await recordRoutedEvent(db, inst.id);
    const [c1, c2, c3] = await claim({ perDestinationLimit: 3 });
    // c2's lease ran out and another replica took it over (its lease value changed).
    await db('deliveries').where({ event_id: c2.eventId }).update({ next_attempt_at: new Date(Date.now() + 120_000) });
    const recorded = await recordDeliveredBatch(db, [c1, c2, c3].map((claim) => ({ claim, statusCode: 204 })));
    assert.deepEqual([...recorded].sort(), [c1.eventId, c3.eventId].sort());
    const rows = await db('deliveries').orderBy('event_id').select('event_id', 'status', 'attempts', 'last_status_code');
    for (const r of rows) {
      if (r.event_id === c2.eventId) assert.deepEqual([r.status, r.attempts], ['pending', 0], 'the stale claim wrote nothing');
      else assert.deepEqual([r.status, r.attempts, r.last_status_code], ['delivered', 1, 204]);
    }
  });

  it('finds its rows by primary key however stale the statistics: no scan of the backlog or of all events', async () => {
    const inst = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    for (const table of ['events', 'deliveries']) await db.raw(`alter table ${table} set (autovacuum_enabled = false)`);
    // Statistics taken at a quiet moment; then a backlog builds up that they do not know about.
    await bulkEvents(inst.id, 0, 200, 'delivered');
    await db.raw('analyze events, deliveries');
    await bulkEvents(inst.id, 200, 3000, 'pending');
    await bulkEvents(inst.id, 3000, 3500, null);
    const claims = await claim({ perDestinationLimit: 5 });
    const delivered = await tableReads(async (trx) => assert.equal((await recordDeliveredBatch(trx, claims.map((claim) => ({ claim, statusCode: 200 })))).size, 5));
    assert.equal(delivered.deliveries.seqScans, 0);
    assert.ok(delivered.deliveries.fetched < 100, `"delivered" read ${delivered.deliveries.fetched} delivery rows for 5`);

    const unrouted = Array.from({ length: 500 }, (_, i) => ({ eventId: `evt_bulk${3000 + i}`, instanceId: inst.id, status: 'pending' as const, url: 'https://a.example/hook', firstAttemptDelayMs: 0 }));
    const intake = await tableReads(async (trx) => assert.equal((await insertDeliveries(trx, unrouted)).inserted.size, 500));
    assert.equal(intake.events.seqScans, 0, 'the intake probes events by primary key');
  });

  /** What one statement read of events and deliveries, from PostgreSQL's per-table counters
   *  (before and after, in one transaction: the counters also hold earlier statements not yet reported). */
  async function tableReads(statement: (trx: Knex.Transaction) => Promise<unknown>): Promise<Record<'events' | 'deliveries', { seqScans: number; fetched: number }>> {
    return db.transaction(async (trx) => {
      const counters = async () => {
        const rows = (await trx.raw(`select relname, seq_scan, idx_tup_fetch from pg_stat_xact_user_tables where relname in ('events', 'deliveries')`)).rows as any[];
        return Object.fromEntries(rows.map((r) => [r.relname, { seqScans: Number(r.seq_scan), fetched: Number(r.idx_tup_fetch) }]));
      };
      const before = await counters();
      await statement(trx);
      const after = await counters();
      const delta = (t: string) => ({ seqScans: after[t].seqScans - before[t].seqScans, fetched: after[t].fetched - before[t].fetched });
      return { events: delta('events'), deliveries: delta('deliveries') };
    });
  }

  /** Events [from, to) of an instance, with a delivery row in `status` (none when null). */
  async function bulkEvents(instanceId: string, from: number, to: number, status: 'pending' | 'delivered' | null): Promise<void> {
    await db.raw(`insert into events (id, instance_id, type, body) select 'evt_bulk' || g, ?, 'message.sent', '{}' from generate_series(?::int, ?::int) g`, [instanceId, from, to - 1]);
    if (!status) return;
    await db.raw(
      `insert into deliveries (event_id, instance_id, status, url, next_attempt_at)
       select 'evt_bulk' || g, ?, ?, 'https://a.example/hook', case when ? = 'pending' then now() - interval '1 second' end from generate_series(?::int, ?::int) g`,
      [instanceId, status, status, from, to - 1],
    );
  }

  it('DeliveredWriter groups concurrent records and answers each caller for its own row', async () => {
    const inst = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    for (let i = 0; i < 6; i++) await recordRoutedEvent(db, inst.id);
    const claims = await claim({ perDestinationLimit: 6 });
    await db('deliveries').where({ event_id: claims[5].eventId }).update({ status: 'exhausted' });
    const writer = new DeliveredWriter(db, 2);
    const results = await Promise.all(claims.map((c) => writer.record(c, 200)));
    assert.deepEqual(results, [true, true, true, true, true, false]);
    await writer.idle();
    assert.equal(Number((await db('deliveries').where({ status: 'delivered' }).count({ n: '*' }).first())!.n), 5);
  });

  it('routes events in batches: the sweep and the bus intake write one delivery row per event', async () => {
    const inst = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    const events = [];
    for (let i = 0; i < 7; i++) events.push(await recordTestEvent(db, inst.id));
    let kicks = 0;
    assert.equal(await sweepUnroutedEvents({ db, schedule: FAST_SCHEDULE, log, onPending: () => kicks++ }, 3), 7);
    assert.equal(kicks, 3, 'the scheduler is kicked after each batch');

    const batcher = new IntakeBatcher({ db, schedule: FAST_SCHEDULE });
    const late = await recordTestEvent(db, inst.id);
    const answers = await Promise.all([
      batcher.route(events[0]), // a redelivered message
      batcher.route(late),
      batcher.route(late), // twice in one batch
      batcher.route({ ...late, id: 'evt_missing' }),
      batcher.route({ ...late, id: 'evt_other', instanceId: 'inst_gone' }),
    ]);
    assert.deepEqual(answers, ['recorded', 'awaiting_claim', 'awaiting_claim', 'event_missing', 'instance_missing']);
    assert.equal(Number((await db('deliveries').count({ n: '*' }).first())!.n), 8);
  });

  it('hands first attempts to the local scheduler as leased claims, up to its room per destination', async () => {
    const a = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    const b = await createInstance(db, { webhook: { url: 'https://b.example/hook' } });
    const filtered = await createInstance(db, { webhook: {} }); // no URL: nothing to deliver
    const adopted: ClaimedDelivery[] = [];
    const handOff = { leaseMs: 60_000, leaseOwner: 'replica-test', room: (key: string) => (key === 'https://a.example/hook' ? 2 : 0), adopt: (c: ClaimedDelivery[]) => void adopted.push(...c) };
    const batcher = new IntakeBatcher({ db, schedule: FAST_SCHEDULE, handOff });
    const earlier = await recordRoutedEvent(db, a.id); // its row exists already: never handed off
    const events = [earlier];
    for (let i = 0; i < 3; i++) events.push(await recordTestEvent(db, a.id));
    events.push(await recordTestEvent(db, b.id), await recordTestEvent(db, filtered.id));
    const answers = await Promise.all(events.map((e) => batcher.route(e)));

    assert.deepEqual(answers, ['recorded', 'recorded', 'recorded', 'awaiting_claim', 'awaiting_claim', 'recorded']);
    assert.deepEqual(adopted.map((c) => c.eventId), [events[1].id, events[2].id], 'the room of a.example/hook, nothing for b.example/hook');
    const owners = await db('deliveries').whereIn('event_id', events.map((e) => e.id)).select('event_id', 'lease_owner');
    for (const { event_id, lease_owner } of owners) assert.equal(lease_owner, adopted.some((c) => c.eventId === event_id) ? 'replica-test' : null, 'only handed-off rows are leased, to the intake\'s replica');
    for (const claim of adopted) {
      const row = await db('deliveries').where({ event_id: claim.eventId }).first();
      const event = await db('events').where({ id: claim.eventId }).first('body');
      assert.equal(row.status, 'pending');
      assert.equal(new Date(row.next_attempt_at).getTime(), claim.leaseUntil.getTime(), 'written leased: no claim takes it meanwhile');
      assert.ok(claim.leaseUntil.getTime() - Date.now() > 50_000);
      assert.equal(claim.attempts, 0);
      assert.equal(claim.material?.body, event.body);
      assert.equal(crypto.open(claim.material!.secretSealed!), a.secret);
    }
    // The claim query finds only what was not handed off.
    const claimed = await claim({ perDestinationLimit: 10 });
    assert.deepEqual(new Set(claimed.map((c) => c.eventId)), new Set([earlier.id, events[3].id, events[4].id]));
  });

  it('hands nothing off when the first attempt is scheduled later', async () => {
    const a = await createInstance(db, { webhook: { url: 'https://a.example/hook' } });
    const adopted: ClaimedDelivery[] = [];
    const batcher = new IntakeBatcher({ db, schedule: [5000, ...FAST_SCHEDULE.slice(1)], handOff: { leaseMs: 60_000, leaseOwner: 'replica-test', room: () => 10, adopt: (c) => void adopted.push(...c) } });
    assert.equal(await batcher.route(await recordTestEvent(db, a.id)), 'awaiting_claim');
    assert.equal(adopted.length, 0);
  });
});
