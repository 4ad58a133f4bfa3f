// Walks the binary search tree of a MaxMind DB buffer and lists every network
// that has data, in address order, as inclusive ranges tagged with the raw
// record value (node_count + 16 + data offset). Decoding the records is left
// to the caller (the maxmind Reader); this file only reads tree nodes.
//
// IPv4 ranges come from the IPv4 subtree: the whole tree of an ip_version 4
// database, or the node at ::/96 of an ip_version 6 one. The IPv6 walk skips
// ::/96 and every record that points at the IPv4 subtree node (IPv4-mapped
// ::ffff:0:0/96, 6to4 2002::/16, Teredo, whatever the writer aliased), and
// reports those prefixes as aliases instead of expanding the IPv4 data again.

import type { Ipv4Alias } from '../net/index.js';

/** Tree shape, from the metadata. */
export interface TreeShape {
  readonly nodeCount: number;
  readonly recordSize: number;
  readonly ipVersion: number;
}

/** Raw ranges: bounds plus the record value of each, adjacent equal records already merged. */
export interface RawRanges {
  v4First: Uint32Array;
  v4Last: Uint32Array;
  v4Record: Float64Array;
  v4Count: number;
  v6First: Uint32Array;
  v6Last: Uint32Array;
  v6Record: Float64Array;
  v6Count: number;
  aliases: Ipv4Alias[];
}

/** A corrupt tree (a node below depth 32/128, or records past the end). */
export class TreeError extends Error {}

/** Reads one record of node `node` (`bit` 0 = left). */
export function makeRecordReader(db: Uint8Array, recordSize: number): (node: number, bit: number) => number {
  if (recordSize === 24) {
    return (node, bit) => {
      const o = node * 6 + bit * 3;
      return (db[o]! << 16) | (db[o + 1]! << 8) | db[o + 2]!;
    };
  }
  if (recordSize === 28) {
    return (node, bit) => {
      const o = node * 7;
      if (bit === 0) return ((db[o + 3]! & 0xf0) << 20) | (db[o]! << 16) | (db[o + 1]! << 8) | db[o + 2]!;
      return ((db[o + 3]! & 0x0f) << 24) | (db[o + 4]! << 16) | (db[o + 5]! << 8) | db[o + 6]!;
    };
  }
  return (node, bit) => {
    const o = node * 8 + bit * 4;
    return ((db[o]! << 24) | (db[o + 1]! << 16) | (db[o + 2]! << 8) | db[o + 3]!) >>> 0;
  };
}

/** The record value reached from the root by following 96 zero bits: the IPv4 subtree of an IPv6 tree. */
export function ipv4StartRecord(db: Uint8Array, shape: TreeShape): number {
  if (shape.ipVersion === 4) return 0;
  const rec = makeRecordReader(db, shape.recordSize);
  let r = 0;
  for (let i = 0; i < 96 && r < shape.nodeCount; i++) r = rec(r, 0);
  return r;
}

class Out {
  first: Uint32Array;
  last: Uint32Array;
  record: Float64Array;
  n = 0;

  constructor(
    readonly words: number,
    capacity: number,
  ) {
    this.first = new Uint32Array(capacity * words);
    this.last = new Uint32Array(capacity * words);
    this.record = new Float64Array(capacity);
  }

  grow(): void {
    const cap = this.record.length * 2;
    const f = new Uint32Array(cap * this.words);
    f.set(this.first);
    const l = new Uint32Array(cap * this.words);
    l.set(this.last);
    const r = new Float64Array(cap);
    r.set(this.record);
    this.first = f;
    this.last = l;
    this.record = r;
  }
}

/**
 * Lists the networks with data. `onLeaf` is not needed: the caller decodes each
 * distinct record value once, afterwards.
 */
export function walkTree(db: Uint8Array, shape: TreeShape): RawRanges {
  const { nodeCount } = shape;
  const rec = makeRecordReader(db, shape.recordSize);
  if (nodeCount * (shape.recordSize / 4) > db.length) throw new TreeError('search tree extends past the end of the file');
  const start4 = ipv4StartRecord(db, shape);
  const out4 = new Out(1, 1024);
  walk4(rec, nodeCount, start4, out4);
  const out6 = new Out(4, 1024);
  const aliases: Ipv4Alias[] = [];
  if (shape.ipVersion === 6) walk6(rec, nodeCount, start4, out6, aliases);
  return {
    v4First: out4.first,
    v4Last: out4.last,
    v4Record: out4.record,
    v4Count: out4.n,
    v6First: out6.first,
    v6Last: out6.last,
    v6Record: out6.record,
    v6Count: out6.n,
    aliases,
  };
}

