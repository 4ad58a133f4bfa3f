// The address-table builder: every range of every source (GeoIP country, GeoIP
// ASN, each IP list) swept in address order into segments, the segments folded
// into distinct records, and the layouts the lookups read (address-table.ts).

import type { GeoRangeTable, IpRangeList, Ipv4Alias } from '../net/index.js';
import * as LAYOUT from './layout.js';
import { MAX_LISTS, type AddressTableInput, type TableParts } from './layout.js';
import { listScreen } from './screens.js';
import { sortOrder } from './sort-order.js';

// Local copies of the layout constants the build loops use: V8 folds a
// module-local literal, not an imported binding (see packet/literal.ts).
const INDEX_SIZE = 65_537;
const REC_LISTS = 0;
const REC_COUNTRY = 1;
const REC_ASN = 2;
const REC_HAS_ASN = 3;
for (const [k, v] of Object.entries({ INDEX_SIZE, REC_LISTS, REC_COUNTRY, REC_ASN, REC_HAS_ASN })) {
  if ((LAYOUT as Record<string, unknown>)[k] !== v) throw new Error(`table/builder: the copy of ${k} differs from table/layout.ts`);
}

/**
 * Checks and merges GeoIP and lists into the arrays of one table per family.
 * Throws RangeError on more than 32 lists, duplicate names or unsorted GeoIP ranges.
 *
 * Every range of every source becomes two events (start at first, end at
 * last+1), the events are sorted by address (native 64-bit typed-array sort,
 * most significant word first; ties keep input order), and one sweep applies
 * them in order (ends before starts at the same address), keeping a per-list
 * counter (lists may overlap themselves) and emitting a segment whenever the
 * state changes. Cost: O(E log E) for E events, plus the index.
 */
export function buildTableParts(input: AddressTableInput): TableParts {
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
  const listScreen4 = listScreen(lists.map((l) => l.ranges), 1);
  const listScreen6 = listScreen(lists.map((l) => l.ranges), 4);
  const r4 = toRecords(v4);
  const r6 = toRecords(v6);
  const segs4 = r4.record.length;
  const seg4 = new Uint16Array(segs4 * 3);
  for (let i = 0; i < segs4; i++) {
    const rec = r4.record[i]!;
    seg4[i * 3] = v4.starts[i]! & 0xffff;
    seg4[i * 3 + 1] = rec >>> 16;
    seg4[i * 3 + 2] = rec & 0xffff;
  }
  return {
    countryCodes: Object.freeze([...(input.country?.codes ?? [])]),
    listNames: Object.freeze(lists.map((l) => l.name)),
    seg4,
    index4: bucketIndex4(v4.starts, segs4),
    rec4: packRecords(r4),
    country4: r4.country,
    asn4: r4.asn,
    lists4: r4.lists,
    starts6: v6.starts,
    index6: v6.index,
    record6: r6.record,
    country6: r6.country,
    asn6: r6.asn,
    lists6: r6.lists,
    rec6: packRecords(r6),
    aliases6: Object.freeze(aliases),
    listScreen4,
    listScreen6,
  };
}

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
 * record indexes (typed arrays, no per-entry objects), which builds much faster
 * than two levels of Maps keyed by numbers (measured: bench/address-table.bench.ts).
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
        if (--counters[li]! === 0) st[2] = st[2]! & ~(1 << li);
      } else if (counters[li]!++ === 0) st[2] = st[2]! | (1 << li);
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
