// Synthetic GeoIP data for tests and benchmarks: random partitions of the
// address space into CIDR networks (a leaf is split at random until the count
// is reached), with neighbouring networks often sharing a country as real
// data does, some holes, and a few nested overrides. Written with MmdbWriter.

import { asnRecord, countryRecord, MmdbWriter, type MmdbWriterOptions } from './mmdb-writer.js';
import type { Rng } from './random.js';

/** A network: [uint32] for IPv4 or four uint32 words for IPv6, and a prefix length. */
export interface Network {
  readonly family: 4 | 6;
  readonly words: number[];
  readonly length: number;
}

/** Country codes used by the synthetic databases. */
export const SYNTHETIC_CODES: readonly string[] = (() => {
  const out: string[] = [];
  const letters = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';
  for (let i = 0; i < 250; i++) out.push(letters[i % 26]! + letters[Math.floor(i / 26) % 26]!);
  return out;
})();

function withBit(words: readonly number[], bit: number): number[] {
  const w = words.slice();
  w[bit >>> 5] = (w[bit >>> 5]! | (1 << (31 - (bit & 31)))) >>> 0;
  return w;
}

/**
 * `count` networks partitioning the prefix root/rootLength, no longer than
 * maxLength, in address order. Leaves to split are picked at random, so sizes vary.
 */
export function randomPartition(rng: Rng, family: 4 | 6, root: readonly number[], rootLength: number, count: number, maxLength: number): Network[] {
  let leaves: Network[] = [{ family, words: root.slice(), length: rootLength }];
  const bits = family === 4 ? 32 : 128;
  let stuck = 0;
  while (leaves.length < count && stuck < 1000) {
    const i = rng.int(leaves.length);
    const l = leaves[i]!;
    if (l.length >= maxLength || l.length >= bits) {
      stuck++;
      continue;
    }
    stuck = 0;
    const left: Network = { family, words: l.words, length: l.length + 1 };
    const right: Network = { family, words: withBit(l.words, l.length), length: l.length + 1 };
    leaves[i] = left;
    leaves.push(right);
  }
  leaves = leaves.sort((a, b) => {
    for (let k = 0; k < a.words.length; k++) if (a.words[k] !== b.words[k]) return a.words[k]! < b.words[k]! ? -1 : 1;
    return 0;
  });
  return leaves;
}

/** Text of a network, e.g. `10.0.0.0/8` or `2001:db8::/32`. */
export function networkText(n: Network): string {
  if (n.family === 4) {
    const v = n.words[0]!;
    return `${v >>> 24}.${(v >>> 16) & 255}.${(v >>> 8) & 255}.${v & 255}/${n.length}`;
  }
  const parts: string[] = [];
  for (const w of n.words) parts.push((w >>> 16).toString(16), (w & 0xffff).toString(16));
  return `${parts.join(':')}/${n.length}`;
}

export interface SyntheticOptions {
  /** IPv4 networks (before holes); default 2,000. */
  v4?: number;
  /** IPv6 networks; default 1,000. */
  v6?: number;
  /** Fraction of networks left without data; default 0.05. */
  holes?: number;
  /** Nested networks added on top (more specific, other value); default 1% of the total. */
  nested?: number;
  writer?: Partial<MmdbWriterOptions>;
}

/** Networks with a value index (0..values-1) each: runs of equal values, holes and nested overrides. */
export function syntheticNetworks(rng: Rng, values: number, o: SyntheticOptions = {}): Array<{ net: Network; value: number }> {
  const v4 = o.v4 ?? 2000;
  const v6 = o.writer?.ipVersion === 4 ? 0 : (o.v6 ?? 1000);
  const holes = o.holes ?? 0.05;
  const out: Array<{ net: Network; value: number }> = [];
  const assign = (nets: Network[]): void => {
    let current = rng.int(values);
    for (const n of nets) {
      if (rng.chance(0.4)) current = rng.int(values); // runs of the same value, like real allocations
      if (rng.chance(holes)) continue;
      out.push({ net: n, value: current });
    }
  };
  if (v4 > 0) assign(randomPartition(rng, 4, [0], 0, v4, 32));
  if (v6 > 0) {
    // Native IPv6 data under 2000::/3 (clear of ::/96, ::ffff:0:0/96 and 2002::/16 only by chance,
    // so those regions are cut out below).
    const nets = randomPartition(rng, 6, [0x20000000, 0, 0, 0], 3, v6, 64).filter((n) => !(n.words[0]! >>> 16 === 0x2002 || (n.length < 16 && (0x20020000 >>> (32 - n.length)) === n.words[0]! >>> (32 - n.length))));
    assign(nets);
  }
  const nested = o.nested ?? Math.floor((v4 + v6) / 100);
  for (let i = 0; i < nested && out.length > 0; i++) {
    const base = out[rng.int(out.length)]!;
    const bits = base.net.family === 4 ? 32 : 128;
    const maxLen = Math.min(bits, base.net.length + 8);
    if (base.net.length >= maxLen) continue;
    const length = base.net.length + 1 + rng.int(maxLen - base.net.length);
    const words = base.net.words.slice();
    for (let b = base.net.length; b < length; b++) if (rng.chance(0.5)) words[b >>> 5] = (words[b >>> 5]! | (1 << (31 - (b & 31)))) >>> 0;
    out.push({ net: { family: base.net.family, words, length }, value: rng.int(values) });
  }
  return out;
}

/** A GeoLite2-Country-layout database of synthetic networks. */
export function syntheticCountryDb(rng: Rng, o: SyntheticOptions = {}): Buffer {
  const w = new MmdbWriter({ databaseType: 'GeoLite2-Country', ...o.writer });
  const records = SYNTHETIC_CODES.map((c) => countryRecord(c));
  for (const { net, value } of syntheticNetworks(rng, SYNTHETIC_CODES.length, o)) {
    w.insertWords(net.family, net.words, net.length, records[value]!);
  }
  return w.toBuffer();
}

/** A GeoLite2-ASN-layout database of synthetic networks (AS numbers up to 4,200,000,000). */
export function syntheticAsnDb(rng: Rng, o: SyntheticOptions = {}): Buffer {
  const w = new MmdbWriter({ databaseType: 'GeoLite2-ASN', ...o.writer });
  const asns = Array.from({ length: 5000 }, (_, i) => (i === 0 ? 4_200_000_000 : i === 1 ? 0 : 1 + rng.int(400_000)));
  const records = asns.map((a) => asnRecord(a, `AS${a}`));
  for (const { net, value } of syntheticNetworks(rng, asns.length, o)) {
    w.insertWords(net.family, net.words, net.length, records[value]!);
  }
  return w.toBuffer();
}
