// A MaxMind DB (MMDB, format 2.0) writer for test databases, written from the
// format specification (maxmind.github.io/MaxMind-DB/):
//
//   [binary search tree][16 zero bytes][data section]["\xAB\xCD\xEFMaxMind.com"][metadata map]
//
// - The tree has `node_count` nodes of two records each (left = bit 0, right =
//   bit 1), 24, 28 or 32 bits per record. A record holds a node number
//   (< node_count), node_count itself ("no data"), or node_count + 16 + the
//   offset of a value in the data section.
//   24: 3+3 bytes; 28: 3 bytes of left, one byte whose high nibble is bits
//   24..27 of left and low nibble bits 24..27 of right, 3 bytes of right;
//   32: 4+4 bytes. Big-endian throughout.
// - Data values start with a control byte: type in the top 3 bits (0 =
//   extended: the next byte is type - 7), size in the low 5 bits (< 29, or
//   29/30/31 followed by 1/2/3 bytes holding size - 29 / - 285 / - 65821).
//   Types used here: 2 utf8_string, 3 double, 5 uint16, 6 uint32, 7 map
//   (size = pairs, keys are strings), 9 uint64, 11 array, 14 boolean (size is
//   the value). Identical values are written once; pointers are not used.
// - IPv6 trees (ip_version 6) keep IPv4 at ::/96. With `aliasIpv6ToIpv4`
//   the records for ::ffff:0:0/96 (IPv4-mapped) and 2002::/16 (6to4) point
//   to the node of ::/96, as MaxMind's own writer and GeoLite2 do.
//
// Networks may nest: a more specific network wins over a shorter one whatever
// the insertion order. Node numbers are assigned breadth-first from the root
// over the reachable tree. Output is deterministic for a given input.

import { parseIp } from '../../src/net/index.js';

/** A value of the data section. Numbers are uint32 when integral in 0..2^32-1, else double. */
export type MmdbValue = string | number | boolean | bigint | MmdbTyped | MmdbValue[] | { [key: string]: MmdbValue };

/** A number with an explicit MMDB type. */
export interface MmdbTyped {
  readonly $type: 'uint16' | 'uint32' | 'uint64' | 'double' | 'int32';
  readonly value: number | bigint;
}

/** Marks a number as uint16 (as MaxMind's metadata does). */
export const uint16 = (value: number): MmdbTyped => ({ $type: 'uint16', value });

export interface MmdbWriterOptions {
  /** `database_type` in the metadata, e.g. "GeoLite2-Country". */
  databaseType: string;
  /** 6 (default: IPv4 lives at ::/96) or 4 (IPv4 only). */
  ipVersion?: 4 | 6;
  /** 24, 28 or 32; default: the smallest that fits. */
  recordSize?: 24 | 28 | 32;
  /** Point ::ffff:0:0/96 and 2002::/16 at the IPv4 subtree (IPv6 trees only). Default true. */
  aliasIpv6ToIpv4?: boolean;
  languages?: string[];
  description?: Record<string, string>;
  /** Seconds since the epoch; default 1,700,000,000 (fixed, so output is reproducible). */
  buildEpoch?: number;
}

const METADATA_MARKER = Buffer.from([0xab, 0xcd, 0xef, ...Buffer.from('MaxMind.com', 'latin1')]);
const EMPTY = -1;

/** Collects networks and writes an MMDB file. */
export class MmdbWriter {
  private readonly opts: Required<MmdbWriterOptions>;
  private readonly pending: Array<{ words: number[]; length: number; data: number; seq: number }> = [];
  private readonly dataIndex = new Map<string, number>();
  private readonly dataValues: MmdbValue[] = [];
  private readonly byObject = new WeakMap<object, number>();
  // Tree during building: per node, two records. A record is EMPTY, a node
  // number (>= 0), or -(2 + data index).
  private left = new Int32Array(1024);
  private right = new Int32Array(1024);
  private nodes = 0;

  constructor(options: MmdbWriterOptions) {
    this.opts = {
      ipVersion: 6,
      recordSize: undefined as unknown as 24,
      aliasIpv6ToIpv4: true,
      languages: ['en'],
      description: { en: `${options.databaseType} test database` },
      buildEpoch: 1_700_000_000,
      ...options,
    };
  }

