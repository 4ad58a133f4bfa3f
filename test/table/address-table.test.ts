// The AddressTable answers, for every address, what a linear scan over its
// inputs answers: the country and ASN range holding it and the lists with an
// entry holding it. Checked on random addresses and on every range boundary
// (first, last, first-1, last+1) of every source, for IPv4 and IPv6, with
// lists that overlap each other and themselves.

import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openGeoIpSync, type AsnTable, type CountryTable } from '../../src/geoip/index.js';
import type { CountryRanges, GeoRangeTable } from '../../src/net/geo-ranges.js';
import { formatIpv4, parseIp } from '../../src/net/index.js';
import { emptyRangeList, rangeListFromStrings, type IpRangeList } from '../../src/net/list-file.js';
import { AddressTable, MAX_LISTS, REC_ASN, REC_COUNTRY, REC_HAS_ASN, REC_LISTS, type AddressTableInput } from '../../src/table/index.js';
import { sortOrder } from '../../src/table/sort-order.js';
import { geoipFixtureDir } from '../support/make-mmdb.js';
import { Rng, seedFrom } from '../support/random.js';

const SEED = seedFrom('ADDRESS_TABLE_SEED');
const MAX128 = (1n << 128n) - 1n;

// ---- Reference model: plain ranges of bigint, linear scans -------------------------------

interface RefRange {
  first: bigint;
  last: bigint;
  value: number;
}

interface RefInput {
  country: RefRange[];
  asn: RefRange[];
  lists: RefRange[][];
}

function refLookup(ref: RefInput, a: bigint): { country: number; asn: number; bits: number } {
  const find = (rs: RefRange[]): number => {
    for (const r of rs) if (a >= r.first && a <= r.last) return r.value;
    return -1;
  };
  let bits = 0;
  ref.lists.forEach((rs, i) => {
    if (rs.some((r) => a >= r.first && a <= r.last)) bits = (bits | (1 << i)) >>> 0;
  });
  const asn = find(ref.asn);
  return { country: find(ref.country), asn: asn === -1 ? NaN : asn >>> 0, bits };
}

const toWords = (x: bigint): number[] => [Number((x >> 96n) & 0xffffffffn), Number((x >> 64n) & 0xffffffffn), Number((x >> 32n) & 0xffffffffn), Number(x & 0xffffffffn)];
const fromWords = (w: ArrayLike<number>, o = 0): bigint =>
  (BigInt(w[o]!) << 96n) | (BigInt(w[o + 1]!) << 64n) | (BigInt(w[o + 2]!) << 32n) | BigInt(w[o + 3]!);

// ---- Random inputs --------------------------------------------------------------------

/** Points clustered near a few anchors (the ends of the space included) so that ranges touch and overlap. */
function randomPoint(rng: Rng, v4: boolean): bigint {
  const max = v4 ? 0xffffffffn : MAX128;
  const anchors = v4 ? [0n, 0x0a000000n, 0xc0000200n, max] : [0n, 0xffffn << 32n, 0x20010db8n << 96n, (0x20010db8n << 96n) + (1n << 64n), 0x2a001450n << 96n, max];
  const r = rng.next();
  if (r < 0.15) return BigInt(rng.int(2 ** 32)) * (v4 ? 1n : BigInt(rng.int(2 ** 32)) ** 3n) % (max + 1n);
  const a = anchors[rng.int(anchors.length)]!;
  const off = BigInt(rng.int(600)) - 300n;
  const x = a + off;
  return x < 0n ? 0n : x > max ? max : x;
}

function randomRange(rng: Rng, v4: boolean): [bigint, bigint] {
  const a = randomPoint(rng, v4);
  const b = rng.chance(0.3) ? a : rng.chance(0.5) ? randomPoint(rng, v4) : a + BigInt(rng.int(40));
  const max = v4 ? 0xffffffffn : MAX128;
  const lo = a < b ? a : b;
  let hi = a < b ? b : a;
  if (hi > max) hi = max;
  return [lo, hi];
}

