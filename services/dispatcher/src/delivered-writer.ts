// Records successful attempts, many per statement (group commit, see CallBatcher). Each row stays
// fenced on its own lease (recordDeliveredBatch), so batching changes no guarantee, only the
// number of round trips.
import type { Knex } from 'knex';
import { CallBatcher } from '@switchboard/core';
import { recordDeliveredBatch, type ClaimedDelivery, type DeliveredAttempt } from './store.ts';

export class DeliveredWriter {
  private readonly writer: CallBatcher<DeliveredAttempt, boolean>;

  constructor(db: Knex, maxBatch = 500) {
    this.writer = new CallBatcher(async (batch) => {
      const recorded = await recordDeliveredBatch(db, batch);
      return batch.map((a) => recorded.has(a.claim.eventId));
    }, maxBatch);
  }

  /** Resolves with whether the row was still held by this claim (and is now delivered). */
  record(claim: ClaimedDelivery, statusCode: number): Promise<boolean> {
    return this.writer.submit({ claim, statusCode });
  }

  idle(): Promise<void> {
    return this.writer.idle();
  }
}