  /** Adds a network given as CIDR text (`81.2.69.0/24`, `2a00:1450::/32`) with its record. */
  insert(cidr: string, data: MmdbValue): this {
    const slash = cidr.indexOf('/');
    const addr = parseIp(slash < 0 ? cidr : cidr.slice(0, slash));
    if (addr === undefined) throw new Error(`bad network ${JSON.stringify(cidr)}`);
    const len = slash < 0 ? (addr.family === 4 ? 32 : 128) : Number(cidr.slice(slash + 1));
    return this.insertWords(addr.family, addr.words, len, data);
  }

  /** Adds a network: `words` is [uint32] for IPv4 or four uint32 words for IPv6. */
  insertWords(family: 4 | 6, words: readonly number[], length: number, data: MmdbValue): this {
    const max = family === 4 ? 32 : 128;
    if (!Number.isInteger(length) || length < 0 || length > max) throw new Error(`bad prefix length ${length}`);
    let w: number[];
    let len: number;
    if (family === 4) {
      w = this.opts.ipVersion === 6 ? [0, 0, 0, words[0]! >>> 0] : [words[0]! >>> 0];
      len = this.opts.ipVersion === 6 ? 96 + length : length;
    } else {
      if (this.opts.ipVersion === 4) throw new Error('an IPv4 database cannot hold IPv6 networks');
      w = words.map((x) => x >>> 0);
      len = length;
    }
    // The same object given again is the same value: skip re-serialising it.
    let index = typeof data === 'object' && data !== null ? this.byObject.get(data) : undefined;
    if (index === undefined) {
      const key = stableKey(data);
      index = this.dataIndex.get(key);
      if (index === undefined) {
        index = this.dataValues.length;
        this.dataValues.push(data);
        this.dataIndex.set(key, index);
      }
      if (typeof data === 'object' && data !== null) this.byObject.set(data, index);
    }
    this.pending.push({ words: w, length: len, data: index, seq: this.pending.length });
    return this;
  }

  /** Builds the file. */
  toBuffer(): Buffer {
    this.nodes = 0;
    this.newNode(EMPTY, EMPTY); // root
    // Shorter prefixes first, so that more specific networks override them.
    const order = this.pending.slice().sort((a, b) => a.length - b.length || a.seq - b.seq);
    for (const p of order) this.place(p.words, p.length, -(2 + p.data));
    if (this.opts.ipVersion === 6) {
      const v4root = this.ensureNode([0, 0, 0, 0], 96);
      if (this.opts.aliasIpv6ToIpv4) {
        this.alias([0, 0, 0xffff, 0], 96, v4root);
        this.alias([0x20020000, 0, 0, 0], 16, v4root);
      }
    }
    return this.serialize();
  }

  private newNode(l: number, r: number): number {
    if (this.nodes === this.left.length) {
      const nl = new Int32Array(this.left.length * 2);
      nl.set(this.left);
      const nr = new Int32Array(this.right.length * 2);
      nr.set(this.right);
      this.left = nl;
      this.right = nr;
    }
    this.left[this.nodes] = l;
    this.right[this.nodes] = r;
    return this.nodes++;
  }

  private bitAt(words: readonly number[], i: number): number {
    return (words[i >>> 5]! >>> (31 - (i & 31))) & 1;
  }

  private getRec(node: number, bit: number): number {
    return bit ? this.right[node]! : this.left[node]!;
  }

  private setRec(node: number, bit: number, v: number): void {
    if (bit) this.right[node] = v;
    else this.left[node] = v;
  }

  /** Walks to depth `length - 1`, splitting leaves on the way; returns the node owning the final record. */
  private descend(words: readonly number[], length: number): number {
    let node = 0;
    for (let d = 0; d < length - 1; d++) {
      const bit = this.bitAt(words, d);
      let child = this.getRec(node, bit);
      if (child < 0) {
        // Empty or data: split it into a node whose halves both keep it.
        child = this.newNode(child, child);
        this.setRec(node, bit, child);
      }
      node = child;
    }
    return node;
  }