/** Sorted, disjoint ranges with values, as a GeoIP table has them (adjacent ones may share a value or not). */
function randomDisjoint(rng: Rng, v4: boolean, n: number, values: () => number): RefRange[] {
  const pts = new Set<bigint>();
  while (pts.size < n * 2) pts.add(randomPoint(rng, v4));
  const sorted = [...pts].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
  const out: RefRange[] = [];
  for (let i = 0; i + 1 < sorted.length; i += 2) {
    // Sometimes make it adjacent to the previous range.
    let first = sorted[i]!;
    const prev = out[out.length - 1];
    if (prev !== undefined && rng.chance(0.3) && prev.last + 1n <= sorted[i + 1]!) first = prev.last + 1n;
    out.push({ first, last: sorted[i + 1]!, value: values() });
  }
  return out;
}

function geoTable(v4: RefRange[], v6: RefRange[]): GeoRangeTable {
  return {
    v4First: Uint32Array.from(v4, (r) => Number(r.first)),
    v4Last: Uint32Array.from(v4, (r) => Number(r.last)),
    v4Value: Int32Array.from(v4, (r) => r.value),
    v6First: Uint32Array.from(v6.flatMap((r) => toWords(r.first))),
    v6Last: Uint32Array.from(v6.flatMap((r) => toWords(r.last))),
    v6Value: Int32Array.from(v6, (r) => r.value),
    v6Aliases: [],
  };
}

function rangeList(v4: Array<[bigint, bigint]>, v6: Array<[bigint, bigint]>): IpRangeList {
  return {
    v4First: Uint32Array.from(v4, (r) => Number(r[0])),
    v4Last: Uint32Array.from(v4, (r) => Number(r[1])),
    v6First: Uint32Array.from(v6.flatMap((r) => toWords(r[0]))),
    v6Last: Uint32Array.from(v6.flatMap((r) => toWords(r[1]))),
    count: v4.length + v6.length,
  };
}

interface Case {
  input: AddressTableInput;
  ref4: RefInput;
  ref6: RefInput;
}

function randomCase(seed: number, sizes = { geo: 60, list: 40, lists: 5 }): Case {
  const rng = new Rng(seed);
  const codes = ['AA', 'BB', 'CC', 'DD', 'EE', 'FF', 'GG'];
  const asns = [1, 13335, 65536, 2 ** 31 - 1, 2 ** 31, 4_200_000_000, 0xfffffffe, 0];
  const c4 = randomDisjoint(rng, true, sizes.geo, () => rng.int(codes.length));
  const c6 = randomDisjoint(rng, false, sizes.geo, () => rng.int(codes.length));
  const a4 = randomDisjoint(rng, true, sizes.geo, () => asns[rng.int(asns.length)]! | 0);
  const a6 = randomDisjoint(rng, false, sizes.geo, () => asns[rng.int(asns.length)]! | 0);
  const lists4: Array<Array<[bigint, bigint]>> = [];
  const lists6: Array<Array<[bigint, bigint]>> = [];
  for (let i = 0; i < sizes.lists; i++) {
    const l4 = Array.from({ length: sizes.list }, () => randomRange(rng, true));
    const l6 = Array.from({ length: sizes.list }, () => randomRange(rng, false));
    if (i === 0) {
      l4.push([0n, 0xffffffffn]); // a list holding everything
      l6.push([0n, MAX128]);
    }
    if (i === 1) l4.push(l4[0]!, l4[0]!); // duplicates
    lists4.push(l4);
    lists6.push(l6);
  }
  const country: CountryRanges = { ...geoTable(c4, c6), codes };
  const input: AddressTableInput = {
    country,
    asn: geoTable(a4, a6),
    lists: lists4.map((l4, i) => ({ name: `list${i}`, ranges: rangeList(l4, lists6[i]!) })),
  };
  const asRef = (rs: Array<[bigint, bigint]>): RefRange[] => rs.map(([first, last]) => ({ first, last, value: 1 }));
  return {
    input,
    ref4: { country: c4, asn: a4, lists: lists4.map(asRef) },
    ref6: { country: c6, asn: a6, lists: lists6.map(asRef) },
  };
}

