// Which addresses a webhook may be delivered to. A control plane that POSTs
// to URLs its users give is a server-side request forgery vector: a webhook
// pointed at 169.254.169.254 or 127.0.0.1:8080 would make Moat read a cloud
// metadata service or call its own admin ports. So, unless the operator allows
// it (`moat serve --allow-private-webhooks`, for labs and tests), a webhook
// host must resolve only to public addresses, checked when the destination is
// saved and again at every connection (the lookup of each request goes through
// here, so a name re-pointed after the check - DNS rebinding - is refused too).

import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP } from 'node:net';

/** Why an address is refused, or undefined when it is a public unicast address. */
export function refusedAddress(address: string): string | undefined {
  const family = isIP(address);
  if (family === 4) return refusedV4(address);
  if (family === 6) {
    const a = address.toLowerCase();
    // IPv4-mapped (::ffff:a.b.c.d) is the IPv4 address.
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
    if (mapped !== null) return refusedV4(mapped[1]!);
    const words = expandV6(a);
    if (words.every((w) => w === 0)) return 'unspecified';
    if (words.slice(0, 7).every((w) => w === 0) && words[7] === 1) return 'loopback';
    const w0 = words[0]!;
    if ((w0 & 0xffc0) === 0xfe80) return 'link-local';
    if ((w0 & 0xfe00) === 0xfc00) {
      // fd00:ec2::254 is AWS's metadata service over IPv6.
      return a === 'fd00:ec2::254' ? 'metadata' : 'private (unique local)';
    }
    if ((w0 & 0xff00) === 0xff00) return 'multicast';
    return undefined;
  }
  return 'not an IP address';
}

function refusedV4(address: string): string | undefined {
  const [a, b] = address.split('.').map(Number) as [number, number, number, number];
  if (address === '169.254.169.254' || address === '100.100.100.200') return 'metadata';
  if (a === 0) return 'unspecified';
  if (a === 127) return 'loopback';
  if (a === 169 && b === 254) return 'link-local';
  if (a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168)) return 'private';
  if (a === 100 && b >= 64 && b <= 127) return 'private (carrier-grade NAT)';
  if (a >= 224) return 'multicast or reserved';
  return undefined;
}

function expandV6(a: string): number[] {
  const [head, tail] = a.includes('::') ? a.split('::') : [a, undefined];
  const h = head === '' || head === undefined ? [] : head.split(':');
  const t = tail === undefined || tail === '' ? [] : tail.split(':');
  const fill = tail === undefined ? [] : new Array<string>(8 - h.length - t.length).fill('0');
  return [...h, ...fill, ...t].map((x) => parseInt(x, 16) || 0);
}

/** A resolver: the addresses of a host name (injected in tests). */
export type Resolver = (host: string) => Promise<string[]>;

/** The system resolver (getaddrinfo, as connections use). */
export const systemResolver: Resolver = (host) =>
  new Promise((resolve, reject) => {
    dnsLookup(host, { all: true }, (err, addresses: LookupAddress[]) => (err ? reject(err) : resolve(addresses.map((x) => x.address))));
  });

/** The host of a URL as a bare name or address (IPv6 brackets removed). */
export function urlHost(url: URL): string {
  return url.hostname.replace(/^\[|\]$/g, '');
}

/**
 * Why a webhook URL is refused (not http(s), or its host is or resolves to a
 * refused address), or undefined when it may be used. `allowPrivate` lifts the
 * address check only.
 */
export async function webhookUrlProblem(url: URL, allowPrivate: boolean, resolve: Resolver = systemResolver): Promise<{ kind: 'scheme' | 'address' | 'resolve'; message: string } | undefined> {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return { kind: 'scheme', message: `the URL must be http or https, not ${url.protocol.replace(/:$/, '')}` };
  if (allowPrivate) return undefined;
  const host = urlHost(url);
  let addresses: string[];
  if (isIP(host) !== 0) addresses = [host];
  else {
    try {
      addresses = await resolve(host);
    } catch (err) {
      return { kind: 'resolve', message: `the host ${host} does not resolve: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` };
    }
  }
  for (const address of addresses) {
    const why = refusedAddress(address);
    if (why !== undefined) return { kind: 'address', message: `the host ${host} resolves to ${address}, a ${why} address` };
  }
  return undefined;
}

/**
 * A `lookup` for http.request that refuses hosts resolving to refused
 * addresses (the connection then fails with an error whose code is
 * MOAT_REFUSED_ADDRESS).
 */
export function guardedLookup(allowPrivate: boolean): typeof dnsLookup {
  const lookup = (hostname: string, options: unknown, callback: (...args: unknown[]) => void): void => {
    dnsLookup(hostname, { ...(options as object), all: true }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err);
      if (!allowPrivate) {
        for (const a of addresses) {
          const why = refusedAddress(a.address);
          if (why !== undefined) {
            const e = Object.assign(new Error(`${hostname} resolves to ${a.address}, a ${why} address`), { code: 'MOAT_REFUSED_ADDRESS' });
            return callback(e);
          }
        }
      }
      if ((options as { all?: boolean }).all === true) return callback(null, addresses);
      const first = addresses[0]!;
      callback(null, first.address, first.family);
    });
  };
  return lookup as unknown as typeof dnsLookup;
}