function walk4(rec: (node: number, bit: number) => number, nodeCount: number, start: number, out: Out): void {
  // Stack of pending records: value, depth, prefix.
  const sv = new Float64Array(80);
  const sd = new Uint8Array(80);
  const sp = new Float64Array(80);
  let top = 0;
  sv[0] = start;
  sd[0] = 0;
  sp[0] = 0;
  top = 1;
  while (top > 0) {
    top--;
    const r = sv[top]!;
    const d = sd[top]!;
    const p = sp[top]!;
    if (r < nodeCount) {
      if (d >= 32) throw new TreeError('the IPv4 subtree is deeper than 32 bits');
      // Push right, then left, so that left is handled first.
      sv[top] = rec(r, 1);
      sd[top] = d + 1;
      sp[top] = p + 2 ** (31 - d);
      top++;
      sv[top] = rec(r, 0);
      sd[top] = d + 1;
      sp[top] = p;
      top++;
      continue;
    }
    if (r === nodeCount) continue; // no data
    const last = p + 2 ** (32 - d) - 1;
    const n = out.n;
    if (n > 0 && out.record[n - 1] === r && out.last[n - 1]! + 1 === p) {
      out.last[n - 1] = last;
      continue;
    }
    if (n === out.record.length) out.grow();
    out.first[n] = p;
    out.last[n] = last;
    out.record[n] = r;
    out.n = n + 1;
  }
}

function walk6(rec: (node: number, bit: number) => number, nodeCount: number, start4: number, out: Out, aliases: Ipv4Alias[]): void {
  const v4IsNode = start4 < nodeCount;
  const sv = new Float64Array(260);
  const sd = new Uint8Array(260);
  const sp = new Uint32Array(260 * 4);
  let top = 1;
  sv[0] = 0;
  sd[0] = 0;
  const first = new Uint32Array(4);
  while (top > 0) {
    top--;
    const r = sv[top]!;
    const d = sd[top]!;
    const o = top * 4;
    const p0 = sp[o]!;
    const p1 = sp[o + 1]!;
    const p2 = sp[o + 2]!;
    const p3 = sp[o + 3]!;
    if (r < nodeCount) {
      if (v4IsNode && r === start4 && d > 0 && d <= 96) {
        aliases.push({ prefix: [p0, p1, p2, p3], length: d });
        continue;
      }
      if (d >= 128) throw new TreeError('the search tree is deeper than 128 bits');
      // Right child: the prefix with bit d set.
      const k = d >>> 5;
      const bit = 1 << (31 - (d & 31));
      sv[top] = rec(r, 1);
      sd[top] = d + 1;
      sp[o] = k === 0 ? (p0 | bit) >>> 0 : p0;
      sp[o + 1] = k === 1 ? (p1 | bit) >>> 0 : p1;
      sp[o + 2] = k === 2 ? (p2 | bit) >>> 0 : p2;
      sp[o + 3] = k === 3 ? (p3 | bit) >>> 0 : p3;
      top++;
      const o2 = top * 4;
      sv[top] = rec(r, 0);
      sd[top] = d + 1;
      sp[o2] = p0;
      sp[o2 + 1] = p1;
      sp[o2 + 2] = p2;
      sp[o2 + 3] = p3;
      top++;
      continue;
    }
    if (r === nodeCount) continue;
    first[0] = p0;
    first[1] = p1;
    first[2] = p2;
    first[3] = p3;
    append6(out, first, d, r);
  }
}

/** Appends the prefix first/d with record r, merging with the previous range when adjacent and equal. */
function append6(out: Out, first: Uint32Array, d: number, r: number): void {
  const n = out.n;
  // last = first | host mask
  const l0 = hostOr(first[0]!, d, 0);
  const l1 = hostOr(first[1]!, d, 1);
  const l2 = hostOr(first[2]!, d, 2);
  const l3 = hostOr(first[3]!, d, 3);
  if (n > 0 && out.record[n - 1] === r && isSuccessor(out.last, (n - 1) * 4, first)) {
    const o = (n - 1) * 4;
    out.last[o] = l0;
    out.last[o + 1] = l1;
    out.last[o + 2] = l2;
    out.last[o + 3] = l3;
    return;
  }
  if (n === out.record.length) out.grow();
  const o = n * 4;
  out.first.set(first, o);
  out.last[o] = l0;
  out.last[o + 1] = l1;
  out.last[o + 2] = l2;
  out.last[o + 3] = l3;
  out.record[n] = r;
  out.n = n + 1;
}

function hostOr(w: number, len: number, k: number): number {
  const keep = len - 32 * k;
  if (keep >= 32) return w;
  if (keep <= 0) return 0xffffffff;
  return (w | (0xffffffff >>> keep)) >>> 0;
}

/** True when b (4 words) is a[o..o+3] + 1. */
function isSuccessor(a: Uint32Array, o: number, b: Uint32Array): boolean {
  let carry = 1;
  for (let i = 3; i >= 0; i--) {
    const s = a[o + i]! + carry;
    const w = s >>> 0 === s ? s : 0; // s is 2^32 on overflow
    carry = s === 0x100000000 ? 1 : 0;
    if (w !== b[i]) return false;
  }
  return carry === 0;
}
