// What to do when the socket closes, by Baileys' DisconnectReason code, and how long to wait
// before reconnecting.
import { DisconnectReason } from '@whiskeysockets/baileys';

export type CloseAction =
  /** Pairing finished (515): the server wants a fresh connection with the new credentials. */
  | { kind: 'restart' }
  /** Transient (408/428/500/503/unknown): reconnect with backoff. */
  | { kind: 'reconnect'; reason: string }
  /** The device is unlinked or refused (401/403/411): clear credentials, stop. */
  | { kind: 'logged_out'; reason: string }
  /** Another socket took over this account (440): reconnecting blindly would fight it. */
  | { kind: 'replaced'; reason: string };

/** The status code of a Baileys close error (a Boom), if any. */
export function closeCode(error: unknown): number | undefined {
  const e = error as { output?: { statusCode?: unknown }; statusCode?: unknown } | undefined;
  const code = e?.output?.statusCode ?? e?.statusCode;
  return typeof code === 'number' ? code : undefined;
}

export function closeAction(code: number | undefined): CloseAction {
  switch (code) {
    case DisconnectReason.restartRequired:
      return { kind: 'restart' };
    case DisconnectReason.loggedOut:
      return { kind: 'logged_out', reason: 'logged_out' };
    case DisconnectReason.forbidden:
      return { kind: 'logged_out', reason: 'forbidden' };
    case DisconnectReason.multideviceMismatch:
      return { kind: 'logged_out', reason: 'multidevice_mismatch' };
    case DisconnectReason.connectionReplaced:
      return { kind: 'replaced', reason: 'connection_replaced' };
    case DisconnectReason.connectionLost: // also timedOut (same code)
      return { kind: 'reconnect', reason: 'connection_lost' };
    case DisconnectReason.connectionClosed:
      return { kind: 'reconnect', reason: 'connection_closed' };
    case DisconnectReason.badSession:
      return { kind: 'reconnect', reason: 'bad_session' };
    case DisconnectReason.unavailableService:
      return { kind: 'reconnect', reason: 'service_unavailable' };
    default:
      return { kind: 'reconnect', reason: code === undefined ? 'connection_error' : `closed_${code}` };
  }
}

export interface BackoffOptions {
  baseMs: number;
  maxMs: number;
  /** Fraction of the delay added or removed at random (0.2 → ±20 %). */
  jitter: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 1_000, maxMs: 60_000, jitter: 0.2 };

/** Delay before reconnect attempt number `attempt` (0-based): exponential, capped, jittered. */
export function backoffDelay(attempt: number, opts: BackoffOptions, random: () => number = Math.random): number {
  const exponential = Math.min(opts.maxMs, opts.baseMs * 2 ** Math.min(attempt, 30));
  const spread = exponential * opts.jitter * (random() * 2 - 1);
  return Math.max(0, Math.round(exponential + spread));
}
