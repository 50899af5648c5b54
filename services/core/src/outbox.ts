// Transactional outbox: a row written in the same transaction as the record it announces, then
// published to the bus by the relay. A crash between commit and publish only delays the message:
// the relay's periodic sweep republishes it, and Nats-Msg-Id dedup drops repeats.
import type { Knex } from 'knex';
import type { Bus } from './bus/types.ts';
import type { Logger } from './logger.ts';
import { inSpan, outsideTrace, SpanKind } from './telemetry/spans.ts';

export interface OutboxMessage {
  subject: string;
  msgId: string;
  payload: string;
  headers?: Record<string, string>;
}

export async function enqueueOutbox(trx: Knex | Knex.Transaction, msg: OutboxMessage): Promise<void> {
  const row = outboxRow(msg);
  await trx('outbox').insert({ subject: row.subject, msg_id: row.msgId, payload: row.payload, headers: row.headers });
}

/** The outbox columns of a message (headers as JSON text), for statements that insert the row themselves. */
export function outboxRow(msg: OutboxMessage): { subject: string; msgId: string; payload: string; headers: string } {
  return { subject: msg.subject, msgId: msg.msgId, payload: msg.payload, headers: JSON.stringify(msg.headers ?? {}) };
}

interface OutboxRow {
  seq: number;
  subject: string;
  msg_id: string;
  payload: string;
  headers: string | Record<string, string> | null;
}

export class OutboxRelay {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private stopped = false;
  /** A sweep's look is under way: a slow database gets one at a time, not one per tick. */
  private looking = false;

  constructor(
    private readonly db: Knex,
    private readonly bus: Bus,
    private readonly log: Logger,
    private readonly sweepIntervalMs = 1000,
    private readonly batchSize = 200,
  ) {}

  start(): void {
    this.stopped = false;
    this.timer = setInterval(() => void this.sweep(), this.sweepIntervalMs);
    this.timer.unref();
    this.kick();
  }

  /** Publishes whatever is waiting, soon. Calls made while a flush runs coalesce into one more. */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    // Outside the kicking request's trace: each row's span joins the trace stored with the row.
    this.running = outsideTrace(() => this.drain())
      .catch((err) => this.log.warn({ err: String(err) }, 'outbox relay: publish failed, will retry'))
      .finally(() => {
        this.running = undefined;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  /** The periodic backstop for rows whose writer did not publish them (it crashed, or the bus was
   *  away). Nearly every pass finds none, so it looks with one statement before it opens the
   *  relay's transaction (three round trips), which every gateway (each second) and session
   *  process (every 10 s) would otherwise run for nothing. */
  private async sweep(): Promise<void> {
    if (this.running) return this.kick(); // the flush under way takes one more turn
    if (this.looking) return;
    this.looking = true;
    try {
      if (await this.db('outbox').first(this.db.raw('1 as waiting'))) this.kick();
    } catch (err) {
      this.log.warn({ err: String(err) }, 'outbox relay: could not look for unpublished rows, will retry');
    } finally {
      this.looking = false;
    }
  }

  /** Resolves once everything enqueued before the call has been published (tests, shutdown). */
  async flush(): Promise<void> {
    while (this.running) await this.running;
    await this.drain();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    while (this.running) await this.running.catch(() => undefined);
  }

  private async drain(): Promise<void> {
    for (;;) {
      const published = await this.publishBatch();
      if (published < this.batchSize) return;
    }
  }

  private publishRow(row: OutboxRow): Promise<void> {
    const headers = typeof row.headers === 'string' ? JSON.parse(row.headers) : row.headers;
    return inSpan('outbox relay', { kind: SpanKind.INTERNAL, parent: headers?.traceparent ?? null, attributes: { 'messaging.destination.name': row.subject } }, () =>
      this.bus.publish(row.subject, Buffer.from(row.payload, 'utf8'), { msgId: row.msg_id, headers }),
    );
  }

  private async publishBatch(): Promise<number> {
    return this.db.transaction(async (trx) => {
      // Taken out in one statement; the transaction stays open while the rows are published, so a
      // failed publish (or a crash) rolls the delete back and every row of the round stays for the
      // next pass (the bus drops the repeats of those that went out by their msgId).
      // Every gateway and session process runs a relay. Not SKIP LOCKED: a relay that skipped the
      // rows another is publishing would publish the later rows of the same subjects first, and
      // an instance's commands would reach its session out of order. It waits for them instead.
      const rows = await takeOldestRows(trx, this.batchSize);
      if (!rows.length) return 0;
      // The whole batch is published at once (a window), in seq order, so one connection carries
      // each subject's messages in order; then the acks are awaited together.
      const outcomes = await Promise.allSettled(rows.map((row) => this.publishRow(row)));
      const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected');
      if (failed) throw failed.reason;
      return rows.length;
    });
  }
}

/** Deletes the oldest rows and returns them in seq order (one round trip instead of a locking
 *  SELECT and a DELETE). */
async function takeOldestRows(trx: Knex.Transaction, limit: number): Promise<OutboxRow[]> {
  const result = await trx.raw(
    'DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox ORDER BY seq LIMIT ? FOR UPDATE) RETURNING seq, subject, msg_id, payload, headers',
    [limit],
  );
  return (result.rows as OutboxRow[]).sort((a, b) => Number(a.seq) - Number(b.seq));
}
