// The instance's boolean settings, as last read from its row: drivers read them synchronously
// (DriverContext.settings), and the worker reloads them (on starting and connecting, before each
// send, and in the background while connected) since the gateway may change them at any time.
import type { Knex } from 'knex';
import { defaultSettings, jsonObject, SETTING_NAMES, type InstanceSettings } from '@switchboard/core';

export class SettingsCache {
  private value: InstanceSettings = defaultSettings();
  /** Reloads started, and the latest of them applied: one read before a change committed must not
   *  land after one read after it (a notification's) and bring the old settings back. */
  private started = 0;
  private applied = 0;

  constructor(
    private readonly db: Knex,
    private readonly instanceId: string,
  ) {}

  current(): InstanceSettings {
    return this.value;
  }

  /** Re-reads the row. */
  async reload(): Promise<InstanceSettings> {
    const seq = ++this.started;
    const row = await this.db('instances').where({ id: this.instanceId }).select('settings').first();
    const raw = jsonObject(row?.settings);
    const next = defaultSettings();
    for (const name of SETTING_NAMES) if (typeof raw[name] === 'boolean') next[name] = raw[name];
    if (seq > this.applied) {
      this.value = next;
      this.applied = seq;
    }
    return next;
  }
}
