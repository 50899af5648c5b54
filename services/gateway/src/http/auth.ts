// Credentials (spec "Authentication"): the administrative key, an instance token (`sbi_…`) or an
// integration key (`sbk_…`). Tokens are looked up by keyed hash, so neither the database nor a
// timing difference reveals them; revocation and renewal take effect on the next request.
import type { Context } from 'koa';
import { timingSafeEqual } from 'node:crypto';
import { problems, TOKEN_PREFIXES } from '@switchboard/core';
import type { GatewayDeps } from '../deps.ts';
import type { CredentialAuth } from './route.ts';

export type Principal =
  | { kind: 'admin' }
  | {
      kind: 'instance';
      instanceId: string;
      via: 'token' | 'app';
      /** The instance's row, read by the token lookup itself: the hot send path needs no second read. */
      row?: Record<string, any>;
    };

export const INSTANCE_TOKEN_PREFIX = TOKEN_PREFIXES.instance;
export const APP_KEY_PREFIX = TOKEN_PREFIXES.integration;

export function bearerToken(ctx: Context): string | undefined {
  const header = ctx.get('authorization');
  const match = /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  return match?.[1];
}

/** The administrative key's keyed hash, worked out once per app: every request's token is hashed
 *  once and compared to it in constant time. */
const adminKeyHashes = new WeakMap<GatewayDeps, string>();
function adminKeyHash(deps: GatewayDeps): string {
  let hash = adminKeyHashes.get(deps);
  if (!hash) adminKeyHashes.set(deps, (hash = deps.crypto.hashToken(deps.adminKey)));
  return hash;
}

export async function resolvePrincipal(deps: GatewayDeps, token: string | undefined): Promise<Principal | undefined> {
  if (!token || token.length > 512) return undefined;
  const hash = deps.crypto.hashToken(token);
  if (timingSafeEqual(Buffer.from(hash, 'hex'), Buffer.from(adminKeyHash(deps), 'hex'))) return { kind: 'admin' };
  if (token.startsWith(`${INSTANCE_TOKEN_PREFIX}_`)) {
    const row = await deps.instanceTokens.find(hash);
    return row ? { kind: 'instance', instanceId: row.id, via: 'token', row } : undefined;
  }
  if (token.startsWith(`${APP_KEY_PREFIX}_`)) {
    const row = await deps.db('app_keys').where({ key_hash: hash }).whereNull('revoked_at').first('instance_id');
    return row ? { kind: 'instance', instanceId: row.instance_id, via: 'app' } : undefined;
  }
  return undefined;
}

/** 401 without a valid credential; 403 for a valid one used outside its reach (DESIGN §5). */
export function authorize(auth: CredentialAuth, principal: Principal | undefined, instanceId: string | undefined): void {
  if (!principal) throw problems.unauthorized();
  if (principal.kind === 'admin') return;
  if (auth === 'admin') throw problems.forbidden('This operation needs the administrative key.');
  if (instanceId === undefined || instanceId !== principal.instanceId) throw problems.forbidden('This credential gives access to its own instance only.');
}
