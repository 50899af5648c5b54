// The instance's boolean settings, as last read from its row: drivers read them synchronously
// (DriverContext.settings), and the worker reloads them (on starting and connecting, before each
// send, and in the background while connected) since the gateway may change them at any time.
import type { Knex } from 'knex';
import { defaultSettings, jsonObject, SETTING_NAMES, type InstanceSettings } from '@switchboard/core';

export class SettingsCache {
  private value: InstanceSettings = defaultSettings();

  constructor(
    private readonly db: Knex,
    private readonly instanceId: string,
  ) {}

  current(): InstanceSettings {
    return this.value;
  }

  /** Re-reads the row. */
  async reload(): Promise<InstanceSettings> {
    const row = await this.db('instances').where({ id: this.instanceId }).select('settings').first();
    const raw = jsonObject(row?.settings);
    const next = defaultSettings();
    for (const name of SETTING_NAMES) if (typeof raw[name] === 'boolean') next[name] = raw[name];
    this.value = next;
    return next;
  }
}
