// Looks up instance tokens by keyed hash, many per query: the look-ups that arrive while one query
// runs form the next (the same grouping as SendItemWriter), so under load the credential check of
// many requests costs one statement. Each look-up still reads the database after its request
// arrived, so a renewed or deleted token stops working on the very next request.
import { batchGatherMs, CallBatcher, prepared, type Db } from '@switchboard/core';

const MAX_BATCH = 64;

export class InstanceTokenLookup {
  private readonly reader: CallBatcher<string, Record<string, any> | undefined>;

  constructor(private readonly db: Db) {
    this.reader = new CallBatcher((hashes) => this.readBatch(hashes), MAX_BATCH, batchGatherMs(db));
  }

  /** The instance row whose token has this hash, or undefined. */
  find(tokenHash: string): Promise<Record<string, any> | undefined> {
    return this.reader.submit(tokenHash);
  }

  private async readBatch(hashes: string[]): Promise<(Record<string, any> | undefined)[]> {
    // One statement text whatever the batch size, so it can be prepared once per connection.
    const result = await this.db.raw('select * from instances where token_hash = any(?::text[])', [[...new Set(hashes)]]).options(prepared('gateway_instance_by_token'));
    const rows = result.rows as Record<string, any>[];
    const byHash = new Map(rows.map((row: Record<string, any>) => [row.token_hash as string, row]));
    return hashes.map((hash) => byHash.get(hash));
  }
}
