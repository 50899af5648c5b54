// Where a session hears that its instance's settings changed: a PostgreSQL notification on a
// channel of its own, sent by a trigger on `instances` (migration 022) in the transaction that
// changes them, whoever writes them. The session listens on its owner lock's connection, which it
// holds anyway, so the notification costs no connection and no poll.

/** The trigger builds the same name: this prefix and the instance id (at most 52 characters, under
 *  PostgreSQL's 63). */
export const SETTINGS_CHANNEL_PREFIX = 'sb_settings_';

export function settingsChannel(instanceId: string): string {
  return `${SETTINGS_CHANNEL_PREFIX}${instanceId}`;
}