/** Every first, last, first-1 and last+1 of the inputs, within the space. */
function boundaries(ref: RefInput, max: bigint): bigint[] {
  const out = new Set<bigint>([0n, max]);
  for (const rs of [ref.country, ref.asn, ...ref.lists]) {
    for (const r of rs) {
      for (const x of [r.first, r.last, r.first - 1n, r.last + 1n]) if (x >= 0n && x <= max) out.add(x);
    }
  }
  return [...out];
}

/** The packed record r of rec4/rec6 read back as (country, ASN, bits). */
function unpack(rec: Int32Array, r: number): { country: number; asn: number; bits: number } {
  return { country: rec[r * 4 + REC_COUNTRY]!, asn: rec[r * 4 + REC_HAS_ASN] === 1 ? rec[r * 4 + REC_ASN]! >>> 0 : NaN, bits: rec[r * 4 + REC_LISTS]! >>> 0 };
}

const same = (x: { country: number; asn: number; bits: number }, y: { country: number; asn: number; bits: number }): boolean =>
  Object.is(x.country, y.country) && Object.is(x.asn, y.asn) && x.bits === y.bits;

/** lookup4 and the packed record against the reference. */
function check4(t: AddressTable, ref: RefInput, probes: bigint[]): string[] {
  const bad: string[] = [];
  for (let i = 0; i < probes.length; i++) {
    const a = probes[i]!;
    const s = t.lookup4(Number(a));
    const want = refLookup(ref, a);
    const got = { country: t.country4[s]!, asn: t.asn4[s]!, bits: t.lists4[s]! };
    const problem =
      !same(got, want) ? `got ${JSON.stringify(got)}`
      : !same(unpack(t.rec4, s), want) ? `packed record ${JSON.stringify(unpack(t.rec4, s))}`
      : '';
    if (problem !== '' && bad.length < 10) bad.push(`${formatIpv4(Number(a))}: want ${JSON.stringify(want)}, ${problem} (record ${s})`);
  }
  return bad;
}

function check6(t: AddressTable, ref: RefInput, probes: bigint[]): string[] {
  const bad: string[] = [];
  for (const a of probes) {
    const w = toWords(a);
    const s = t.lookup6(w[0]!, w[1]!, w[2]!, w[3]!);
    const want = refLookup(ref, a);
    const got = { country: t.country6[s]!, asn: t.asn6[s]!, bits: t.lists6[s]! };
    if (!same(got, want) || !same(unpack(t.rec6, s), want)) {
      if (bad.length < 10) bad.push(`${a.toString(16)}: want ${JSON.stringify(want)} got ${JSON.stringify(got)} (segment ${s})`);
    }
  }
  return bad;
}

function checkInvariants(t: AddressTable): void {
  // Every record is a distinct (country, ASN, list bits) triple.
  const triples = new Set(Array.from(t.country4, (c, r) => `${c}/${t.asn4[r]}/${t.lists4[r]}`));
  expect(triples.size).toBe(t.country4.length);
  expect(t.starts4[0]).toBe(0);
  for (let s = 1; s < t.segments4; s++) {
    expect(t.starts4[s]! > t.starts4[s - 1]!).toBe(true);
    // Records are distinct triples, so equal records mean equal data.
    const same = t.record4[s] === t.record4[s - 1];
    expect(same, `IPv4 segments ${s - 1} and ${s} should have been merged`).toBe(false);
  }
  expect(fromWords(t.starts6, 0)).toBe(0n);
  for (let s = 1; s < t.segments6; s++) {
    expect(fromWords(t.starts6, s * 4) > fromWords(t.starts6, (s - 1) * 4)).toBe(true);
    const same = t.record6[s] === t.record6[s - 1];
    expect(same, `IPv6 segments ${s - 1} and ${s} should have been merged`).toBe(false);
  }
  expect(t.index4.length).toBe(65_537);
  // index4[k] counts the segments starting below k << 16.
  const starts = t.starts4;
  for (let k = 0; k <= 65536; k += 257) expect(t.index4[k]).toBe(starts.filter((x) => x < k * 65536).length);
  expect(t.index4[65536]).toBe(t.segments4);
  expect(t.index6.length).toBe(65_537);
}

