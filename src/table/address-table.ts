// AddressTable: GeoIP country, GeoIP ASN and every IP list merged into one
// sorted segment table per address family, so that one lookup of an address
// gives its country, its AS number and its membership in every list. The
// layout and the lookups; builder.ts makes the arrays, screens.ts the screens.

import { embeddedIpv4, type Ipv4Alias } from '../net/index.js';
import { buildTableParts } from './builder.js';
import type { AddressTableInput, TableParts } from './layout.js';
import { buildValueScreen, screenHas } from './screens.js';

/** Most value screens one table keeps (see valueScreen). */
const MAX_SCREENS = 8;

/**
 * The merged segment tables. Build with {@link AddressTable.build}.
 *
 * A segment is a maximal run of addresses with the same (country, ASN, list
 * bits); segment i of IPv4 covers starts4[i] .. starts4[i+1]-1 (the last one
 * runs to 255.255.255.255), and segment 0 starts at 0.0.0.0, so every address
 * is in exactly one segment. IPv6 is the same with four words per start.
 * IPv6 lookups are a /16 index (65,537 entries: index6[k] is the segment
 * holding the address k::) that bounds a binary search over the starts.
 *
 * IPv4 is laid out for fewer dependent cache misses, which are what a lookup
 * costs (the ~7 MB of a GeoIP + 3 x 100k-list table live in L3, not L1/L2):
 * segments are grouped by /16 "bucket", index4[k] is the first segment that
 * starts in bucket k, and a segment keeps only the low 16 bits of its start,
 * followed by its record index as two more uint16 (seg4: three Uint16 per
 * segment, 6 B): a bucket's segments are a few dozen bytes, one or two cache
 * lines, searched by a short binary search then a linear scan, and the record
 * index of the segment found is in the lines the scan just read, instead of
 * one more miss into a separate record array. Lookups allocate nothing.
 *
 * IPv4-in-IPv6 (decision): an IPv6 address is looked up in IPv6 data only. A
 * GeoIP database answers `::ffff:a.b.c.d`, `::a.b.c.d` and 6to4 `2002:aabb:ccdd::/48`
 * with the embedded IPv4 address's record (GeoLite2 aliases those prefixes to
 * its IPv4 subtree, and tshark, through libmaxminddb, shows that record);
 * copying the IPv4 segments into those IPv6 prefixes would add 2-3 copies of the
 * IPv4 table to the IPv6 one (1M+ segments for a real database) for addresses
 * that do not appear on the wire (RFC 4291 mapped addresses) or belong to a
 * deprecated mechanism (6to4, RFC 7526). So in this table those prefixes carry
 * no country and no ASN (unless the database has native IPv6 data there), and
 * IP lists are matched by family exactly as `ip.src in {...}` is. A caller who
 * wants the database's answer calls `v4Alias6()`, which returns the embedded
 * IPv4 address for an address in one of the database's alias prefixes, and
 * looks that up with `lookup4()`: one extra check, only for such addresses.
 */
export class AddressTable {
  /** ISO codes; `country4[s]`/`country6[s]` index this (-1: no country). */
  readonly countryCodes: readonly string[];
  /** List names, in bit order: bit i of `lists4[s]` is list `listNames[i]`. */
  readonly listNames: readonly string[];

  /**
   * Three uint16 per IPv4 segment, at seg4[3 * s]: the low 16 bits of its start
   * (the top 16 bits are its bucket, see index4), then its record index, high
   * half first (seg4[3s + 1] * 65536 + seg4[3s + 2]).
   */
  readonly seg4: Uint16Array;
  /**
   * index4[k] = the first segment that starts at or after the address k << 16
   * (the number of segments starting below it); index4[65536] = the number of
   * segments. Segments index4[k] .. index4[k+1]-1 start in bucket k.
   */
  readonly index4: Uint32Array;
  /**
   * The records again, packed four int32 per record so that reading all of a
   * record is one cache miss instead of three: [lists, country, ASN bits,
   * 1 when there is an ASN] at rec4[r * 4 + REC_LISTS] etc.
   */
  readonly rec4: Int32Array;
  /**
   * Per record (a distinct (country, ASN, list bits) triple), not per segment:
   * a segment then costs 8 bytes (start and record) instead of 18, which
   * brings 1M IPv4 prefixes from 28.7 MB to about 16 MB
   * (bench/address-table.bench.ts), and a lookup touches one per-segment
   * array plus a table small enough to stay in cache.
   */
  readonly country4: Int16Array;
  /** AS number, NaN when none. */
  readonly asn4: Float64Array;
  readonly lists4: Uint32Array;

