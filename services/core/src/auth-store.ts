// AuthStore backed by the `auth_state` table: network-session credentials sealed with the
// instance-independent seal key. Each `set` batch is one transaction.
import type { Knex } from 'knex';
import type { Crypto } from './crypto.ts';
import type { AuthStore } from './network.ts';

export class DbAuthStore implements AuthStore {
  constructor(
    private readonly db: Knex,
    private readonly crypto: Crypto,
    private readonly instanceId: string,
    /** Converts values to and from JSON text (Baileys needs its BufferJSON reviver/replacer). */
    private readonly codec: { encode(v: unknown): string; decode(s: string): unknown } = { encode: JSON.stringify, decode: JSON.parse },
  ) {}

  async get(category: string, ids: string[]): Promise<Record<string, unknown>> {
    if (!ids.length) return {};
    const rows = await this.db('auth_state').where({ instance_id: this.instanceId, category }).whereIn('key_id', ids);
    const out: Record<string, unknown> = {};
    for (const row of rows) out[row.key_id] = this.codec.decode(this.crypto.open(row.value_sealed));
    return out;
  }

  async set(batch: Record<string, Record<string, unknown | null>>): Promise<void> {
    await this.db.transaction(async (trx) => {
      for (const [category, entries] of Object.entries(batch)) {
        for (const [keyId, value] of Object.entries(entries)) {
          const where = { instance_id: this.instanceId, category, key_id: keyId };
          if (value === null || value === undefined) {
            await trx('auth_state').where(where).delete();
          } else {
            await trx('auth_state')
              .insert({ ...where, value_sealed: this.crypto.seal(this.codec.encode(value)) })
              .onConflict(['instance_id', 'category', 'key_id'])
              .merge(['value_sealed']);
          }
        }
      }
    });
  }

  async clear(): Promise<void> {
    await this.db('auth_state').where({ instance_id: this.instanceId }).delete();
  }
}