  private place(words: readonly number[], length: number, rec: number): void {
    if (length === 0) throw new Error('a network of prefix length 0 cannot be stored (the root is a node)');
    const node = this.descend(words, length);
    this.setRec(node, this.bitAt(words, length - 1), rec);
  }

  /** The node for the prefix words/length, created (by splitting) if needed. */
  private ensureNode(words: readonly number[], length: number): number {
    const node = this.descend(words, length);
    const bit = this.bitAt(words, length - 1);
    let child = this.getRec(node, bit);
    if (child < 0) {
      child = this.newNode(child, child);
      this.setRec(node, bit, child);
    }
    return child;
  }

  private alias(words: readonly number[], length: number, target: number): void {
    const node = this.descend(words, length);
    const bit = this.bitAt(words, length - 1);
    if (this.getRec(node, bit) !== EMPTY) {
      throw new Error(`the alias region of an IPv4 alias (prefix length ${length}) already holds IPv6 data`);
    }
    this.setRec(node, bit, target);
  }

  private serialize(): Buffer {
    // Data section: every distinct value once.
    const chunks: Buffer[] = [];
    const offsets: number[] = [];
    let dataSize = 0;
    for (const v of this.dataValues) {
      offsets.push(dataSize);
      const b = encodeValue(v);
      chunks.push(b);
      dataSize += b.length;
    }
    // Breadth-first numbering of the reachable nodes.
    const number = new Int32Array(this.nodes).fill(-1);
    const order: number[] = [0];
    number[0] = 0;
    for (let i = 0; i < order.length; i++) {
      const n = order[i]!;
      for (const c of [this.left[n]!, this.right[n]!]) {
        if (c >= 0 && number[c] === -1) {
          number[c] = order.length;
          order.push(c);
        }
      }
    }
    const nodeCount = order.length;
    const maxRecord = nodeCount + 16 + dataSize;
    let recordSize = this.opts.recordSize;
    if (recordSize === undefined) recordSize = maxRecord < 2 ** 24 ? 24 : maxRecord < 2 ** 28 ? 28 : 32;
    if (maxRecord >= 2 ** recordSize) throw new Error(`record size ${recordSize} is too small for ${maxRecord}`);
    const nodeBytes = recordSize / 4;
    const tree = Buffer.alloc(nodeCount * nodeBytes);
    const recValue = (c: number): number => (c === EMPTY ? nodeCount : c >= 0 ? number[c]! : nodeCount + 16 + offsets[-c - 2]!);
    for (let i = 0; i < nodeCount; i++) {
      const n = order[i]!;
      writeNode(tree, i * nodeBytes, recordSize, recValue(this.left[n]!), recValue(this.right[n]!));
    }
    const meta = encodeValue({
      binary_format_major_version: uint16(2),
      binary_format_minor_version: uint16(0),
      build_epoch: { $type: 'uint64', value: BigInt(this.opts.buildEpoch) },
      database_type: this.opts.databaseType,
      description: this.opts.description,
      ip_version: uint16(this.opts.ipVersion),
      languages: this.opts.languages,
      node_count: { $type: 'uint32', value: nodeCount },
      record_size: uint16(recordSize),
    });
    return Buffer.concat([tree, Buffer.alloc(16), ...chunks, METADATA_MARKER, meta]);
  }
}

function writeNode(buf: Buffer, at: number, size: number, l: number, r: number): void {
  if (size === 24) {
    buf.writeUIntBE(l, at, 3);
    buf.writeUIntBE(r, at + 3, 3);
  } else if (size === 28) {
    buf.writeUIntBE(l & 0xffffff, at, 3);
    buf[at + 3] = ((Math.floor(l / 2 ** 24) & 0x0f) << 4) | (Math.floor(r / 2 ** 24) & 0x0f);
    buf.writeUIntBE(r & 0xffffff, at + 4, 3);
  } else {
    buf.writeUInt32BE(l, at);
    buf.writeUInt32BE(r, at + 4);
  }
}

