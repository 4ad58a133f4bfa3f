// AddressTable benchmarks, with the reference structures
// measured in the same run:
//   - build time and memory for 1M IPv4 and 1M IPv6 prefixes (mix: 70% host,
//     15% /24 (v6: /64), 10% /25-/31 (v6: /65-/127), 5% /16-/23 (v6: /32-/63));
//   - lookups/s at 100k and 1M prefixes, keys 50% uniform random and 50% inside
//     a prefix: AddressTable vs a binary trie in typed arrays (IPv4) and vs the
//     merged-interval sets of the language (NumberRangeSet / Ip6RangeSet);
//   - GeoIP: the maxmind Reader's get() vs the flattened tables, on the test
//     country database and on a synthetic one of realistic size (~300k IPv4 ranges);
//   - the daemon's case: GeoIP country + 3 lists of 100k IPv4 prefixes.

import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Reader } from 'maxmind';
import { geoIpFromBuffer, geoValue4, type CountryTable } from '../src/geoip/index.js';
import { formatIpv4, Ip6RangeSet, NumberRangeSet } from '../src/net/index.js';
import { emptyRangeList, parseListText, type IpRangeList } from '../src/net/list-file.js';
import { AddressTable } from '../src/table/index.js';
import { geoipFixtureDir } from '../test/support/make-mmdb.js';
import { Rng } from '../test/support/random.js';
import { syntheticCountryDb } from '../test/support/synthetic-geoip.js';
import { measure, report, type Figure } from './harness.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const MB = 1024 * 1024;

interface Mem {
  heap: number;
  arrays: number;
}

function mem(): Mem {
  gc();
  gc();
  const m = process.memoryUsage();
  return { heap: m.heapUsed, arrays: m.arrayBuffers };
}

function memDelta(a: Mem, b: Mem): string {
  const mb = (x: number): string => `${x >= 0 ? '+' : ''}${(x / MB).toFixed(1)} MB`;
  return `heap ${mb(b.heap - a.heap)}, array buffers ${mb(b.arrays - a.arrays)}`;
}

/** Median wall time of `rounds` runs of fn, in ms (one warm-up run first). */
function time<T>(fn: () => T, rounds = 3): { ms: number; value: T } {
  let value = fn();
  const samples: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const t0 = performance.now();
    value = fn();
    samples.push(performance.now() - t0);
  }
  samples.sort((x, y) => x - y);
  return { ms: samples[samples.length >> 1]!, value };
}

// ---- Prefix generation -----------------------------------------------------------------

function prefixLength4(rng: Rng): number {
  const r = rng.next();
  return r < 0.7 ? 32 : r < 0.85 ? 24 : r < 0.95 ? 25 + rng.int(7) : 16 + rng.int(8);
}

function prefixLength6(rng: Rng): number {
  const r = rng.next();
  return r < 0.7 ? 128 : r < 0.85 ? 64 : r < 0.95 ? 65 + rng.int(63) : 32 + rng.int(32);
}

function word(rng: Rng): number {
  return rng.int(0x10000) * 0x10000 + rng.int(0x10000);
}

interface Prefixes4 {
  addr: Uint32Array;
  len: Uint8Array;
  list: IpRangeList;
}

function prefixes4(rng: Rng, n: number): Prefixes4 {
  const addr = new Uint32Array(n);
  const len = new Uint8Array(n);
  const first = new Uint32Array(n);
  const last = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const l = prefixLength4(rng);
    const host = l === 32 ? 0 : 2 ** (32 - l) - 1;
    const a = word(rng);
    const f = a - (a % (host + 1));
    addr[i] = f;
    len[i] = l;
    first[i] = f;
    last[i] = f + host;
  }
  return { addr, len, list: { ...emptyRangeList(), v4First: first, v4Last: last, count: n } };
}

interface Prefixes6 {
  list: IpRangeList;
}

function prefixes6(rng: Rng, n: number): Prefixes6 {
  const first = new Uint32Array(n * 4);
  const last = new Uint32Array(n * 4);
  for (let i = 0; i < n; i++) {
    const l = prefixLength6(rng);
    // Global unicast 2000::/3, like real lists.
    const w = [0x20000000 + rng.int(0x20000000), word(rng), word(rng), word(rng)];
    for (let k = 0; k < 4; k++) {
      const keep = Math.max(0, Math.min(32, l - 32 * k));
      const host = keep === 32 ? 0 : keep === 0 ? 0xffffffff : 0xffffffff >>> keep;
      first[i * 4 + k] = (w[k]! & ~host) >>> 0;
      last[i * 4 + k] = (w[k]! | host) >>> 0;
    }
  }
  return { list: { ...emptyRangeList(), v6First: first, v6Last: last, count: n } };
}

