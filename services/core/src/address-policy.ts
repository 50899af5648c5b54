// Which network addresses webhooks may reach: public unicast only. Used at save time (gateway)
// and at connect time (dispatcher egress, which also covers DNS rebinding).
import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

/** Ranges that are not publicly routable unicast: loopback, private, link-local, CGNAT, multicast… */
const NON_PUBLIC_V4: Array<[string, number]> = [
  ['0.0.0.0', 8], // "this network", unspecified
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // CGNAT
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local (cloud metadata lives here)
  ['172.16.0.0', 12],
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.88.99.0', 24], // 6to4 relay anycast
  ['192.168.0.0', 16],
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, and 255.255.255.255 broadcast
];

/**
 * IPv6 is checked as an allow-list: only global unicast (2000::/3) can be public. That excludes
 * ::/128, ::1, IPv4-mapped ::ffff:0:0/96, NAT64 64:ff9b::/96, unique-local fc00::/7, link-local
 * fe80::/10 and multicast ff00::/8. Inside 2000::/3, these special ranges are refused too.
 */
const NON_PUBLIC_V6_IN_GLOBAL: Array<[string, number]> = [
  ['2001::', 23], // IETF protocol assignments (Teredo 2001::/32 embeds IPv4)
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // 6to4 embeds an arbitrary IPv4 address
  ['3fff::', 20], // documentation (RFC 9637)
];

const nonPublic = new BlockList();
for (const [net, prefix] of NON_PUBLIC_V4) nonPublic.addSubnet(net, prefix, 'ipv4');
for (const [net, prefix] of NON_PUBLIC_V6_IN_GLOBAL) nonPublic.addSubnet(net, prefix, 'ipv6');
const globalUnicastV6 = new BlockList();
globalUnicastV6.addSubnet('2000::', 3, 'ipv6');

/** True only for a publicly routable unicast IP address. Anything unparsable is not public. */
export function isPublicAddress(ip: string): boolean {
  const address = ip.replace(/^\[|\]$/g, '').replace(/%.*$/, '');
  const family = isIP(address);
  if (family === 4) return !nonPublic.check(address, 'ipv4');
  if (family === 6) return globalUnicastV6.check(address, 'ipv6') && !nonPublic.check(address, 'ipv6');
  return false;
}

const PRIVATE_NAME = /(^|\.)(localhost|local|localdomain|internal|intranet|lan|home|corp|home\.arpa|svc|cluster\.local)$/i;

/** Host names that can only be private (checked at save time; resolution is checked at connect). */
export function isPrivateHostName(host: string): boolean {
  const name = host.replace(/\.$/, ''); // the root's dot: `vm.` is the single label `vm`
  return PRIVATE_NAME.test(name) || !name.includes('.');
}

/** Every address a host name resolves to, as the system resolver returns them. */
export async function resolveHostAddresses(host: string): Promise<string[]> {
  return (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);
}
