// The address table's screens: bitmaps with one bit per /24 (IPv4, or the first
// 24 bits of IPv6) that prove without a lookup that an address is in no list
// (list screens) or that its record fails a test of country or AS number (value screens).

import type { Ipv4Alias, IpRangeList } from '../net/index.js';
import { REC_ASN, REC_COUNTRY, REC_HAS_ASN } from './layout.js';

/** The bit of a screen (listScreen4, valueScreen...) for the address whose first (or only) word is `w`. */
export function screenHas(screen: Uint32Array, w: number): boolean {
  return ((screen[w >>> 13]! >>> ((w >>> 8) & 31)) & 1) === 1;
}

/** Whether `v` lies in one of the inclusive ranges [lo, hi, lo, hi, ...] (NaN never does). */
export function inRanges(ranges: readonly number[], v: number): boolean {
  for (let i = 0; i < ranges.length; i += 2) if (v >= ranges[i]! && v <= ranges[i + 1]!) return true;
  return false;
}

/** What a value screen is built from: AddressTable's arrays of the same names. */
export interface ScreenSource {
  readonly rec4: Int32Array;
  readonly rec6: Int32Array;
  readonly starts4: Uint32Array;
  readonly record4: Uint32Array;
  readonly starts6: Uint32Array;
  readonly record6: Uint32Array;
  readonly aliases6: readonly Ipv4Alias[];
}

/** Builds the value screen of `family` for a record test over `countries` and `asns` (see AddressTable.valueScreen). */
export function buildValueScreen(t: ScreenSource, family: 4 | 6, countries: readonly number[], asns: readonly number[]): Uint32Array {
  const rec = family === 4 ? t.rec4 : t.rec6;
  const accepted = new Uint8Array(rec.length / 4);
  for (let r = 0; r < accepted.length; r++) {
    const o = r * 4;
    accepted[r] = countries.includes(rec[o + REC_COUNTRY]!) || (rec[o + REC_HAS_ASN] === 1 && inRanges(asns, rec[o + REC_ASN]! >>> 0)) ? 1 : 0;
  }
  const screen = new Uint32Array(1 << 19);
  if (family === 4) {
    const starts = t.starts4;
    const records = t.record4;
    for (let s = 0; s < starts.length; s++) {
      if (accepted[records[s]!] === 1) setBits(screen, starts[s]! >>> 8, s + 1 < starts.length ? (starts[s + 1]! - 1) >>> 8 : 0xffffff);
    }
  } else {
    const st = t.starts6;
    const n = t.record6.length;
    for (let s = 0; s < n; s++) {
      // Up to the first word of the next start: at most one /24 more than the segment meets.
      if (accepted[t.record6[s]!] === 1) setBits(screen, st[s * 4]! >>> 8, s + 1 < n ? st[(s + 1) * 4]! >>> 8 : 0xffffff);
    }
    for (const al of t.aliases6) {
      const lo = al.prefix[0]! >>> 8;
      setBits(screen, lo, al.length >= 24 ? lo : lo + 2 ** (24 - al.length) - 1);
    }
  }
  return screen;
}

// The list screen of one family (see AddressTable.listScreen4): one bit per
// value of the top 24 bits, set over every range of every list; null when no
// list has a range of the family.
export function listScreen(lists: readonly IpRangeList[], words: 1 | 4): Uint32Array | null {
  let screen: Uint32Array | null = null;
  for (const l of lists) {
    const first = words === 1 ? l.v4First : l.v6First;
    const last = words === 1 ? l.v4Last : l.v6Last;
    for (let o = 0; o < first.length; o += words) {
      screen ??= new Uint32Array(1 << 19);
      setBits(screen, first[o]! >>> 8, last[o]! >>> 8);
    }
  }
  return screen;
}

// Sets bits lo..hi (inclusive) of a bitmap of uint32 words.
function setBits(screen: Uint32Array, lo: number, hi: number): void {
  for (let k = lo; k <= hi;) {
    if ((k & 31) === 0 && k + 31 <= hi) {
      screen[k >>> 5] = 0xffffffff;
      k += 32;
    } else {
      screen[k >>> 5]! |= 1 << (k & 31);
      k++;
    }
  }
}
