// Lookups on one flattened GeoIP table, by binary search. These answer exactly
// what the maxmind Reader answers (tests check it); the packet path uses the
// merged AddressTable instead, which answers every source with one lookup.

import { embeddedIpv4, GEO_NONE, type GeoRangeTable } from '../net/index.js';

/** The value for an IPv4 address (uint32), or GEO_NONE. */
export function geoValue4(t: GeoRangeTable, addr: number): number {
  const first = t.v4First;
  let a = 0;
  let b = first.length - 1;
  // Last range whose first <= addr.
  while (a <= b) {
    const m = (a + b) >>> 1;
    if (first[m]! <= addr) a = m + 1;
    else b = m - 1;
  }
  return b >= 0 && addr <= t.v4Last[b]! ? t.v4Value[b]! : GEO_NONE;
}

/**
 * The value for an IPv6 address. With `followAliases` (the default) an address
 * in ::/96 or in a prefix the database aliases to IPv4 (::ffff:0:0/96,
 * 2002::/16 in GeoLite2) gets the value of its embedded IPv4 address, as the
 * Reader gives it; without, it gets only native IPv6 data (GEO_NONE there).
 */
export function geoValue6(t: GeoRangeTable, w0: number, w1: number, w2: number, w3: number, followAliases = true): number {
  if (followAliases && t.v6Aliases.length > 0) {
    const v4 = embeddedIpv4(t.v6Aliases, w0, w1, w2, w3);
    if (v4 >= 0) return geoValue4(t, v4);
  }
  const f = t.v6First;
  let a = 0;
  let b = t.v6Value.length - 1;
  while (a <= b) {
    const m = (a + b) >>> 1;
    if (cmp4(f, m * 4, w0, w1, w2, w3) <= 0) a = m + 1;
    else b = m - 1;
  }
  return b >= 0 && cmp4(t.v6Last, b * 4, w0, w1, w2, w3) >= 0 ? t.v6Value[b]! : GEO_NONE;
}

/** Compares words[o..o+3] with w0..w3: negative, zero or positive. */
function cmp4(words: Uint32Array, o: number, w0: number, w1: number, w2: number, w3: number): number {
  if (words[o] !== w0) return words[o]! < w0 ? -1 : 1;
  if (words[o + 1] !== w1) return words[o + 1]! < w1 ? -1 : 1;
  if (words[o + 2] !== w2) return words[o + 2]! < w2 ? -1 : 1;
  if (words[o + 3] !== w3) return words[o + 3]! < w3 ? -1 : 1;
  return 0;
}