/** A key equal for equal values (map keys sorted). */
function stableKey(v: MmdbValue): string {
  return JSON.stringify(v, (_k, x: unknown) => {
    if (typeof x === 'bigint') return `${x}n`;
    if (x !== null && typeof x === 'object' && !Array.isArray(x)) {
      const o = x as Record<string, unknown>;
      return Object.fromEntries(Object.keys(o).sort().map((k) => [k, o[k]]));
    }
    return x;
  });
}

/** The control byte(s) of a value of `type` and `size`. */
function control(type: number, size: number): Buffer {
  const head: number[] = [];
  let first = type <= 7 ? type << 5 : 0;
  const ext = type > 7 ? [type - 7] : [];
  let sizeBytes: number[] = [];
  if (size < 29) first |= size;
  else if (size < 29 + 256) {
    first |= 29;
    sizeBytes = [size - 29];
  } else if (size < 285 + 65536) {
    first |= 30;
    const s = size - 285;
    sizeBytes = [s >> 8, s & 255];
  } else {
    first |= 31;
    const s = size - 65821;
    sizeBytes = [(s >> 16) & 255, (s >> 8) & 255, s & 255];
  }
  head.push(first, ...ext, ...sizeBytes);
  return Buffer.from(head);
}

function uintBytes(v: bigint): Buffer {
  const out: number[] = [];
  let x = v;
  while (x > 0n) {
    out.unshift(Number(x & 255n));
    x >>= 8n;
  }
  return Buffer.from(out);
}

/** Encodes one data-section value. */
export function encodeValue(v: MmdbValue): Buffer {
  if (typeof v === 'string') {
    const b = Buffer.from(v, 'utf8');
    return Buffer.concat([control(2, b.length), b]);
  }
  if (typeof v === 'boolean') return control(14, v ? 1 : 0);
  if (typeof v === 'bigint') return encodeTyped({ $type: 'uint64', value: v });
  if (typeof v === 'number') {
    if (Number.isInteger(v) && v >= 0 && v <= 0xffffffff) return encodeTyped({ $type: 'uint32', value: v });
    return encodeTyped({ $type: 'double', value: v });
  }
  if (Array.isArray(v)) return Buffer.concat([control(11, v.length), ...v.map(encodeValue)]);
  if ('$type' in v && typeof v.$type === 'string' && 'value' in v) return encodeTyped(v as MmdbTyped);
  const entries = Object.entries(v as Record<string, MmdbValue>);
  return Buffer.concat([control(7, entries.length), ...entries.flatMap(([k, x]) => [encodeValue(k), encodeValue(x)])]);
}

function encodeTyped(t: MmdbTyped): Buffer {
  switch (t.$type) {
    case 'double': {
      const b = Buffer.alloc(8);
      b.writeDoubleBE(Number(t.value));
      return Buffer.concat([control(3, 8), b]);
    }
    case 'int32': {
      const b = Buffer.alloc(4);
      b.writeInt32BE(Number(t.value));
      return Buffer.concat([control(8, 4), b]);
    }
    default: {
      const type = t.$type === 'uint16' ? 5 : t.$type === 'uint32' ? 6 : 9;
      const limit = t.$type === 'uint16' ? 0xffffn : t.$type === 'uint32' ? 0xffffffffn : 0xffffffffffffffffn;
      const value = BigInt(t.value);
      if (value < 0n || value > limit) throw new Error(`${String(t.value)} does not fit in ${t.$type}`);
      const b = uintBytes(value);
      return Buffer.concat([control(type, b.length), b]);
    }
  }
}

/** The record of a GeoLite2-Country network whose country is `iso` (names.en is the ISO code too, as tshark shows names). */
export function countryRecord(iso: string, registered: string | undefined = iso): MmdbValue {
  const rec: Record<string, MmdbValue> = { country: { iso_code: iso, names: { en: iso } } };
  if (registered !== undefined) rec.registered_country = { iso_code: registered, names: { en: registered } };
  return rec;
}

/** The record of a GeoLite2-ASN network. */
export function asnRecord(asn: number, organization: string): MmdbValue {
  return { autonomous_system_number: asn, autonomous_system_organization: organization };
}
