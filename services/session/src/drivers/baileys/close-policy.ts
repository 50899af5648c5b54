// What to do when the socket closes, by Baileys' DisconnectReason code, and how long to wait
// before reconnecting.
import { DisconnectReason } from '@whiskeysockets/baileys';

export type CloseAction =
  /** Pairing finished (515): the server wants a fresh connection with the new credentials. */
  | { kind: 'restart' }
  /** Transient (402/405/408/428/500/503/unknown): reconnect with backoff. */
  | { kind: 'reconnect'; reason: string }
  /** The device is unlinked or refused (401/403/406/411): clear credentials, stop. */
  | { kind: 'logged_out'; reason: string }
  /** Another socket took over this account (440): reconnecting blindly would fight it. */
  | { kind: 'replaced'; reason: string };

/** The status code of a Baileys close error (a Boom), if any. */
export function closeCode(error: unknown): number | undefined {
  const e = error as { output?: { statusCode?: unknown }; statusCode?: unknown } | undefined;
  const code = e?.output?.statusCode ?? e?.statusCode;
  return typeof code === 'number' ? code : undefined;
}

/** A request the connection's close refused before it was written: Baileys throws 428 for a
 *  stanza to a closed socket, and rejects a query still waiting when the WebSocket closes with
 *  the close code itself (a number such as 1006, from its waitForMessage). Neither left. */
export function closedUnder(error: unknown): boolean {
  return typeof error === 'number' || closeCode(error) === DisconnectReason.connectionClosed;
}

/** We ended a socket ourselves because it can no longer do something a new one can: reconnect,
 *  with the reason it names. */
class SocketRenewal extends Error {
  constructor(readonly reason: string) {
    super(`socket renewed: ${reason}`);
  }
}

export function socketRenewal(reason: string): Error {
  return new SocketRenewal(reason);
}

/** Socket errors that mean the WhatsApp servers could not be reached at all (DNS, routing, refusal). */
const UNREACHABLE_ERRNOS = new Set(['ENOTFOUND', 'EAI_AGAIN', 'ECONNREFUSED', 'ENETUNREACH', 'EHOSTUNREACH', 'ETIMEDOUT', 'ENETDOWN']);

/** The errno of the network error behind a close (Baileys keeps the WebSocket error as Boom `data`). */
function errnoOf(error: unknown): string | undefined {
  const data = (error as { data?: { code?: unknown } } | undefined)?.data;
  return typeof data?.code === 'string' ? data.code : undefined;
}

/**
 * What to do after a close. The error refines the reason of a transient close, so that clients
 * (connection.update `reason`) and operators can tell "no route to WhatsApp" and "nobody scanned
 * the QR in time" from an ordinary drop; the action stays the same.
 */
export function closeAction(code: number | undefined, error?: unknown): CloseAction {
  if (error instanceof SocketRenewal) return { kind: 'reconnect', reason: error.reason };
  const action = actionByCode(code);
  if (action.kind !== 'reconnect') return action;
  const errno = errnoOf(error);
  if (errno && UNREACHABLE_ERRNOS.has(errno)) return { kind: 'reconnect', reason: 'server_unreachable' };
  // Baileys ends the socket with 408 once every QR of the pairing session was shown unscanned.
  if (/QR refs attempts ended/i.test((error as Error | undefined)?.message ?? '')) return { kind: 'reconnect', reason: 'qr_expired' };
  return action;
}

/** A short, secret-free description of a close error for the logs. */
export function closeDetail(error: unknown): string | undefined {
  const message = (error as Error | undefined)?.message;
  if (!message) return undefined;
  return message.replace(/[a-z]+:\/\/\S+/gi, '<url>').slice(0, 200);
}

// Failure reasons of WhatsApp's login (Baileys passes them on as the close code, without names).
/** The account may not connect for a while: retried with the backoff, named for the operator. */
const TEMPORARILY_BANNED = 402;
/** A client version WhatsApp has retired. */
const CLIENT_OUTDATED = 405;
/** The server ended the device's login for a reason it does not give (a ban among them): like a
 *  logout, no reconnect brings it back. */
const UNKNOWN_LOGOUT = 406;

function actionByCode(code: number | undefined): CloseAction {
  switch (code) {
    case DisconnectReason.restartRequired:
      return { kind: 'restart' };
    case DisconnectReason.loggedOut:
      return { kind: 'logged_out', reason: 'logged_out' };
    case DisconnectReason.forbidden:
      return { kind: 'logged_out', reason: 'forbidden' };
    case DisconnectReason.multideviceMismatch:
      return { kind: 'logged_out', reason: 'multidevice_mismatch' };
    case UNKNOWN_LOGOUT:
      return { kind: 'logged_out', reason: 'unknown_logout' };
    case TEMPORARILY_BANNED:
      return { kind: 'reconnect', reason: 'temporarily_banned' };
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
    case CLIENT_OUTDATED:
      return { kind: 'reconnect', reason: 'client_outdated' };
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