  /** IPv6 segment starts, four words each, ascending; the first is ::. */
  readonly starts6: Uint32Array;
  /** index6[k] = segment holding the address (k << 16):: ; index6[65536] = last segment. */
  readonly index6: Uint32Array;
  readonly record6: Uint32Array;
  readonly country6: Int16Array;
  readonly asn6: Float64Array;
  readonly lists6: Uint32Array;
  /** Packed records of IPv6, as rec4. */
  readonly rec6: Int32Array;

  /** The IPv6 prefixes where the GeoIP databases answer with an embedded IPv4 address (see v4Alias6). */
  readonly aliases6: readonly Ipv4Alias[];

  /**
   * List screens: bit k is set when some list range meets the addresses whose
   * top 24 bits are k (an IPv4 /24, an IPv6 /24), so a clear bit proves that
   * the address is in no list without a lookup (see mayBeListed4). 2 MiB
   * each; null when no list has a range of that family (nothing is listed).
   * Lists are sparse beside GeoIP (3 x 100k prefixes mark ~4% of the IPv4
   * /24s), and the screen is one read where a lookup is two or three
   * dependent cache misses (measured: bench/pipeline.bench.ts).
   */
  readonly listScreen4: Uint32Array | null;
  readonly listScreen6: Uint32Array | null;

  private readonly listIndex: ReadonlyMap<string, number>;
  /** Value screens built so far, by question (see valueScreen). */
  private readonly screens = new Map<string, Uint32Array>();

  private constructor(f: TableParts) {
    this.countryCodes = f.countryCodes;
    this.listNames = f.listNames;
    this.seg4 = f.seg4;
    this.index4 = f.index4;
    this.rec4 = f.rec4;
    this.country4 = f.country4;
    this.asn4 = f.asn4;
    this.lists4 = f.lists4;
    this.starts6 = f.starts6;
    this.index6 = f.index6;
    this.record6 = f.record6;
    this.country6 = f.country6;
    this.asn6 = f.asn6;
    this.lists6 = f.lists6;
    this.rec6 = f.rec6;
    this.aliases6 = f.aliases6;
    this.listIndex = new Map(f.listNames.map((n, i) => [n, i]));
    this.listScreen4 = f.listScreen4;
    this.listScreen6 = f.listScreen6;
  }

  /** Merges GeoIP and lists into one table per family. Throws RangeError on more than 32 lists, duplicate names or unsorted GeoIP ranges. */
  static build(input: AddressTableInput): AddressTable {
    return new AddressTable(buildTableParts(input));
  }

  /**
   * A table over arrays buildTableParts made, taken as they are (not copied):
   * those of a table built in a worker thread, whose buffers were transferred.
   */
  static fromParts(parts: TableParts): AddressTable {
    return new AddressTable(parts);
  }

  /** The table's arrays, as fromParts() takes them (the same arrays, not copies). */
  get parts(): TableParts {
    const { countryCodes, listNames, seg4, index4, rec4, country4, asn4, lists4, starts6, index6, record6, country6, asn6, lists6, rec6, aliases6, listScreen4, listScreen6 } = this;
    return { countryCodes, listNames, seg4, index4, rec4, country4, asn4, lists4, starts6, index6, record6, country6, asn6, lists6, rec6, aliases6, listScreen4, listScreen6 };
  }

  /** The value screens built so far (or taken), by the question they answer (as valueScreen keys it). */
  get valueScreens(): ReadonlyMap<string, Uint32Array> {
    return this.screens;
  }

