// IpRangeSet: a set of IPv4 and IPv6 addresses given as single addresses, CIDRs
// or explicit ranges. It is the matcher behind `ip.src in {...}` and `in $list`.

import { quoteInput } from '../errors/index.js';
import { compareWords, parseCidr, parseIp, prefixLast, type IpAddress } from './ip.js';
import { Ip6RangeSet, NumberRangeSet } from './range-set.js';

/** What the compiled language asks of a list: allocation-free membership tests. */
export interface IpMatcher {
  contains4(addr: number): boolean;
  contains6(w0: number, w1: number, w2: number, w3: number): boolean;
  /**
   * Optional fast path: the packet path has already looked the addresses up and
   * stored each list's membership as bit `bit` of an int field; `slotFor` names
   * that field's int slot for an address field (`ip.src`, `ip.dst`), or undefined;
   * `lazyFor` its lazy group (see ExecutionContext.pending), -1 when it is always written.
   */
  readonly precomputed?: {
    readonly bit: number;
    slotFor(field: string): number | undefined;
    lazyFor?(field: string): number;
  } | undefined;
}

/** One entry: a single address, a CIDR or a range, as inclusive bounds of one family. */
export interface IpRange {
  readonly family: 4 | 6;
  readonly first: readonly number[];
  readonly last: readonly number[];
}

/** Parses one entry (`1.2.3.4`, `10.0.0.0/8`, `a..b`); returns an error string on bad input. */
export function parseIpRange(text: string): IpRange | string {
  const dots = text.indexOf('..');
  if (dots >= 0) {
    const a = parseIp(text.slice(0, dots));
    const b = parseIp(text.slice(dots + 2));
    if (a === undefined || b === undefined) return `invalid IP range ${quoteInput(text)}`;
    if (a.family !== b.family) return `IP range ${quoteInput(text)} mixes IPv4 and IPv6`;
    if (compareWords(a.words, b.words) > 0) return `IP range ${quoteInput(text)} ends before it starts`;
    return { family: a.family, first: a.words, last: b.words };
  }
  if (text.includes('/')) {
    const r = parseCidr(text);
    if (!r.ok) {
      if (r.reason === 'host-bits') return `CIDR ${quoteInput(text)} has host bits set (did you mean ${r.network}?)`;
      return r.reason === 'length' ? `invalid prefix length in ${quoteInput(text)}` : `invalid CIDR ${quoteInput(text)}`;
    }
    return { family: r.prefix.address.family, first: r.prefix.address.words, last: prefixLast(r.prefix).words };
  }
  const a: IpAddress | undefined = parseIp(text);
  if (a === undefined) return `invalid IP address ${quoteInput(text)}`;
  return { family: a.family, first: a.words, last: a.words };
}

/** A set of IPv4 and IPv6 ranges, merged and searchable without allocation. */
export class IpRangeSet implements IpMatcher {
  readonly v4: NumberRangeSet;
  readonly v6: Ip6RangeSet;

  constructor(ranges: readonly IpRange[]) {
    this.v4 = new NumberRangeSet(ranges.filter((r) => r.family === 4).map((r) => [r.first[0]!, r.last[0]!] as const));
    this.v6 = new Ip6RangeSet(ranges.filter((r) => r.family === 6).map((r) => [r.first, r.last] as const));
  }

  /** Builds a set from entry strings; throws on the first bad entry. */
  static fromStrings(entries: readonly string[]): IpRangeSet {
    return new IpRangeSet(
      entries.map((e) => {
        const r = parseIpRange(e.trim());
        if (typeof r === 'string') throw new Error(r);
        return r;
      }),
    );
  }

  contains4(addr: number): boolean {
    return this.v4.has(addr);
  }

  contains6(w0: number, w1: number, w2: number, w3: number): boolean {
    return this.v6.has(w0, w1, w2, w3);
  }
}

/** The empty list: what a managed list with no contents loaded matches. */
export const EMPTY_IP_SET: IpMatcher = new IpRangeSet([]);
