// AddressTable: GeoIP country, GeoIP ASN and every IP list merged into one
// sorted segment table per address family, so that one lookup of an address
// gives its country, its AS number and its membership in every list
// (performance.md, design rule 2).
//
// A segment is a maximal run of addresses with the same (country, ASN, list
// bits); segment i of IPv4 covers starts4[i] .. starts4[i+1]-1 (the last one
// runs to 255.255.255.255), and segment 0 starts at 0.0.0.0, so every address
// is in exactly one segment. IPv6 is the same with four words per start.
// IPv6 lookups are a /16 index (65,537 entries: index6[k] is the segment
// holding the address k::) that bounds a binary search over the starts.
// IPv4 is laid out for fewer dependent cache misses, which are what a lookup
// costs (the ~7 MB of a GeoIP + 3 x 100k-list table live in L3, not L1/L2):
// segments are grouped by /16 "bucket", index4[k] is the first segment that
// starts in bucket k, and a segment keeps only the low 16 bits of its start,
// followed by its record index as two more uint16 (seg4: three Uint16 per
// segment, 6 B): a bucket's segments are a few dozen bytes, one or two cache
// lines, searched by a short binary search then a linear scan, and the record
// index of the segment found is in the lines the scan just read, instead of
// one more miss into a separate record array (measured on the pipeline
// benchmark, alternating in-process A/B, 10 passes each: packet path 629 ->
// 607 ns/packet CPU median, 595 -> 564 best). lookup4Pair()
// looks up two addresses with their memory reads interleaved, so that their
// cache misses overlap (measured on the pipeline benchmark's addresses: ~110
// ns per address with uint32 starts and a plain binary search, ~65 one at a
// time with a /16-bucket layout, ~35 as a pair).
// Lookups allocate nothing.
//
// Building: every range of every source becomes two events (start at first,
// end at last+1), the events are sorted by address (native 64-bit typed-array
// sort, most significant word first; ties keep input order), and
// one sweep applies them in order — ends before starts at the same address —
// keeping a per-list counter (lists may overlap themselves) and emitting a
// segment whenever the state changes. Cost: O(E log E) for E events, plus the index.
//
// IPv4-in-IPv6 (decision): an IPv6 address is looked up in IPv6 data only. A
// GeoIP database answers `::ffff:a.b.c.d`, `::a.b.c.d` and 6to4 `2002:aabb:ccdd::/48`
// with the embedded IPv4 address's record (GeoLite2 aliases those prefixes to
// its IPv4 subtree, and tshark, through libmaxminddb, shows that record);
// copying the IPv4 segments into those IPv6 prefixes would add 2-3 copies of the
// IPv4 table to the IPv6 one (1M+ segments for a real database) for addresses
// that do not appear on the wire (RFC 4291 mapped addresses) or belong to a
// deprecated mechanism (6to4, RFC 7526). So in this table those prefixes carry
// no country and no ASN (unless the database has native IPv6 data there), and
// IP lists are matched by family exactly as `ip.src in {...}` is. A caller who
// wants the database's answer calls `v4Alias6()`, which returns the embedded
// IPv4 address for an address in one of the database's alias prefixes, and
// looks that up with `lookup4()`: one extra check, only for such addresses.

import { embeddedIpv4, type AsnRanges, type CountryRanges, type GeoRangeTable, type Ipv4Alias } from './geo-ranges.js';
import type { IpRangeList } from './list-file.js';

/** A named IP list to merge. */
export interface AddressTableList {
  readonly name: string;
  readonly ranges: IpRangeList;
}

/** What to merge. Every source is optional; at most 32 lists. */
export interface AddressTableInput {
  readonly country?: CountryRanges;
  readonly asn?: AsnRanges;
  readonly lists: readonly AddressTableList[];
}

/** The most lists one table can hold (one bit each in a uint32). */
export const MAX_LISTS = 32;

const INDEX_SIZE = 65_537;

/** Most value screens one table keeps (see valueScreen). */
const MAX_SCREENS = 8;

