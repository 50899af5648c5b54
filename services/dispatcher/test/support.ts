// Shared set-up of the dispatcher's tests: a migrated real PostgreSQL database, instances with a
// webhook configuration and sealed secret, recorded events, and polling helpers.
import { randomBytes } from 'node:crypto';
import { Crypto, createLogger, randomToken, recordEvent, newResourceId, type EventEnvelope, type EventType, type WebhookConfig } from '@switchboard/core';
import type { Knex } from 'knex';
import { routeAndRecord } from '../src/intake.ts';

export const log = createLogger({ level: process.env.TEST_LOG_LEVEL ?? 'silent', name: 'dispatcher-test' });
export const masterKey = randomBytes(32);
export const crypto = new Crypto(masterKey);
export const FAST_SCHEDULE = [0, 50, 50, 50, 50, 50, 50, 50];


export async function createInstance(
  db: Knex,
  opts: { webhook?: WebhookConfig; settings?: Record<string, boolean>; secret?: string | null } = {},
): Promise<{ id: string; secret: string }> {
  const id = newResourceId('inst');
  const secret = opts.secret === undefined ? randomToken('whsec') : opts.secret;
  await db('instances').insert({
    id,
    name: 'test instance',
    webhook: JSON.stringify(opts.webhook ?? {}),
    settings: JSON.stringify(opts.settings ?? {}),
    webhook_secret_sealed: secret === null ? null : crypto.seal(secret),
    token_hash: randomBytes(32).toString('hex'),
    token_sealed: crypto.seal('token'),
  });
  return { id, secret: secret ?? '' };
}

/** Records an event the way producers do (event + outbox row in one transaction). */
export async function recordTestEvent(db: Knex, instanceId: string, type: EventType = 'message.sent', data: Record<string, unknown> = {}): Promise<EventEnvelope> {
  return db.transaction((trx) => recordEvent(trx, { instanceId, type, data: { n: Math.random(), ...data } }));
}

/** Records an event and writes its delivery row directly, as the intake would. */
export async function recordRoutedEvent(db: Knex, instanceId: string, type: EventType = 'message.sent', data: Record<string, unknown> = {}, schedule = FAST_SCHEDULE): Promise<EventEnvelope> {
  const envelope = await recordTestEvent(db, instanceId, type, data);
  await routeAndRecord({ db, schedule }, envelope);
  return envelope;
}

export async function deliveryOf(db: Knex, eventId: string): Promise<Record<string, any>> {
  return db('deliveries').where({ event_id: eventId }).first();
}

export async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 10_000, everyMs = 25): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value as T;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export async function waitForStatus(db: Knex, eventId: string, status: string, timeoutMs = 10_000): Promise<Record<string, any>> {
  return waitFor(`delivery ${eventId} to be ${status}`, async () => {
    const row = await deliveryOf(db, eventId);
    return row?.status === status ? row : undefined;
  }, timeoutMs);
}

export { deleteNamespaceStreams, openTestDatabase } from '../../../test/support/services.ts';
