// The instance's boolean settings, read from its row and cached briefly: drivers read them
// synchronously (DriverContext.settings) and the gateway may change them at any time.
import type { Knex } from 'knex';
import { defaultSettings, SETTING_NAMES, type InstanceSettings } from '@switchboard/core';

export class SettingsCache {
  private value: InstanceSettings = defaultSettings();
  private readAt = 0;

  constructor(
    private readonly db: Knex,
    private readonly instanceId: string,
    private readonly ttlMs: number,
  ) {}

  current(): InstanceSettings {
    return this.value;
  }

  /** Re-reads the row when the cached copy is older than the TTL. */
  async refresh(force = false): Promise<InstanceSettings> {
    if (!force && Date.now() - this.readAt < this.ttlMs) return this.value;
    const row = await this.db('instances').where({ id: this.instanceId }).select('settings').first();
    const raw = typeof row?.settings === 'string' ? JSON.parse(row.settings) : (row?.settings ?? {});
    const next = defaultSettings();
    for (const name of SETTING_NAMES) if (typeof raw[name] === 'boolean') next[name] = raw[name];
    this.value = next;
    this.readAt = Date.now();
    return next;
  }
}