/** Keys: 50% uniform, 50% inside a random prefix of the list. */
function keys4(rng: Rng, list: IpRangeList, n: number): Uint32Array {
  const k = new Uint32Array(n);
  const m = list.v4First.length;
  for (let i = 0; i < n; i++) {
    if (rng.chance(0.5)) k[i] = word(rng);
    else {
      const j = rng.int(m);
      k[i] = list.v4First[j]! + rng.int(list.v4Last[j]! - list.v4First[j]! + 1);
    }
  }
  return k;
}

function keys6(rng: Rng, list: IpRangeList, n: number): Uint32Array {
  const k = new Uint32Array(n * 4);
  const m = list.v6First.length / 4;
  for (let i = 0; i < n; i++) {
    if (rng.chance(0.5)) {
      k[i * 4] = 0x20000000 + rng.int(0x20000000);
      for (let w = 1; w < 4; w++) k[i * 4 + w] = word(rng);
    } else {
      const j = rng.int(m);
      for (let w = 0; w < 4; w++) {
        const f = list.v6First[j * 4 + w]!;
        const l = list.v6Last[j * 4 + w]!;
        k[i * 4 + w] = f === l ? f : f + rng.int(l - f + 1);
      }
    }
  }
  return k;
}

// ---- Reference: binary trie in typed arrays ------------------------------------------

/** A binary trie over IPv4 prefixes: two Int32 child arrays and a terminal flag. */
class TypedTrie4 {
  left: Int32Array;
  right: Int32Array;
  term: Uint8Array;
  nodes = 1;

  constructor(capacity: number) {
    this.left = new Int32Array(capacity);
    this.right = new Int32Array(capacity);
    this.term = new Uint8Array(capacity);
  }

  private grow(): void {
    const cap = this.left.length * 2;
    const l = new Int32Array(cap);
    l.set(this.left);
    const r = new Int32Array(cap);
    r.set(this.right);
    const t = new Uint8Array(cap);
    t.set(this.term);
    this.left = l;
    this.right = r;
    this.term = t;
  }

  insert(addr: number, len: number): void {
    let node = 0;
    for (let d = 0; d < len; d++) {
      if (this.term[node]) return; // already covered
      const bit = (addr >>> (31 - d)) & 1;
      const arr = bit ? this.right : this.left;
      let child = arr[node]!;
      if (child === 0) {
        if (this.nodes === this.left.length) this.grow();
        child = this.nodes++;
        (bit ? this.right : this.left)[node] = child;
      }
      node = child;
    }
    this.term[node] = 1;
  }

  has(addr: number): boolean {
    let node = 0;
    for (let d = 0; d < 32; d++) {
      if (this.term[node]) return true;
      const child = (addr >>> (31 - d)) & 1 ? this.right[node]! : this.left[node]!;
      if (child === 0) return false;
      node = child;
    }
    return this.term[node] === 1;
  }

  get byteLength(): number {
    return this.left.byteLength + this.right.byteLength + this.term.byteLength;
  }
}

// ---- Sections --------------------------------------------------------------------------

function lookup4Loop(t: AddressTable, keys: Uint32Array, mask: number): (n: number) => number {
  return (n) => {
    let hits = 0;
    const len = keys.length;
    for (let i = 0, j = 0; i < n; i++, j = j + 1 === len ? 0 : j + 1) if ((t.lists4[t.lookup4(keys[j]!)]! & mask) !== 0) hits++;
    return hits;
  };
}

