// The flattened form of a GeoIP database that the AddressTable (src/table/)
// consumes: sorted, disjoint, inclusive ranges per address family with one int32
// value each. src/geoip/ produces it from a MaxMind DB; it is defined here, below
// both, so that neither depends on the other.

/**
 * An IPv6 prefix at which the database answers with the record of an IPv4
 * address embedded in the IPv6 address: bits `length .. length+31` of the
 * IPv6 address are the IPv4 address. In an IPv6 MaxMind DB, `::/96` is where
 * IPv4 lives; GeoLite2 also points `::ffff:0:0/96` (IPv4-mapped) and
 * `2002::/16` (6to4) at it.
 */
export interface Ipv4Alias {
  /** The prefix as four uint32 words (host bits zero). */
  readonly prefix: readonly number[];
  /** Prefix length, 0..96. */
  readonly length: number;
}

/**
 * GeoIP data as ranges. IPv4 range i is `v4First[i]..v4Last[i]` with value
 * `v4Value[i]`; IPv6 range j is `v6First[4j..4j+3]..v6Last[4j..4j+3]` with
 * value `v6Value[j]`. Ranges are sorted, disjoint, never empty-valued
 * (addresses without data are simply not covered), and adjacent ranges have
 * different values. IPv6 ranges hold native IPv6 data only: the regions listed
 * in `v6Aliases` (IPv4 at ::/96 and its aliases) are not expanded.
 */
export interface GeoRangeTable {
  readonly v4First: Uint32Array;
  readonly v4Last: Uint32Array;
  readonly v4Value: Int32Array;
  readonly v6First: Uint32Array;
  readonly v6Last: Uint32Array;
  readonly v6Value: Int32Array;
  readonly v6Aliases: readonly Ipv4Alias[];
}

/** Country data: a value is an index into `codes` (ISO 3166-1 alpha-2, upper case). */
export interface CountryRanges extends GeoRangeTable {
  readonly codes: readonly string[];
}

/**
 * ASN data: a value is the AS number as an int32 bit pattern (`asn | 0`), so AS
 * numbers above 2^31-1 (private 4-byte ASNs) read back with `value >>> 0`.
 * 4294967295 (-1 as int32) is reserved (RFC 7300) and never stored.
 */
export type AsnRanges = GeoRangeTable;

/** The value of "no data" where a single value is returned (ranges themselves never carry it). */
export const GEO_NONE = -1;

/** The AS number of an ASN range value: a uint32, or NaN for GEO_NONE. */
export function asnOfValue(value: number): number {
  return value === GEO_NONE ? NaN : value >>> 0;
}

/**
 * The IPv4 address embedded in an IPv6 address when it lies in one of the
 * alias prefixes, as a uint32; -1 when it lies in none.
 */
export function embeddedIpv4(aliases: readonly Ipv4Alias[], w0: number, w1: number, w2: number, w3: number): number {
  for (let i = 0; i < aliases.length; i++) {
    const a = aliases[i]!;
    const p = a.prefix;
    const len = a.length;
    // Compare the first `len` bits.
    let ok = true;
    for (let k = 0; k < 4 && ok; k++) {
      const keep = len - 32 * k;
      if (keep <= 0) break;
      const w = k === 0 ? w0 : k === 1 ? w1 : k === 2 ? w2 : w3;
      const mask = keep >= 32 ? 0xffffffff : ~(0xffffffff >>> keep);
      if (((w ^ p[k]!) & mask) !== 0) ok = false;
    }
    if (!ok) continue;
    // Extract bits len..len+31.
    const k = len >>> 5;
    const s = len & 31;
    const hi = k === 0 ? w0 : k === 1 ? w1 : k === 2 ? w2 : w3;
    if (s === 0) return hi >>> 0;
    const lo = k === 0 ? w1 : k === 1 ? w2 : w3;
    return ((hi << s) | (lo >>> (32 - s))) >>> 0;
  }
  return -1;
}