describe('AddressTable lookups', () => {
  for (let round = 0; round < 6; round++) {
    it(`agree with a linear scan on every IPv4 range boundary and 3,000 random addresses (round ${round})`, () => {
      const seed = (SEED + round * 7919) >>> 0;
      const c = randomCase(seed);
      const t = AddressTable.build(c.input);
      checkInvariants(t);
      const rng = new Rng(seed ^ 0x5555);
      const probes = [...boundaries(c.ref4, 0xffffffffn), ...Array.from({ length: 3000 }, () => randomPoint(rng, true))];
      expect(check4(t, c.ref4, probes), `seed ${seed} (ADDRESS_TABLE_SEED=${SEED})`).toEqual([]);
    });

    it(`agree with a linear scan on every IPv6 range boundary and 3,000 random addresses (round ${round})`, () => {
      const seed = (SEED + round * 7919) >>> 0;
      const c = randomCase(seed);
      const t = AddressTable.build(c.input);
      const rng = new Rng(seed ^ 0xaaaa);
      const probes = [...boundaries(c.ref6, MAX128), ...Array.from({ length: 3000 }, () => randomPoint(rng, false))];
      expect(check6(t, c.ref6, probes), `seed ${seed} (ADDRESS_TABLE_SEED=${SEED})`).toEqual([]);
    });
  }

  for (let round = 0; round < 4; round++) {
    it(`agree with a linear scan on IPv4 prefixes of every length, nested, adjacent and dense in one /16 (round ${round})`, () => {
      const seed = (SEED + round * 104_729) >>> 0;
      const rng = new Rng(seed);
      // Prefixes /0 to /32 around a few /16 boundaries, so buckets hold from one
      // segment to hundreds (more than the linear-scan threshold) and segments
      // cross bucket boundaries.
      const bases = [0, 0x0a000000, 0x0a00ff00, 0x0a010000, 0xc0a80000, 0xfffffe00];
      const prefix = (): [bigint, bigint] => {
        const len = rng.chance(0.05) ? rng.int(17) : 16 + rng.int(17);
        const a = (bases[rng.int(bases.length)]! + rng.int(1024) - 512) >>> 0;
        const size = 2 ** (32 - len);
        const first = len === 0 ? 0 : Math.floor(a / size) * size;
        return [BigInt(first), BigInt(first + size - 1)];
      };
      const lists = Array.from({ length: 3 }, () => Array.from({ length: 150 + rng.int(150) }, prefix));
      // Adjacent pairs of /32s and /31s: consecutive segments.
      for (let i = 0; i < 40; i++) {
        const a = (0x0a00ff00 + i * 2) >>> 0;
        lists[i % 3]!.push([BigInt(a), BigInt(a)], [BigInt(a + 1), BigInt(a + 1)]);
      }
      const ref: RefInput = { country: [], asn: [], lists: lists.map((l) => l.map(([first, last]) => ({ first, last, value: 0 }))) };
      const t = AddressTable.build({ lists: lists.map((l, i) => ({ name: `l${i}`, ranges: rangeList(l, []) })) });
      checkInvariants(t);
      const probes = [...boundaries(ref, 0xffffffffn), ...Array.from({ length: 2000 }, () => BigInt((bases[rng.int(bases.length)]! + rng.int(70_000) - 35_000) >>> 0))];
      expect(check4(t, ref, probes), `seed ${seed} (ADDRESS_TABLE_SEED=${SEED})`).toEqual([]);
    });
  }

  it('agree with a linear scan for 32 lists, the most a table holds', () => {
    const c = randomCase(SEED + 1, { geo: 20, list: 15, lists: 32 });
    const t = AddressTable.build(c.input);
    expect(t.listBit('list31')).toBe(2 ** 31);
    const rng = new Rng(SEED + 2);
    expect(check4(t, c.ref4, [...boundaries(c.ref4, 0xffffffffn), ...Array.from({ length: 2000 }, () => randomPoint(rng, true))])).toEqual([]);
    expect(check6(t, c.ref6, [...boundaries(c.ref6, MAX128), ...Array.from({ length: 2000 }, () => randomPoint(rng, false))])).toEqual([]);
  });

  it('agree with a linear scan when record indexes exceed 16 bits (seg4 keeps them as two uint16)', () => {
    // 70,000 ASN ranges with distinct AS numbers, so more than 65,536 records;
    // the low 16 bits of each record index alone would answer wrongly.
    const n = 70_000;
    const v4First = new Uint32Array(n);
    const v4Last = new Uint32Array(n);
    const v4Value = new Int32Array(n);
    const asn: RefRange[] = [];
    for (let i = 0; i < n; i++) {
      v4First[i] = 0x01000000 + i * 4096;
      v4Last[i] = v4First[i]! + 1000 + (i % 7);
      v4Value[i] = 64_512 + i;
      asn.push({ first: BigInt(v4First[i]!), last: BigInt(v4Last[i]!), value: 64_512 + i });
    }
    const none = { v6First: new Uint32Array(0), v6Last: new Uint32Array(0), v6Value: new Int32Array(0), v6Aliases: [] };
    const t = AddressTable.build({ asn: { v4First, v4Last, v4Value, ...none }, lists: [] });
    expect(t.rec4.length / 4).toBeGreaterThan(65_536);
    const rng = new Rng(SEED + 3);
    const probes: bigint[] = [];
    for (let i = 0; i < 3000; i++) {
      const r = asn[rng.int(n)]!;
      probes.push(r.first, r.last, r.last + 1n, r.first - 1n);
    }
    // The reference is a binary search over the sorted, disjoint ranges (a linear scan would be 70k x 12k).
    const sorted = asn;
    const bad: string[] = [];
    for (let i = 0; i < probes.length; i++) {
      const a = probes[i]!;
      let lo = 0;
      let hi = sorted.length - 1;
      let want = NaN;
      while (lo <= hi) {
        const m = (lo + hi) >> 1;
        if (sorted[m]!.last < a) lo = m + 1;
        else if (sorted[m]!.first > a) hi = m - 1;
        else {
          want = sorted[m]!.value;
          break;
        }
      }
      const r = t.lookup4(Number(a));
      const got = unpack(t.rec4, r);
      if (!Object.is(got.asn, want) || got.country !== -1) bad.push(`${formatIpv4(Number(a))}: want ${want}, got ${got.asn} (record ${r})`);
    }
    expect(bad.slice(0, 10)).toEqual([]);
  });

  it('give one segment covering everything for an empty input', () => {
    const t = AddressTable.build({ lists: [] });
    expect(t.segments4).toBe(1);
    expect(t.segments6).toBe(1);
    expect(t.lookup4(0xffffffff)).toBe(0);
    expect(t.lookup6(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff)).toBe(0);
    expect(t.country4[0]).toBe(-1);
    expect(t.asn4[0]).toBeNaN();
    expect(t.lists4[0]).toBe(0);
  });

  it('merge adjacent and duplicate entries into one segment', () => {
    const t = AddressTable.build({ lists: [{ name: 'a', ranges: rangeListFromStrings(['10.0.0.0/25', '10.0.0.128/25', '10.0.0.0/24', '10.0.1.0..10.0.1.9']) }] });
    expect(Array.from(t.starts4, formatIpv4)).toEqual(['0.0.0.0', '10.0.0.0', '10.0.1.10']);
    expect(Array.from(t.record4, (r) => t.lists4[r])).toEqual([0, 1, 0]);
  });
});

