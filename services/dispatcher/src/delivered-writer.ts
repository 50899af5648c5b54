// Records successful attempts, many per statement (group commit, see CallBatcher). Each row stays
// fenced on its own lease (recordDeliveredBatch), so batching changes no guarantee, only the
// number of round trips. Nobody waits on these writes (the attempt's slot is already free), so a
// batch gathers for a few milliseconds: under load that makes one statement of what would be many.
import type { Knex } from 'knex';
import { CallBatcher } from '@switchboard/core';
import { recordDeliveredBatch, type ClaimedDelivery, type DeliveredAttempt } from './store.ts';

export class DeliveredWriter {
  private readonly writer: CallBatcher<DeliveredAttempt, boolean>;

  constructor(db: Knex, maxBatch = 500, gatherMs = 10) {
    this.writer = new CallBatcher(async (batch) => {
      const recorded = await recordDeliveredBatch(db, batch);
      return batch.map((a) => recorded.has(a.claim.eventId));
    }, maxBatch, gatherMs);
  }

  /** Resolves with whether the row was still held by this claim (and is now delivered). */
  record(claim: ClaimedDelivery, statusCode: number): Promise<boolean> {
    return this.writer.submit({ claim, statusCode });
  }

  idle(): Promise<void> {
    return this.writer.idle();
  }
}