  /**
   * Takes value screens built by a table of the same GeoIP ranges (see
   * shareValueScreens; `valueScreens` of that table): a loader in a worker
   * thread builds them there, from a table of its GeoIP data alone.
   */
  adoptValueScreens(screens: Iterable<readonly [string, Uint32Array]>): void {
    for (const [memo, screen] of screens) {
      if (this.screens.has(memo)) continue;
      if (this.screens.size >= MAX_SCREENS) this.screens.delete(this.screens.keys().next().value!);
      this.screens.set(memo, screen);
    }
  }

  /** Number of IPv4 segments. */
  get segments4(): number {
    return this.seg4.length / 3;
  }

  /** Number of IPv6 segments. */
  get segments6(): number {
    return this.record6.length;
  }

  /** Bytes held in typed arrays (both families, indexes included). */
  get byteLength(): number {
    let n = 0;
    for (const a of [this.seg4, this.index4, this.country4, this.asn4, this.lists4, this.rec4, this.starts6, this.index6, this.record6, this.country6, this.asn6, this.lists6, this.rec6]) {
      n += a.byteLength;
    }
    n += (this.listScreen4?.byteLength ?? 0) + (this.listScreen6?.byteLength ?? 0);
    return n;
  }

  /** IPv4 segment starts (uint32), ascending, starts4[0] = 0: rebuilt from seg4 and index4 on each call (for tests and tools). */
  get starts4(): Uint32Array {
    const out = new Uint32Array(this.segments4);
    for (let k = 0; k < 65536; k++) {
      for (let s = this.index4[k]!; s < this.index4[k + 1]!; s++) out[s] = k * 65536 + this.seg4[s * 3]!;
    }
    return out;
  }

  /** Record of each IPv4 segment (index into country4, asn4 and lists4): rebuilt from seg4 on each call (for tests and tools). */
  get record4(): Uint32Array {
    const out = new Uint32Array(this.segments4);
    for (let s = 0; s < out.length; s++) out[s] = this.seg4[s * 3 + 1]! * 65536 + this.seg4[s * 3 + 2]!;
    return out;
  }

  /** Bytes of the IPv4 part (segments, index, records). */
  get byteLength4(): number {
    return this.seg4.byteLength + this.index4.byteLength + this.country4.byteLength + this.asn4.byteLength + this.lists4.byteLength + this.rec4.byteLength;
  }

  /** The record of the IPv4 address `addr` (uint32): index into country4, asn4 and lists4 (and rec4, times 4). */
  lookup4(addr: number): number {
    const o = this.segment4(addr) * 3;
    return this.seg4[o + 1]! * 65536 + this.seg4[o + 2]!;
  }

  /**
   * False when the IPv4 address `addr` is in no list (its /24 meets no list
   * range); true when it may be, and lookup4() tells.
   */
  mayBeListed4(addr: number): boolean {
    const s = this.listScreen4;
    return s !== null && screenHas(s, addr);
  }

  /**
   * A screen like the list screens for a test of records: bit k is set when a
   * segment of `family` that meets the addresses whose top 24 bits are k has
   * one of the `countries` (indexes in countryCodes) or an AS number in one of
   * the ranges `asns` [lo, hi, lo, hi, ...] (IPv6: and over the GeoIP alias
   * prefixes, whose answers come from IPv4 records). A clear bit proves that the address's
   * record fails `match` without a lookup. 2 MiB; built in one pass over the
   * segments.
   */
  valueScreen(family: 4 | 6, countries: readonly number[], asns: readonly number[]): Uint32Array {
    // Kept per question: a new bundle with the same literals (most rule
    // updates) reuses it instead of spending ~20 ms (measured, pipeline
    // benchmark's table) on a new one.
    const memo = `${family}|${countries.join()}|${asns.join()}`;
    const known = this.screens.get(memo);
    if (known !== undefined) return known;
    const screen = buildValueScreen(this, family, countries, asns);
    // A few are kept (2 MiB each): bundles that change their literals should not pile them up.
    if (this.screens.size >= MAX_SCREENS) this.screens.delete(this.screens.keys().next().value!);
    this.screens.set(memo, screen);
    return screen;
  }