describe('AddressTable lists', () => {
  const one = (name: string): { name: string; ranges: IpRangeList } => ({ name, ranges: emptyRangeList() });

  it('give each list a bit in input order', () => {
    const t = AddressTable.build({ lists: [one('a'), one('b'), one('c')] });
    expect([t.listBit('a'), t.listBit('b'), t.listBit('c')]).toEqual([1, 2, 4]);
    expect(t.listNames).toEqual(['a', 'b', 'c']);
    expect(t.hasList('b')).toBe(true);
    expect(t.hasList('z')).toBe(false);
  });

  it('refuse more than 32 lists with a clear error', () => {
    const lists = Array.from({ length: MAX_LISTS + 1 }, (_, i) => one(`l${i}`));
    expect(() => AddressTable.build({ lists })).toThrow(/at most 32 IP lists \(one bit each\), but 33 were given: l0, l1/);
  });

  it('refuse a list given twice and an unknown list name', () => {
    expect(() => AddressTable.build({ lists: [one('a'), one('a')] })).toThrow(/IP list "a" is given twice/);
    expect(() => AddressTable.build({ lists: [one('a')] }).listBit('b')).toThrow(/IP list "b" is not in this address table \(lists: a\)/);
  });

  it('refuse GeoIP ranges that are not sorted and disjoint', () => {
    const bad: CountryRanges = { ...geoTable([{ first: 10n, last: 20n, value: 0 }, { first: 15n, last: 30n, value: 0 }], []), codes: ['AA'] };
    expect(() => AddressTable.build({ country: bad, lists: [] })).toThrow(/country table: IPv4 ranges are not sorted and disjoint at range 1/);
  });
});

