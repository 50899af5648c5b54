// Save-time rules for webhook destinations (spec: "public HTTPS URL on port 443, or empty").
// Addresses are checked again at connect time by the dispatcher, which covers DNS rebinding.
import { isIP } from 'node:net';
import { isPrivateHostName, isPublicAddress, resolveHostAddresses } from '@switchboard/core';

/** Returns why `value` is not an acceptable destination, or undefined when it is. */
export function webhookUrlProblem(value: string, allowPrivateTargets: boolean): string | undefined {
  if (value === '') return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'must be an absolute https:// URL or an empty string';
  }
  if (url.protocol !== 'https:') return 'must use https';
  // The parser repairs `https:host/x`, `https:\\host`, a tab inside the host; what is stored and
  // shown is what was sent, so only a URL written as it is read is taken.
  if (!/^https:\/\/[^/\\]/i.test(value) || /[\s\\]/.test(value)) return 'must be an absolute https:// URL or an empty string';
  if (value.slice('https://'.length).split(/[/?#]/, 1)[0].includes('@')) return 'must not carry credentials'; // even empty ones
  if (allowPrivateTargets) return undefined;
  if (url.port !== '' && url.port !== '443') return 'must use port 443';
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host)) return isPublicAddress(host) ? undefined : 'must be a public address';
  if (isPrivateHostName(host)) return 'must be a public host name';
  return undefined;
}

export type ResolveHost = (host: string) => Promise<string[]>;

/**
 * Save-time resolution (DESIGN §5: a non-public destination is a 400 at save time): a host name
 * with any non-public address is refused now, rather than accepted and never delivered to. A name
 * that does not resolve (yet, or within `timeoutMs`) is accepted: the dispatcher resolves again
 * before every connection. Call it only for URLs webhookUrlProblem accepted.
 */
export async function resolvedHostProblem(value: string, allowPrivateTargets: boolean, resolve: ResolveHost = resolveHostAddresses, timeoutMs = 2000): Promise<string | undefined> {
  if (value === '' || allowPrivateTargets) return undefined;
  const host = new URL(value).hostname;
  if (isIP(host.replace(/^\[|\]$/g, ''))) return undefined; // an address is judged as written
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<string[]>((done) => (timer = setTimeout(() => done([]), timeoutMs)));
  const addresses = await Promise.race([resolve(host).catch(() => []), gaveUp]).finally(() => clearTimeout(timer));
  return addresses.every(isPublicAddress) ? undefined : 'must resolve to public addresses only';
}
