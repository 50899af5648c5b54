// Save-time rules for webhook destinations (spec: "public HTTPS URL on port 443, or empty").
// Addresses are checked again at connect time by the dispatcher, which covers DNS rebinding.
import { isIP } from 'node:net';
import { isPrivateHostName, isPublicAddress } from '@switchboard/core';

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
  if (url.username || url.password) return 'must not carry credentials';
  if (allowPrivateTargets) return undefined;
  if (url.port !== '' && url.port !== '443') return 'must use port 443';
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host)) return isPublicAddress(host) ? undefined : 'must be a public address';
  if (isPrivateHostName(host)) return 'must be a public host name';
  return undefined;
}