describe('AddressTable with the GeoIP test databases', () => {
  const dir = geoipFixtureDir();
  const country = openGeoIpSync(join(dir, 'test-country.mmdb'), { kind: 'country' }).table as CountryTable;
  const asn = openGeoIpSync(join(dir, 'test-asn.mmdb'), { kind: 'asn' }).table as AsnTable;
  const t = AddressTable.build({
    country,
    asn,
    lists: [
      { name: 'svc.malware', ranges: rangeListFromStrings(['81.2.69.128/25', '2a00:1450::/48', '::ffff:81.2.69.0/120']) },
      { name: 'office', ranges: rangeListFromStrings(['81.2.69.0/24', '10.0.0.0/8']) },
    ],
  });
  const at4 = (ip: string): { country: string | undefined; asn: number; lists: number } => {
    const s = t.lookup4(parseIp(ip)!.words[0]!);
    return { country: t.countryCodes[t.country4[s]!], asn: t.asn4[s]!, lists: t.lists4[s]! };
  };
  const at6 = (ip: string): { country: string | undefined; asn: number; lists: number } => {
    const w = parseIp(ip)!.words;
    const s = t.lookup6(w[0]!, w[1]!, w[2]!, w[3]!);
    return { country: t.countryCodes[t.country6[s]!], asn: t.asn6[s]!, lists: t.lists6[s]! };
  };

  it('give country, AS number and list bits in one lookup', () => {
    const malware = t.listBit('svc.malware');
    const office = t.listBit('office');
    expect(at4('81.2.69.142')).toEqual({ country: 'GB', asn: 20712, lists: malware | office });
    expect(at4('81.2.69.1')).toEqual({ country: 'GB', asn: 20712, lists: office });
    expect(at4('10.1.2.3')).toEqual({ country: undefined, asn: NaN, lists: office });
    expect(at4('198.18.0.1')).toEqual({ country: undefined, asn: 4_200_000_001, lists: 0 });
    expect(at6('2a00:1450::1')).toEqual({ country: 'IE', asn: 15169, lists: malware });
    expect(at6('2a00:1450:1::1')).toEqual({ country: 'IE', asn: 15169, lists: 0 });
  });

  it('answer an IPv4-mapped IPv6 address from IPv6 data only, and follow the alias on request', () => {
    // The database says GB for ::ffff:81.2.69.1 (it aliases ::ffff:0:0/96 to IPv4); the table does not copy it.
    const mapped = at6('::ffff:81.2.69.1');
    expect(mapped).toEqual({ country: undefined, asn: NaN, lists: t.listBit('svc.malware') });
    const w = parseIp('::ffff:81.2.69.1')!.words;
    const v4 = t.v4Alias6(w[0]!, w[1]!, w[2]!, w[3]!);
    expect(formatIpv4(v4)).toBe('81.2.69.1');
    expect(t.countryCodes[t.country4[t.lookup4(v4)]!]).toBe('GB');
    const sixToFour = parseIp('2002:5102:4501::1')!.words;
    expect(formatIpv4(t.v4Alias6(sixToFour[0]!, sixToFour[1]!, sixToFour[2]!, sixToFour[3]!))).toBe('81.2.69.1');
    const native = parseIp('2a00:1450::1')!.words;
    expect(t.v4Alias6(native[0]!, native[1]!, native[2]!, native[3]!)).toBe(-1);
  });
});

