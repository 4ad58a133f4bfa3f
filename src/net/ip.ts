// IP address primitives shared by the language, the decoder and the control plane.
// IPv4 is a uint32 number; IPv6 is four uint32 words, most significant first.
// Parsing is strict (four-part decimal IPv4, no zone ids) and happens off the hot path.

import ipaddr from 'ipaddr.js';

/** A parsed address: `words` has 1 entry for IPv4, 4 for IPv6. */
export interface IpAddress {
  readonly family: 4 | 6;
  readonly words: readonly number[];
}

const V4_STRICT = /^(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})$/;

/** Parses a strict dotted-quad IPv4 address (no leading zeros) to a uint32, or -1. */
export function parseIpv4(text: string): number {
  const m = V4_STRICT.exec(text);
  if (m === null) return -1;
  let v = 0;
  for (let i = 1; i <= 4; i++) {
    const o = Number(m[i]);
    if (o > 255) return -1;
    v = v * 256 + o;
  }
  return v;
}

/** Parses an IPv4 or IPv6 address; returns undefined when the text is not one. */
export function parseIp(text: string): IpAddress | undefined {
  if (text.includes(':')) {
    // ipaddr.js accepts zone ids ("fe80::1%eth0"); addresses in rules have none.
    if (text.includes('%') || !ipaddr.IPv6.isValid(text)) return undefined;
    let parts: number[];
    try {
      parts = ipaddr.IPv6.parse(text).parts;
    } catch {
      return undefined;
    }
    const words = [0, 0, 0, 0];
    for (let i = 0; i < 4; i++) words[i] = parts[2 * i]! * 0x10000 + parts[2 * i + 1]!;
    return { family: 6, words };
  }
  const v4 = parseIpv4(text);
  return v4 < 0 ? undefined : { family: 4, words: [v4] };
}

/** Formats a uint32 as dotted-quad IPv4. */
export function formatIpv4(v: number): string {
  return `${v >>> 24}.${(v >>> 16) & 255}.${(v >>> 8) & 255}.${v & 255}`;
}

/** Formats four uint32 words as canonical (RFC 5952) IPv6 text. */
export function formatIpv6(w0: number, w1: number, w2: number, w3: number): string {
  const parts = [w0 >>> 16, w0 & 0xffff, w1 >>> 16, w1 & 0xffff, w2 >>> 16, w2 & 0xffff, w3 >>> 16, w3 & 0xffff];
  return ipaddr.fromByteArray(parts.flatMap((p) => [p >> 8, p & 255])).toString();
}

/** Formats a parsed address. */
export function formatIp(a: IpAddress): string {
  return a.family === 4 ? formatIpv4(a.words[0]!) : formatIpv6(a.words[0]!, a.words[1]!, a.words[2]!, a.words[3]!);
}

/** A network prefix: the address with host bits zero, and the prefix length. */
export interface IpPrefix {
  readonly address: IpAddress;
  readonly length: number;
}

/** Result of parsing CIDR text: a prefix, or the reason it is not one. */
export type CidrResult =
  | { ok: true; prefix: IpPrefix }
  | { ok: false; reason: 'address' | 'length' | 'host-bits'; network?: string };

/** Returns the address with every bit past `length` cleared. */
export function maskAddress(a: IpAddress, length: number): IpAddress {
  const words = a.words.slice();
  for (let i = 0; i < words.length; i++) {
    const keep = Math.max(0, Math.min(32, length - 32 * i));
    words[i] = keep === 0 ? 0 : keep === 32 ? words[i]! : (words[i]! & ~(0xffffffff >>> keep)) >>> 0;
  }
  return { family: a.family, words };
}

/** Parses `addr/len`; host bits must be zero (the canonical network is returned in the error). */
export function parseCidr(text: string): CidrResult {
  const slash = text.indexOf('/');
  const addr = parseIp(text.slice(0, slash));
  if (addr === undefined) return { ok: false, reason: 'address' };
  const lenText = text.slice(slash + 1);
  const max = addr.family === 4 ? 32 : 128;
  if (!/^(0|[1-9]\d{0,2})$/.test(lenText) || Number(lenText) > max) return { ok: false, reason: 'length' };
  const length = Number(lenText);
  const net = maskAddress(addr, length);
  if (net.words.some((w, i) => w !== addr.words[i])) {
    return { ok: false, reason: 'host-bits', network: `${formatIp(net)}/${length}` };
  }
  return { ok: true, prefix: { address: net, length } };
}

/** The last address of a prefix (all host bits set). */
export function prefixLast(p: IpPrefix): IpAddress {
  const words = p.address.words.slice();
  for (let i = 0; i < words.length; i++) {
    const keep = Math.max(0, Math.min(32, p.length - 32 * i));
    words[i] = keep === 32 ? words[i]! : (words[i]! | (0xffffffff >>> keep)) >>> 0;
  }
  return { family: p.address.family, words };
}

/** Compares two addresses of one family word by word: negative, zero or positive. */
export function compareWords(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
  }
  return 0;
}
