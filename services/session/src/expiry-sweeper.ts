// Queue expiry (DESIGN §5 "Sending"): a queued item past `expires_at` becomes `expired` with a
// `message.failed` event (code `expired`), even while its instance is offline. Run by the
// gateway/server process, not by a session, so offline instances are covered too.
import type { Knex } from 'knex';
import type { Logger, OutboxRelay } from '@switchboard/core';
import { markExpired, type SendItemRow } from './send-items.ts';

export interface ExpirySweeperOptions {
  db: Knex;
  relay: Pick<OutboxRelay, 'kick'>;
  intervalMs: number;
  log: Logger;
  batchSize?: number;
}

export interface ExpirySweeper {
  /** Expires everything due now; resolves with how many items expired. */
  sweep(): Promise<number>;
  stop(): Promise<void>;
}

/** How often to look: a twentieth of the expiry, between 200 ms and 5 s. With the default 24 h an
 *  item expires at most 5 s late; with the short expiries of tests and sandboxes it is not seen
 *  `queued` for long after its time. */
export function expirySweepIntervalMs(sendExpiryMs: number): number {
  return Math.min(5_000, Math.max(200, Math.round(sendExpiryMs / 20)));
}

export function startExpirySweeper(opts: ExpirySweeperOptions): ExpirySweeper {
  const batchSize = opts.batchSize ?? 200;
  let running: Promise<number> | undefined;
  let stopped = false;

  async function sweepBatch(): Promise<number> {
    return opts.db.transaction(async (trx) => {
      // SKIP LOCKED: a session handling the same item right now keeps it; it re-checks expiry itself.
      const due = (await trx('send_items')
        .where('status', 'queued')
        .where('expires_at', '<=', trx.fn.now())
        .orderBy('expires_at')
        .limit(batchSize)
        .forUpdate()
        .skipLocked()) as SendItemRow[];
      let expired = 0;
      for (const item of due) if (await markExpired(trx, item)) expired++;
      return expired;
    });
  }

  async function sweepAll(): Promise<number> {
    let total = 0;
    for (;;) {
      const n = await sweepBatch();
      total += n;
      if (n > 0) opts.relay.kick();
      if (n < batchSize) return total;
    }
  }

  function sweep(): Promise<number> {
    if (!running) running = sweepAll().finally(() => (running = undefined));
    return running;
  }

  const timer = setInterval(() => {
    if (stopped) return;
    sweep().catch((err) => opts.log.warn({ err: String(err) }, 'expiry sweeper: sweep failed, will retry'));
  }, opts.intervalMs);
  timer.unref();

  return {
    sweep,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running?.catch(() => undefined);
    },
  };
}