describe('AddressTable build', () => {
  it('merges 3 lists of 100k prefixes and a 300k-range country table into segments that answer as their sources do', () => {
    const rng = new Rng(SEED);
    const prefix = (): [number, number] => {
      const r = rng.next();
      const len = r < 0.7 ? 32 : r < 0.85 ? 24 : r < 0.95 ? 25 + rng.int(7) : 16 + rng.int(8);
      const a = rng.int(2 ** 32);
      const host = len === 32 ? 0 : 2 ** (32 - len) - 1;
      const first = a - (a % (host + 1));
      return [first, first + host];
    };
    const lists = [0, 1, 2].map((i) => {
      const ps = Array.from({ length: 100_000 }, prefix);
      return { name: `l${i}`, ranges: { ...emptyRangeList(), v4First: Uint32Array.from(ps, (p) => p[0]), v4Last: Uint32Array.from(ps, (p) => p[1]), count: ps.length } };
    });
    // 300k country ranges: a random partition of the IPv4 space with some holes.
    const cuts = new Uint32Array(600_000);
    for (let i = 0; i < cuts.length; i++) cuts[i] = rng.int(2 ** 32);
    cuts.sort();
    const f: number[] = [];
    const l: number[] = [];
    const v: number[] = [];
    for (let i = 0; i + 1 < cuts.length; i += 2) {
      if (cuts[i]! >= cuts[i + 1]! || (f.length > 0 && cuts[i]! <= l[l.length - 1]!)) continue;
      f.push(cuts[i]!);
      l.push(cuts[i + 1]!);
      v.push(rng.int(250));
    }
    const country: CountryRanges = {
      v4First: Uint32Array.from(f),
      v4Last: Uint32Array.from(l),
      v4Value: Int32Array.from(v),
      v6First: new Uint32Array(0),
      v6Last: new Uint32Array(0),
      v6Value: new Int32Array(0),
      v6Aliases: [],
      codes: Array.from({ length: 250 }, (_, i) => `C${i}`),
    };
    // Build time and memory at this size are measured in bench/address-table.bench.ts.
    const t = AddressTable.build({ country, lists });
    expect(t.segments4).toBeGreaterThan(900_000);
    // Every list prefix's first and last address is in its list; every country range's ends carry its code.
    for (let i = 0; i < 3; i++) {
      const bit = t.listBit(`l${i}`);
      const r = lists[i]!.ranges;
      for (let k = 0; k < r.count; k += 97) {
        expect(t.lists4[t.lookup4(r.v4First[k]!)]! & bit).toBe(bit);
        expect(t.lists4[t.lookup4(r.v4Last[k]!)]! & bit).toBe(bit);
      }
    }
    for (let k = 0; k < f.length; k += 101) {
      expect(t.countryCodes[t.country4[t.lookup4(f[k]!)]!]).toBe(`C${v[k]}`);
      expect(t.countryCodes[t.country4[t.lookup4(l[k]!)]!]).toBe(`C${v[k]}`);
    }
  });

  it('sorts keys of one and four words in address order, ties in input order', () => {
    const keys = Uint32Array.from([5, 0, 0, 1, 0xffffffff, 0, 5, 0, 0, 0, 0, 1]);
    // Four-word keys: [5,0,0,1], [0xffffffff,0,5,0], [0,0,0,1]
    expect(Array.from(sortOrder(keys, 4, 3))).toEqual([2, 0, 1]);
    const one = Uint32Array.from([3, 1, 2, 1, 0x10000, 0xffff]);
    expect(Array.from(sortOrder(one, 1, 6))).toEqual([1, 3, 2, 0, 5, 4]);
  });
});