  /**
   * Takes the value screens `from` has built. Call only when both tables were
   * built from the same GeoIP ranges (lists may differ): a value screen
   * depends on countries, AS numbers and the GeoIP alias prefixes only, since
   * lists split segments without changing their records' GeoIP values, and
   * each table's screen covers every /24 an accepted GeoIP range meets. Saves
   * rebuilding them (~20 ms each, up to four per bundle) after a list update.
   */
  shareValueScreens(from: AddressTable): void {
    for (const [memo, screen] of from.screens) if (!this.screens.has(memo) && this.screens.size < MAX_SCREENS) this.screens.set(memo, screen);
  }

  /** mayBeListed4 for an IPv6 address, of which only the first word `w0` counts. */
  mayBeListed6(w0: number): boolean {
    const s = this.listScreen6;
    return s !== null && screenHas(s, w0);
  }

  /** The record of the IPv6 address w0..w3: index into country6, asn6 and lists6. */
  lookup6(w0: number, w1: number, w2: number, w3: number): number {
    return this.record6[this.segment6(w0, w1, w2, w3)]!;
  }

  /** The segment holding the IPv4 address `addr` (uint32). */
  segment4(addr: number): number {
    const seg = this.seg4;
    const k = addr >>> 16;
    const x = addr & 0xffff;
    // The answer is the last segment of [index4[k] - 1, index4[k + 1] - 1] whose
    // start is <= addr: segment index4[k] - 1 starts in an earlier bucket (or,
    // for k = 0, is segment 0, which starts at 0), so it always qualifies, and
    // the others start in bucket k, where comparing low halves is exact.
    let lo = this.index4[k]! - 1;
    let hi = this.index4[k + 1]! - 1;
    while (hi - lo > LINEAR_SCAN) {
      const m = (lo + hi + 1) >>> 1;
      if (seg[m * 3]! <= x) lo = m;
      else hi = m - 1;
    }
    while (lo < hi && seg[lo * 3 + 3]! <= x) lo++;
    return lo;
  }

  /** The segment holding the IPv6 address w0..w3 (uint32 words, most significant first). */
  segment6(w0: number, w1: number, w2: number, w3: number): number {
    const st = this.starts6;
    const k = w0 >>> 16;
    let lo = this.index6[k]!;
    let hi = this.index6[k + 1]!;
    while (lo < hi) {
      const m = (lo + hi + 1) >>> 1;
      const o = m * 4;
      // st[m] <= w ?
      let le: boolean;
      const s0 = st[o]!;
      if (s0 !== w0) le = s0 < w0;
      else {
        const s1 = st[o + 1]!;
        if (s1 !== w1) le = s1 < w1;
        else {
          const s2 = st[o + 2]!;
          le = s2 !== w2 ? s2 < w2 : st[o + 3]! <= w3;
        }
      }
      if (le) lo = m;
      else hi = m - 1;
    }
    return lo;
  }

  /**
   * The mask of list `name` in `lists4`/`lists6` (`1 << i`, as a uint32): test
   * membership with `(t.lists4[s] & t.listBit(name)) !== 0`. Throws RangeError
   * for a name the table was not built with.
   */
  listBit(name: string): number {
    const i = this.listIndex.get(name);
    if (i === undefined) throw new RangeError(`IP list "${name}" is not in this address table (lists: ${this.listNames.join(', ') || 'none'})`);
    return (1 << i) >>> 0;
  }

  /** True when the table was built with list `name`. */
  hasList(name: string): boolean {
    return this.listIndex.has(name);
  }

  /**
   * The IPv4 address (uint32) embedded in an IPv6 address that lies in one of
   * the GeoIP databases' IPv4 alias prefixes (::/96, and as the databases say
   * ::ffff:0:0/96, 2002::/16...), or -1. For callers that want the GeoIP
   * answer the database gives there: `country4[lookup4(v4Alias6(...))]`.
   */
  v4Alias6(w0: number, w1: number, w2: number, w3: number): number {
    return embeddedIpv4(this.aliases6, w0, w1, w2, w3);
  }
}

// At most this many candidates left, a bucket is scanned linearly: its starts
// are in one or two cache lines already loaded, and a scan's branches predict
// better than a binary search's (measured: bench/pipeline.bench.ts, whose
// table's buckets hold ~12 segments).
const LINEAR_SCAN = 8;