/** The merged segment tables. Build with {@link AddressTable.build}. */
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
   * dependent cache misses (measured on the pipeline benchmark: see
   * engine/packet-path.ts).
   */
  readonly listScreen4: Uint32Array | null;
  readonly listScreen6: Uint32Array | null;

  private readonly listIndex: ReadonlyMap<string, number>;
  /** Value screens built so far, by question (see valueScreen). */
  private readonly screens = new Map<string, Uint32Array>();

  private constructor(f: {
    countryCodes: readonly string[];
    listNames: readonly string[];
    v4: FamilyTable;
    v6: FamilyTable;
    aliases6: readonly Ipv4Alias[];
    listScreen4: Uint32Array | null;
    listScreen6: Uint32Array | null;
  }) {
    this.countryCodes = f.countryCodes;
    this.listNames = f.listNames;
    const r4 = toRecords(f.v4);
    const r6 = toRecords(f.v6);
    const segs4 = r4.record.length;
    this.seg4 = new Uint16Array(segs4 * 3);
    for (let i = 0; i < segs4; i++) {
      const rec = r4.record[i]!;
      this.seg4[i * 3] = f.v4.starts[i]! & 0xffff;
      this.seg4[i * 3 + 1] = rec >>> 16;
      this.seg4[i * 3 + 2] = rec & 0xffff;
    }
    this.index4 = bucketIndex4(f.v4.starts, segs4);
    this.rec4 = packRecords(r4);
    this.country4 = r4.country;
    this.asn4 = r4.asn;
    this.lists4 = r4.lists;
    this.starts6 = f.v6.starts;
    this.index6 = f.v6.index;
    this.record6 = r6.record;
    this.country6 = r6.country;
    this.asn6 = r6.asn;
    this.lists6 = r6.lists;
    this.rec6 = packRecords(r6);
    this.aliases6 = f.aliases6;
    this.listIndex = new Map(f.listNames.map((n, i) => [n, i]));
    this.listScreen4 = f.listScreen4;
    this.listScreen6 = f.listScreen6;
  }

  /** Merges GeoIP and lists into one table per family. Throws RangeError on more than 32 lists, duplicate names or unsorted GeoIP ranges. */
  static build(input: AddressTableInput): AddressTable {
    const lists = input.lists;
    if (lists.length > MAX_LISTS) {
      throw new RangeError(
        `an address table holds at most ${MAX_LISTS} IP lists (one bit each), but ${lists.length} were given: ${lists.map((l) => l.name).join(', ')}`,
      );
    }
    const seen = new Set<string>();
    for (const l of lists) {
      if (seen.has(l.name)) throw new RangeError(`IP list "${l.name}" is given twice`);
      seen.add(l.name);
    }
    if (input.country !== undefined) {
      checkGeo(input.country, 'country');
      if (input.country.codes.length > 32767) throw new RangeError(`too many country codes (${input.country.codes.length})`);
    }
    if (input.asn !== undefined) checkGeo(input.asn, 'ASN');
    const v4 = buildFamily(1, input, lists.map((l) => l.ranges));
    const v6 = buildFamily(4, input, lists.map((l) => l.ranges));
    const aliases: Ipv4Alias[] = [];
    for (const t of [input.country, input.asn]) {
      for (const a of t?.v6Aliases ?? []) {
        if (!aliases.some((b) => b.length === a.length && b.prefix.every((w, i) => w === a.prefix[i]))) aliases.push(a);
      }
    }
    return new AddressTable({
      countryCodes: Object.freeze([...(input.country?.codes ?? [])]),
      listNames: Object.freeze(lists.map((l) => l.name)),
      v4,
      v6,
      aliases6: Object.freeze(aliases),
      listScreen4: listScreen(lists.map((l) => l.ranges), 1),
      listScreen6: listScreen(lists.map((l) => l.ranges), 4),
    });
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
   * The records of two IPv4 addresses, into out[at] and out[at + 1]: the same
   * answers as two lookup4() calls, with the reads of both interleaved so that
   * their cache misses overlap (see the header: ~65 -> ~35 ns per address).
   */
  lookup4Pair(a: number, b: number, out: Int32Array, at: number): void {
    const idx = this.index4;
    const seg = this.seg4;
    const xa = a & 0xffff;
    const xb = b & 0xffff;
    // Both buckets' bounds, then both buckets' first starts, before either
    // search: the loads are independent, so both misses are in flight at once.
    let la = idx[a >>> 16]! - 1;
    let lb = idx[b >>> 16]! - 1;
    let ha = idx[(a >>> 16) + 1]! - 1;
    let hb = idx[(b >>> 16) + 1]! - 1;
    const touch = seg[la * 3 + 3]! | seg[lb * 3 + 3]!;
    while (ha - la > LINEAR_SCAN) {
      const m = (la + ha + 1) >>> 1;
      if (seg[m * 3]! <= xa) la = m;
      else ha = m - 1;
    }
    while (la < ha && seg[la * 3 + 3]! <= xa) la++;
    while (hb - lb > LINEAR_SCAN) {
      const m = (lb + hb + 1) >>> 1;
      if (seg[m * 3]! <= xb) lb = m;
      else hb = m - 1;
    }
    while (lb < hb && seg[lb * 3 + 3]! <= xb) lb++;
    // touch is at most 0xffff: the test never fails, it only keeps the early loads.
    // The records sit next to the starts just scanned (no further miss).
    out[at] = touch >= 0 ? seg[la * 3 + 1]! * 65536 + seg[la * 3 + 2]! : 0;
    out[at + 1] = seg[lb * 3 + 1]! * 65536 + seg[lb * 3 + 2]!;
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
    const rec = family === 4 ? this.rec4 : this.rec6;
    const accepted = new Uint8Array(rec.length / 4);
    for (let r = 0; r < accepted.length; r++) {
      const o = r * 4;
      accepted[r] = countries.includes(rec[o + REC_COUNTRY]!) || (rec[o + REC_HAS_ASN] === 1 && inRanges(asns, rec[o + REC_ASN]! >>> 0)) ? 1 : 0;
    }
    const screen = new Uint32Array(1 << 19);
    if (family === 4) {
      const starts = this.starts4;
      const records = this.record4;
      for (let s = 0; s < starts.length; s++) {
        if (accepted[records[s]!] === 1) setBits(screen, starts[s]! >>> 8, s + 1 < starts.length ? (starts[s + 1]! - 1) >>> 8 : 0xffffff);
      }
    } else {
      const st = this.starts6;
      const n = this.record6.length;
      for (let s = 0; s < n; s++) {
        // Up to the first word of the next start: at most one /24 more than the segment meets.
        if (accepted[this.record6[s]!] === 1) setBits(screen, st[s * 4]! >>> 8, s + 1 < n ? st[(s + 1) * 4]! >>> 8 : 0xffffff);
      }
      for (const al of this.aliases6) {
        const lo = al.prefix[0]! >>> 8;
        setBits(screen, lo, al.length >= 24 ? lo : lo + 2 ** (24 - al.length) - 1);
      }
    }
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
// better than a binary search's (measured: ~65 vs ~75 ns per lookup on the
// pipeline benchmark's table, whose buckets hold ~12 segments).
const LINEAR_SCAN = 8;

/** Offsets in a packed record (rec4, rec6). */
export const REC_LISTS = 0;
export const REC_COUNTRY = 1;
export const REC_ASN = 2;
export const REC_HAS_ASN = 3;

function packRecords(r: Records): Int32Array {
  const n = r.country.length;
  const out = new Int32Array(n * 4);
  for (let i = 0; i < n; i++) {
    const a = r.asn[i]!;
    out[i * 4 + REC_LISTS] = r.lists[i]! | 0;
    out[i * 4 + REC_COUNTRY] = r.country[i]!;
    out[i * 4 + REC_ASN] = Number.isNaN(a) ? 0 : a | 0;
    out[i * 4 + REC_HAS_ASN] = Number.isNaN(a) ? 0 : 1;
  }
  return out;
}

/** index[k] = the number of IPv4 segments whose start is below k << 16; index[65536] = segs. */
function bucketIndex4(starts: Uint32Array, segs: number): Uint32Array {
  const index = new Uint32Array(INDEX_SIZE);
  let s = 0;
  for (let k = 0; k < 65536; k++) {
    const top = k * 65536;
    while (s < segs && starts[s]! < top) s++;
    index[k] = s;
  }
  index[65536] = segs;
  return index;
}

interface Records {
  record: Uint32Array;
  country: Int16Array;
  asn: Float64Array;
  lists: Uint32Array;
}

/**
 * Replaces per-segment columns by a record index per segment and one entry
 * per distinct triple. Triples are found in an open-addressing hash table of
 * record indexes (typed arrays, no per-entry objects): two levels of Maps
 * keyed by numbers cost ~95 ms of a ~300 ms build on the pipeline benchmark's
 * table (788k segments, 134k records); see bench/address-table.bench.ts.
 */
function toRecords(f: FamilyTable): Records {
  const n = f.country.length;
  const record = new Uint32Array(n);
  const country = new Int16Array(n);
  const asn = new Float64Array(n);
  const lists = new Uint32Array(n);
  // At most n records: a table of at least 2n slots stays at most half full.
  let size = 16;
  while (size < 2 * n) size *= 2;
  const mask = size - 1;
  const slots = new Int32Array(size).fill(-1);
  let records = 0;
  for (let s = 0; s < n; s++) {
    const c = f.country[s]!;
    const a = f.asn[s]!;
    const bits = f.lists[s]!;
    // NaN (no ASN) hashes and compares as -1, which no AS number is.
    const ak = Number.isNaN(a) ? -1 : a;
    let h = Math.imul(c + 1, 0x9e3779b1) ^ Math.imul(ak | 0, 0x85ebca77) ^ Math.imul(bits | 0, 0xc2b2ae3d);
    h ^= h >>> 15;
    let i = h & mask;
    let r = slots[i]!;
    while (r !== -1 && !(country[r] === c && lists[r] === bits && (Number.isNaN(asn[r]!) ? ak === -1 : asn[r] === ak))) {
      i = (i + 1) & mask;
      r = slots[i]!;
    }
    if (r === -1) {
      r = records++;
      slots[i] = r;
      country[r] = c;
      asn[r] = a;
      lists[r] = bits;
    }
    record[s] = r;
  }
  return { record, country: country.slice(0, records), asn: asn.slice(0, records), lists: lists.slice(0, records) };
}

interface FamilyTable {
  starts: Uint32Array;
  index: Uint32Array;
  country: Int16Array;
  asn: Float64Array;
  lists: Uint32Array;
}

/** GeoIP ranges must be sorted and disjoint (as src/geoip produces them). */
function checkGeo(t: GeoRangeTable, what: string): void {
  const n4 = t.v4Value.length;
  if (t.v4First.length !== n4 || t.v4Last.length !== n4) throw new RangeError(`${what} table: IPv4 arrays differ in length`);
  for (let i = 0; i < n4; i++) {
    if (t.v4First[i]! > t.v4Last[i]! || (i > 0 && t.v4First[i]! <= t.v4Last[i - 1]!)) {
      throw new RangeError(`${what} table: IPv4 ranges are not sorted and disjoint at range ${i}`);
    }
  }
  const n6 = t.v6Value.length;
  if (t.v6First.length !== n6 * 4 || t.v6Last.length !== n6 * 4) throw new RangeError(`${what} table: IPv6 arrays differ in length`);
  for (let i = 0; i < n6; i++) {
    if (cmpAt(t.v6First, i * 4, t.v6Last, i * 4) > 0 || (i > 0 && cmpAt(t.v6First, i * 4, t.v6Last, (i - 1) * 4) <= 0)) {
      throw new RangeError(`${what} table: IPv6 ranges are not sorted and disjoint at range ${i}`);
    }
  }
}

function cmpAt(a: Uint32Array, ao: number, b: Uint32Array, bo: number): number {
  for (let k = 0; k < 4; k++) {
    const x = a[ao + k]!;
    const y = b[bo + k]!;
    if (x !== y) return x < y ? -1 : 1;
  }
  return 0;
}

// The list screen of one family (see AddressTable.listScreen4): one bit per
// value of the top 24 bits, set over every range of every list; null when no
// list has a range of the family.
function listScreen(lists: readonly IpRangeList[], words: 1 | 4): Uint32Array | null {
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

/** The bit of a screen (listScreen4, valueScreen...) for the address whose first (or only) word is `w`. */
export function screenHas(screen: Uint32Array, w: number): boolean {
  return ((screen[w >>> 13]! >>> ((w >>> 8) & 31)) & 1) === 1;
}

/** Whether `v` lies in one of the inclusive ranges [lo, hi, lo, hi, ...] (NaN never does). */
export function inRanges(ranges: readonly number[], v: number): boolean {
  for (let i = 0; i < ranges.length; i += 2) if (v >= ranges[i]! && v <= ranges[i + 1]!) return true;
  return false;
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

// Event sources: 0 = country, 1 = ASN, 2 + i = list i. Event kind byte = source * 2 + isEnd.
const SRC_COUNTRY = 0;
const SRC_ASN = 1;
const SRC_LIST = 2;

class Events {
  readonly keys: Uint32Array;
  readonly kind: Uint8Array;
  readonly value: Int32Array;
  n = 0;

  constructor(
    readonly words: number,
    capacity: number,
  ) {
    this.keys = new Uint32Array(capacity * words);
    this.kind = new Uint8Array(capacity);
    this.value = new Int32Array(capacity);
  }

  /** Adds the start and (unless last is the top address) end events of ranges [first, last]. */
  addRanges(first: Uint32Array, last: Uint32Array, values: Int32Array | undefined, source: number): void {
    const w = this.words;
    const count = first.length / w;
    const keys = this.keys;
    const startKind = source * 2;
    const endKind = startKind + 1;
    for (let i = 0; i < count; i++) {
      const o = i * w;
      const v = values === undefined ? 0 : values[i]!;
      let e = this.n;
      for (let k = 0; k < w; k++) keys[e * w + k] = first[o + k]!;
      this.kind[e] = startKind;
      this.value[e] = v;
      e++;
      // last + 1, skipped when it overflows.
      let carry = 1;
      for (let k = w - 1; k >= 0; k--) {
        const s = last[o + k]! + carry;
        if (s === 0x100000000) {
          keys[e * w + k] = 0;
        } else {
          keys[e * w + k] = s;
          carry = 0;
        }
      }
      if (carry === 0) {
        this.kind[e] = endKind;
        this.value[e] = v;
        e++;
      }
      this.n = e;
    }
  }
}

function buildFamily(words: 1 | 4, input: AddressTableInput, lists: readonly IpRangeList[]): FamilyTable {
  const v4 = words === 1;
  const geoCount = (t: GeoRangeTable | undefined): number => (t === undefined ? 0 : v4 ? t.v4Value.length : t.v6Value.length);
  let capacity = geoCount(input.country) + geoCount(input.asn);
  for (const l of lists) capacity += (v4 ? l.v4First.length : l.v6First.length / 4);
  const ev = new Events(words, capacity * 2);
  if (input.country !== undefined) {
    const t = input.country;
    ev.addRanges(v4 ? t.v4First : t.v6First, v4 ? t.v4Last : t.v6Last, v4 ? t.v4Value : t.v6Value, SRC_COUNTRY);
  }
  if (input.asn !== undefined) {
    const t = input.asn;
    ev.addRanges(v4 ? t.v4First : t.v6First, v4 ? t.v4Last : t.v6Last, v4 ? t.v4Value : t.v6Value, SRC_ASN);
  }
  lists.forEach((l, i) => ev.addRanges(v4 ? l.v4First : l.v6First, v4 ? l.v4Last : l.v6Last, undefined, SRC_LIST + i));

  const n = ev.n;
  const perm = sortOrder(ev.keys, words, n);
  const keys = ev.keys;
  const kind = ev.kind;
  const value = ev.value;

  // Output, at most one segment per distinct key plus the one at address 0.
  const cap = n + 1;
  const starts = new Uint32Array(cap * words);
  const country = new Int16Array(cap);
  const asnBits = new Int32Array(cap); // int32 pattern, -1 none; converted to Float64 at the end
  const bits = new Uint32Array(cap);
  const counters = new Int32Array(MAX_LISTS);
  // Current state: country value, ASN value (int32 pattern), list bits (as int32).
  const st = new Int32Array(3);
  st[0] = -1;
  st[1] = -1;
  const apply = (e: number, kd: number): void => {
    const src = kd >>> 1;
    const end = kd & 1;
    if (src === SRC_COUNTRY) st[0] = end ? -1 : value[e]!;
    else if (src === SRC_ASN) st[1] = end ? -1 : value[e]!;
    else {
      const li = src - SRC_LIST;
      if (end) {
        if (--counters[li] === 0) st[2] = st[2]! & ~(1 << li);
      } else if (counters[li]++ === 0) st[2] = st[2]! | (1 << li);
    }
  };
  // Segment 0 at address 0, empty.
  let segs = 1;
  country[0] = -1;
  asnBits[0] = -1;
  bits[0] = 0;

  let i = 0;
  while (i < n) {
    const first = perm[i]!;
    const ko = first * words;
    let j = i + 1;
    if (words === 1) {
      const k0 = keys[ko]!;
      while (j < n && keys[perm[j]!] === k0) j++;
    } else {
      const k0 = keys[ko]!;
      const k1 = keys[ko + 1]!;
      const k2 = keys[ko + 2]!;
      const k3 = keys[ko + 3]!;
      while (j < n) {
        const o = perm[j]! * 4;
        if (keys[o] !== k0 || keys[o + 1] !== k1 || keys[o + 2] !== k2 || keys[o + 3] !== k3) break;
        j++;
      }
    }
    if (j === i + 1) {
      apply(first, kind[first]!);
    } else {
      // Ends first, then starts: an adjacent range of the same source takes over cleanly.
      for (let t = i; t < j; t++) {
        const e = perm[t]!;
        if ((kind[e]! & 1) === 1) apply(e, kind[e]!);
      }
      for (let t = i; t < j; t++) {
        const e = perm[t]!;
        if ((kind[e]! & 1) === 0) apply(e, kind[e]!);
      }
    }
    i = j;
    const cState = st[0]!;
    const aState = st[1]!;
    const bState = st[2]! >>> 0;
    const last = segs - 1;
    if (country[last] === cState && asnBits[last] === aState && bits[last] === bState) continue;
    let at = segs;
    if (isZeroKey(keys, ko, words)) {
      at = 0; // events at address 0 redefine segment 0
    } else {
      segs++;
    }
    for (let k = 0; k < words; k++) starts[at * words + k] = keys[ko + k]!;
    country[at] = cState;
    asnBits[at] = aState;
    bits[at] = bState;
  }

  const asn = new Float64Array(segs);
  for (let s = 0; s < segs; s++) asn[s] = asnBits[s] === -1 ? NaN : asnBits[s]! >>> 0;
  const outStarts = starts.slice(0, segs * words);
  return {
    starts: outStarts,
    index: words === 4 ? buildIndex(outStarts, words, segs) : new Uint32Array(0),
    country: country.slice(0, segs),
    asn,
    lists: bits.slice(0, segs),
  };
}

function isZeroKey(keys: Uint32Array, a: number, words: number): boolean {
  for (let k = 0; k < words; k++) if (keys[a + k] !== 0) return false;
  return true;
}

/** index[k] = the segment holding the address whose top 16 bits are k and the rest zero. */
function buildIndex(starts: Uint32Array, words: number, segs: number): Uint32Array {
  const index = new Uint32Array(INDEX_SIZE);
  let s = 0;
  for (let k = 0; k < 65536; k++) {
    // Advance while the next segment starts at or before k << 16 (followed by zero words).
    const top = k * 65536;
    while (s + 1 < segs && startsAtOrBefore(starts, (s + 1) * words, top, words)) s++;
    index[k] = s;
  }
  index[65536] = segs - 1;
  return index;
}

/** True when the start at starts[o..] is <= (top, 0, 0, 0). */
function startsAtOrBefore(starts: Uint32Array, o: number, top: number, words: number): boolean {
  const w0 = starts[o]!;
  if (w0 !== top) return w0 < top;
  for (let k = 1; k < words; k++) if (starts[o + k] !== 0) return false;
  return true;
}

const LITTLE_ENDIAN = new Uint8Array(Uint32Array.of(1).buffer)[0] === 1;

/**
 * A permutation that sorts the keys (each `words` uint32 words, most
 * significant first) ascending; equal keys keep their input order.
 *
 * Most significant word first: the elements are sorted by (word << 32 | element)
 * as BigUint64 values with the engine's native typed-array sort (the 64-bit
 * values are written through a Uint32Array view, so no BigInt is created);
 * runs that share the word are then sorted by the next word, and so on. Random
 * IPv6 keys need one native sort, keys clustered in a few /32s two or three.
 * (A 16-bit LSD radix sort of 2M IPv6 keys was 3-4x slower here: its scatter
 * and gather passes miss the cache on every element.)
 */
export function sortOrder(keys: Uint32Array, words: number, n: number): Uint32Array {
  const perm = new Uint32Array(n);
  for (let i = 0; i < n; i++) perm[i] = i;
  if (n < 2) return perm;
  if (!LITTLE_ENDIAN) return fallbackOrder(keys, words, n);
  const wide = new BigUint64Array(n);
  const half = new Uint32Array(wide.buffer);
  // Runs still to sort at the current word: [start, end) pairs; the first is everything.
  let runs: number[] = [0, n];
  for (let w = 0; w < words && runs.length > 0; w++) {
    const next: number[] = [];
    for (let r = 0; r < runs.length; r += 2) {
      const start = runs[r]!;
      const end = runs[r + 1]!;
      for (let i = start; i < end; i++) {
        const e = perm[i]!;
        half[2 * i] = e;
        half[2 * i + 1] = keys[e * words + w]!;
      }
      wide.subarray(start, end).sort();
      // Read back the order, and find the runs of equal words: short ones are
      // finished here by insertion sort on the remaining words, long ones go to the next level.
      let runStart = start;
      for (let i = start; i <= end; i++) {
        if (i < end) perm[i] = half[2 * i]!;
        if (i === end || (i > start && half[2 * i + 1] !== half[2 * i - 1])) {
          const len = i - runStart;
          if (len > 1 && w + 1 < words) {
            if (len <= SMALL_RUN) insertionSort(perm, keys, words, w + 1, runStart, i);
            else next.push(runStart, i);
          }
          runStart = i;
        }
      }
    }
    runs = next;
  }
  return perm;
}

const SMALL_RUN = 16;

/** Sorts perm[start, end) by key words from..words-1 (ties by element index, as the wide sort does). */
function insertionSort(perm: Uint32Array, keys: Uint32Array, words: number, from: number, start: number, end: number): void {
  for (let i = start + 1; i < end; i++) {
    const e = perm[i]!;
    let j = i - 1;
    while (j >= start && keyAfter(keys, words, from, perm[j]!, e)) {
      perm[j + 1] = perm[j]!;
      j--;
    }
    perm[j + 1] = e;
  }
}

/** True when element a sorts after element b (words from..words-1, then index). */
function keyAfter(keys: Uint32Array, words: number, from: number, a: number, b: number): boolean {
  for (let k = from; k < words; k++) {
    const x = keys[a * words + k]!;
    const y = keys[b * words + k]!;
    if (x !== y) return x > y;
  }
  return a > b;
}

/** Comparator sort, for big-endian hosts. */
function fallbackOrder(keys: Uint32Array, words: number, n: number): Uint32Array {
  const idx = Array.from({ length: n }, (_, i) => i);
  idx.sort((a, b) => {
    for (let k = 0; k < words; k++) {
      const x = keys[a * words + k]!;
      const y = keys[b * words + k]!;
      if (x !== y) return x < y ? -1 : 1;
    }
    return 0;
  });
  return Uint32Array.from(idx);
}