describe('AddressTable list screens', () => {
  const rng = new Rng(SEED ^ 0x5c7ee1);
  // Prefixes of every length, over a few /8s so that screened and unscreened /24s sit side by side.
  const entries: string[] = [];
  for (let i = 0; i < 3000; i++) {
    const len = rng.pick([32, 32, 31, 28, 25, 24, 24, 23, 20, 17]);
    const addr = ((rng.pick([10, 11, 192]) * 2 ** 24) + rng.int(2 ** 24)) >>> 0;
    entries.push(`${formatIpv4(len === 32 ? addr : (addr & ~(0xffffffff >>> len)) >>> 0)}/${len}`);
  }
  entries.push('2001:db8:1::/48', '2001:db8:2::5', '2400:cb00::/32');
  const table = AddressTable.build({ lists: [{ name: 'a', ranges: rangeListFromStrings(entries.slice(0, 1500)) }, { name: 'b', ranges: rangeListFromStrings(entries.slice(1500)) }] });

  it('clear a bit only where no list holds an address, IPv4', () => {
    let clear = 0;
    let listed = 0;
    for (let i = 0; i < 60_000; i++) {
      // Half near list entries (the same /24 or the next), half anywhere in the /8s used.
      const base = i % 2 === 0 ? parseIp(entries[rng.int(3000)]!.split('/')[0]!)!.words[0]! : (rng.pick([10, 11, 12, 192]) * 2 ** 24) >>> 0;
      const a = (base + rng.int(512)) >>> 0;
      const inList = table.lists4[table.lookup4(a)] !== 0;
      if (inList) listed++;
      if (!table.mayBeListed4(a)) {
        clear++;
        expect(inList, formatIpv4(a)).toBe(false);
      }
    }
    // Both answers occur often: the screen rules addresses out, and the test meets listed ones.
    expect(clear).toBeGreaterThan(12_000);
    expect(listed).toBeGreaterThan(6_000);
  });

  it('clear a bit only where no list holds an address, IPv6 (by the first 24 bits)', () => {
    for (const [text, may] of [['2001:db8:1::1', true], ['2001:db8:ffff::1', true], ['2001:db9::1', true], ['2001:e00::1', false], ['2400:cb00::1', true], ['2400:ca00::1', false], ['::1', false]] as const) {
      const w = parseIp(text)!.words;
      expect(table.mayBeListed6(w[0]!), text).toBe(may);
      if (!may) expect(table.lists6[table.lookup6(w[0]!, w[1]!, w[2]!, w[3]!)], text).toBe(0);
    }
  });

  it('are absent for a family no list has, and every address then screens out', () => {
    const v4only = AddressTable.build({ lists: [{ name: 'a', ranges: rangeListFromStrings(['10.0.0.0/8']) }] });
    expect(v4only.listScreen6).toBeNull();
    expect(v4only.mayBeListed6(0x20010db8)).toBe(false);
    expect(v4only.mayBeListed4(0x0a000001)).toBe(true);
    expect(v4only.mayBeListed4(0x0b000001)).toBe(false);
    const none = AddressTable.build({ lists: [] });
    expect(none.listScreen4).toBeNull();
    expect(none.mayBeListed4(0)).toBe(false);
    // A whole-space entry marks every /24.
    const all = AddressTable.build({ lists: [{ name: 'a', ranges: rangeListFromStrings(['0.0.0.0/0']) }] });
    expect(all.listScreen4!.every((w) => w === 0xffffffff)).toBe(true);
  });
});
