// The operations a running session answers (SessionRuntime.call): `pairing-code` {phone} → {code, expiresAt}
// and `sandbox.<op>` (DESIGN §6). Shared by the local runtime and the cluster RPC server.
import { problems } from '@switchboard/core';
import type { SessionWorker } from './worker.ts';

export const SANDBOX_OPS = ['scan', 'pair', 'inbound', 'presence', 'drop'] as const;

const PAIRING_PHONE = /^\d{8,15}$/;

export async function callSessionOp(worker: SessionWorker, op: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  if (op === 'pairing-code') {
    const phone = body?.phone;
    if (typeof phone !== 'string' || !PAIRING_PHONE.test(phone)) {
      throw problems.validation([{ path: 'phone', message: 'must be digits only: country code, area code and number' }]);
    }
    const driver = worker.requireDriver();
    if (worker.state === 'connected') throw problems.conflict('already_connected', 'The instance is already connected.');
    const { code, expiresAt } = await driver.requestPairingCode(phone);
    return { code, expiresAt: expiresAt.toISOString() };
  }
  if (op.startsWith('sandbox.')) {
    const sandboxOp = op.slice('sandbox.'.length);
    const driver = worker.requireDriver();
    if (!driver.sandbox) throw problems.notFound('Sandbox control');
    return driver.sandbox(sandboxOp, body ?? {});
  }
  throw problems.notFound(`Session operation "${op}"`);
}