function ipv4Section(rng: Rng): void {
  console.log('\n## IPv4 lists: 1M prefixes (70% /32, 15% /24, 10% /25-31, 5% /16-23)');
  const big = prefixes4(rng, 1_000_000);
  // Parsing the same prefixes as a list file.
  const text = Array.from(big.addr, (a, i) => (big.len[i] === 32 ? formatIpv4(a) : `${formatIpv4(a)}/${big.len[i]}`)).join('\n');
  const parsed = time(() => parseListText(text, 'bench.txt'), 3);
  console.log(`parse a 1M-line list file (${(text.length / MB).toFixed(1)} MB): ${parsed.ms.toFixed(0)} ms`);

  const m0 = mem();
  const built = time(() => AddressTable.build({ lists: [{ name: 'l', ranges: big.list }] }), 3);
  const t = built.value;
  const m1 = mem();
  console.log(
    `AddressTable.build: ${built.ms.toFixed(0)} ms; ${t.segments4.toLocaleString('en')} IPv4 segments; typed arrays ${(t.byteLength / MB).toFixed(1)} MB ` +
      `(${(t.byteLength4 / MB).toFixed(1)} MB IPv4: ` +
      `${((t.byteLength4 - t.index4.byteLength) / t.segments4) | 0} B/segment); ${memDelta(m0, m1)}`,
  );

  const trieBuild = time(() => {
    const trie = new TypedTrie4(1 << 20);
    for (let i = 0; i < big.addr.length; i++) trie.insert(big.addr[i]!, big.len[i]!);
    return trie;
  }, 1);
  const trie = trieBuild.value;
  const m2 = mem();
  console.log(`binary trie (typed arrays): build ${trieBuild.ms.toFixed(0)} ms; ${trie.nodes.toLocaleString('en')} nodes, ${(trie.byteLength / MB).toFixed(1)} MB typed; ${memDelta(m1, m2)}`);
  const rangeSet = time(() => new NumberRangeSet(Array.from(big.list.v4First, (f, i) => [f, big.list.v4Last[i]!] as const)), 1);
  console.log(`NumberRangeSet (the language's IP set): build ${rangeSet.ms.toFixed(0)} ms; ${rangeSet.value.size.toLocaleString('en')} ranges`);

  for (const n of [100_000, 1_000_000]) {
    const sub: IpRangeList = { ...big.list, v4First: big.list.v4First.subarray(0, n), v4Last: big.list.v4Last.subarray(0, n), count: n };
    const table = n === 1_000_000 ? t : AddressTable.build({ lists: [{ name: 'l', ranges: sub }] });
    const tr = n === 1_000_000 ? trie : new TypedTrie4(1 << 18);
    if (n !== 1_000_000) for (let i = 0; i < n; i++) tr.insert(big.addr[i]!, big.len[i]!);
    const rs = n === 1_000_000 ? rangeSet.value : new NumberRangeSet(Array.from(sub.v4First, (f, i) => [f, sub.v4Last[i]!] as const));
    const keys = keys4(rng, sub, 1_000_000);
    const mask = table.listBit('l');
    const figs: Figure[] = [
      measure(`AddressTable.lookup4 (/16 index)`, lookup4Loop(table, keys, mask)),
      measure(`binary trie (typed arrays)`, (k) => {
        let hits = 0;
        for (let i = 0, j = 0; i < k; i++, j = j + 1 === keys.length ? 0 : j + 1) if (tr.has(keys[j]!)) hits++;
        return hits;
      }),
      measure(`NumberRangeSet binary search`, (k) => {
        let hits = 0;
        for (let i = 0, j = 0; i < k; i++, j = j + 1 === keys.length ? 0 : j + 1) if (rs.has(keys[j]!)) hits++;
        return hits;
      }),
    ];
    // Same answers?
    let disagree = 0;
    for (let i = 0; i < 100_000; i++) {
      const a = (table.lists4[table.lookup4(keys[i]!)]! & mask) !== 0;
      if (a !== tr.has(keys[i]!) || a !== rs.has(keys[i]!)) disagree++;
    }
    report(`IPv4 membership lookups, ${n.toLocaleString('en')} prefixes (${table.segments4.toLocaleString('en')} segments; disagreements on 100k keys: ${disagree})`, figs, figs[0]);
  }
}

function ipv6Section(rng: Rng): void {
  console.log('\n## IPv6 lists: 1M prefixes (70% /128, 15% /64, 10% /65-127, 5% /32-63, in 2000::/3)');
  const big = prefixes6(rng, 1_000_000);
  const m0 = mem();
  const built = time(() => AddressTable.build({ lists: [{ name: 'l', ranges: big.list }] }), 3);
  const t = built.value;
  const m1 = mem();
  const bytes6 = t.starts6.byteLength + t.country6.byteLength + t.asn6.byteLength + t.lists6.byteLength;
  console.log(
    `AddressTable.build: ${built.ms.toFixed(0)} ms; ${t.segments6.toLocaleString('en')} IPv6 segments; IPv6 typed arrays ${((bytes6 + t.index6.byteLength) / MB).toFixed(1)} MB ` +
      `(${(bytes6 / t.segments6) | 0} B/segment); ${memDelta(m0, m1)}`,
  );
  const rangeSetBuild = time(
    () =>
      new Ip6RangeSet(
        Array.from({ length: 1_000_000 }, (_, i) => [Array.from(big.list.v6First.subarray(i * 4, i * 4 + 4)), Array.from(big.list.v6Last.subarray(i * 4, i * 4 + 4))] as const),
      ),
    1,
  );
  console.log(`Ip6RangeSet (the language's IPv6 set, comparator sort): build ${rangeSetBuild.ms.toFixed(0)} ms; ${rangeSetBuild.value.count.toLocaleString('en')} ranges`);
  console.log('(no IPv6 binary trie: ~100 nodes per /128 prefix, about 800 MB at 1M)');

  for (const n of [100_000, 1_000_000]) {
    const sub: IpRangeList = { ...big.list, v6First: big.list.v6First.subarray(0, n * 4), v6Last: big.list.v6Last.subarray(0, n * 4), count: n };
    const table = n === 1_000_000 ? t : AddressTable.build({ lists: [{ name: 'l', ranges: sub }] });
    const rs =
      n === 1_000_000
        ? rangeSetBuild.value
        : new Ip6RangeSet(Array.from({ length: n }, (_, i) => [Array.from(sub.v6First.subarray(i * 4, i * 4 + 4)), Array.from(sub.v6Last.subarray(i * 4, i * 4 + 4))] as const));
    const keys = keys6(rng, sub, 1_000_000);
    const mask = table.listBit('l');
    const nk = keys.length / 4;
    const figs: Figure[] = [
      measure('AddressTable.lookup6 (/16 index)', (k) => {
        let hits = 0;
        for (let i = 0, j = 0; i < k; i++, j = j + 1 === nk ? 0 : j + 1) {
          const o = j * 4;
          if ((table.lists6[table.lookup6(keys[o]!, keys[o + 1]!, keys[o + 2]!, keys[o + 3]!)]! & mask) !== 0) hits++;
        }
        return hits;
      }),
      measure('Ip6RangeSet binary search', (k) => {
        let hits = 0;
        for (let i = 0, j = 0; i < k; i++, j = j + 1 === nk ? 0 : j + 1) {
          const o = j * 4;
          if (rs.has(keys[o]!, keys[o + 1]!, keys[o + 2]!, keys[o + 3]!)) hits++;
        }
        return hits;
      }),
    ];
    let disagree = 0;
    for (let j = 0; j < 100_000; j++) {
      const o = j * 4;
      const a = (table.lists6[table.lookup6(keys[o]!, keys[o + 1]!, keys[o + 2]!, keys[o + 3]!)]! & mask) !== 0;
      if (a !== rs.has(keys[o]!, keys[o + 1]!, keys[o + 2]!, keys[o + 3]!)) disagree++;
    }
    report(`IPv6 membership lookups, ${n.toLocaleString('en')} prefixes (${table.segments6.toLocaleString('en')} segments; disagreements on 100k keys: ${disagree})`, figs, figs[0]);
  }
}

function geoSection(rng: Rng, name: string, buf: Buffer): CountryTable {
  const flat = time(() => geoIpFromBuffer(buf, name, { kind: 'country' }), 3);
  const db = flat.value;
  const table = db.table as CountryTable;
  const at = AddressTable.build({ country: table, lists: [] });
  console.log(
    `\n${name}: ${(buf.length / MB).toFixed(2)} MB, ${db.metadata.nodeCount.toLocaleString('en')} nodes, ${db.records} records; flattened in ${flat.ms.toFixed(0)} ms to ` +
      `${table.v4Value.length.toLocaleString('en')} IPv4 + ${table.v6Value.length.toLocaleString('en')} IPv6 ranges ` +
      `(${((table.v4First.byteLength * 2 + table.v4Value.byteLength) / MB).toFixed(2)} MB IPv4); AddressTable ${at.segments4.toLocaleString('en')} IPv4 segments`,
  );
  const n = 200_000;
  const keys = new Uint32Array(n);
  for (let i = 0; i < n; i++) keys[i] = word(rng);
  const strings = Array.from(keys, formatIpv4);
  const reader = db.reader as Reader<Record<string, { iso_code?: string }>>;
  const cached = new Reader<Record<string, { iso_code?: string }>>(buf, { cache: lruish(10_000) });
  const iso = (r: Record<string, { iso_code?: string }> | null): number => (r?.country?.iso_code ?? r?.registered_country?.iso_code ?? '').length;
  const figs: Figure[] = [
    measure('AddressTable.lookup4 + country4', (k) => {
      let s = 0;
      for (let i = 0, j = 0; i < k; i++, j = j + 1 === n ? 0 : j + 1) s += at.country4[at.lookup4(keys[j]!)]!;
      return s;
    }),
    measure('geoValue4 (flattened, plain binary search)', (k) => {
      let s = 0;
      for (let i = 0, j = 0; i < k; i++, j = j + 1 === n ? 0 : j + 1) s += geoValue4(table, keys[j]!);
      return s;
    }),
    measure('Reader.get(string), strings prepared, no cache', (k) => {
      let s = 0;
      for (let i = 0, j = 0; i < k; i++, j = j + 1 === n ? 0 : j + 1) s += iso(reader.get(strings[j]!));
      return s;
    }),
    measure('Reader.get(string), strings prepared, 10k LRU', (k) => {
      let s = 0;
      for (let i = 0, j = 0; i < k; i++, j = j + 1 === n ? 0 : j + 1) s += iso(cached.get(strings[j]!));
      return s;
    }),
    measure('Reader.get(formatIpv4(uint32)), no cache (packet path)', (k) => {
      let s = 0;
      for (let i = 0, j = 0; i < k; i++, j = j + 1 === n ? 0 : j + 1) s += iso(reader.get(formatIpv4(keys[j]!)));
      return s;
    }),
  ];
  let disagree = 0;
  for (let i = 0; i < 100_000; i++) {
    const c = at.country4[at.lookup4(keys[i]!)]!;
    const r = reader.get(strings[i]!);
    const want = r?.country?.iso_code ?? r?.registered_country?.iso_code;
    if ((c === -1 ? undefined : at.countryCodes[c]) !== want) disagree++;
  }
  report(`GeoIP country lookups, ${name} (1 uniform random IPv4 per op; disagreements with the Reader on 100k: ${disagree})`, figs, figs[0]);
  return table;
}

/** A tiny LRU-ish cache with the get/set the Reader expects (the maxmind package's own uses tiny-lru). */
function lruish(max: number): { get(k: string | number): unknown; set(k: string | number, v: unknown): void } {
  const m = new Map<string | number, unknown>();
  return {
    get(k) {
      const v = m.get(k);
      if (v !== undefined) {
        m.delete(k);
        m.set(k, v);
      }
      return v;
    },
    set(k, v) {
      m.set(k, v);
      if (m.size > max) m.delete(m.keys().next().value!);
    },
  };
}

function combinedSection(rng: Rng, country: CountryTable): void {
  const lists = [0, 1, 2].map((i) => ({ name: `list${i}`, ranges: prefixes4(rng, 100_000).list }));
  const m0 = mem();
  const built = time(() => AddressTable.build({ country, lists }), 5);
  const m1 = mem();
  const t = built.value;
  console.log(
    `\n## Daemon case: synthetic country DB + 3 lists of 100k IPv4 prefixes\nAddressTable.build: ${built.ms.toFixed(0)} ms; ` +
      `${t.segments4.toLocaleString('en')} IPv4 + ${t.segments6.toLocaleString('en')} IPv6 segments; typed arrays ${(t.byteLength / MB).toFixed(1)} MB; ${memDelta(m0, m1)}`,
  );
  const keys = keys4(rng, lists[0]!.ranges, 1_000_000);
  const figs = [
    measure('lookup4 -> country, ASN and 3 list bits', (k) => {
      let s = 0;
      for (let i = 0, j = 0; i < k; i++, j = j + 1 === keys.length ? 0 : j + 1) {
        const seg = t.lookup4(keys[j]!);
        s += t.country4[seg]! + (t.asn4[seg]! > 0 ? 1 : 0) + t.lists4[seg]!;
      }
      return s;
    }),
  ];
  report('Combined lookups (keys: 50% uniform, 50% in list0)', figs);
}

/** Runs every AddressTable benchmark and prints the figures. */
export function runAddressTableBench(): void {
  const rng = new Rng(20240607);
  console.log('\n# AddressTable: merged GeoIP + lists segment tables');
  ipv4Section(rng);
  ipv6Section(rng);

  console.log('\n## GeoIP: maxmind Reader vs flattened tables');
  geoSection(rng, 'test-country.mmdb (fixture)', readFileSync(join(geoipFixtureDir(), 'test-country.mmdb')));
  const t0 = performance.now();
  const bigDb = syntheticCountryDb(new Rng(7), { v4: 700_000, v6: 150_000 });
  console.log(`(synthetic country database written by test/support/mmdb-writer.ts in ${(performance.now() - t0).toFixed(0)} ms)`);
  const big = geoSection(rng, 'synthetic country DB', bigDb);
  combinedSection(rng, big);
}
