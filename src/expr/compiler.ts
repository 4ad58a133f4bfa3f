// The compiler: turns a checked tree into a tree of closures over the execution
// context, specialised at compile time by operator, type and literal (so no
// closure looks at a name, a string or an AST node when it runs). Evaluation
// allocates nothing, except `matches` on raw packet bytes (it needs a string).

import { EMPTY_IP_SET, type IpMatcher, type NumberRangeSet } from '../net/index.js';
import type { Checked, IntOperand, ListProvider } from './checked.js';
import type { ExecutionContext } from './context.js';
import { shortBytesKey, type FieldDef } from './scheme.js';

/** A compiled predicate. */
export type Predicate = (ctx: ExecutionContext) => boolean;
type IntGetter = (ctx: ExecutionContext) => number;

const FALSE: Predicate = () => false;

/** Compiles a checked tree. Lists not in `lists` compile as empty (the checker has vetted the names). */
export function compileChecked(node: Checked, lists: ListProvider | undefined): Predicate {
  switch (node.kind) {
    case 'and':
      return compileAnd(node.items.map((i) => compileChecked(i, lists)));
    case 'or':
      return compileOr(node.items.map((i) => compileChecked(i, lists)));
    case 'xor': {
      const items = node.items.map((i) => compileChecked(i, lists));
      return (c) => {
        let r = false;
        for (let i = 0; i < items.length; i++) r = r !== items[i]!(c);
        return r;
      };
    }
    case 'not': {
      const p = compileChecked(node.operand, lists);
      return (c) => !p(c);
    }
    case 'bool': {
      const s = node.field.slot;
      return (c) => c.bools[s] === 1;
    }
    case 'const':
      return node.value ? () => true : () => false;
    case 'int-cmp':
      return compileIntCmp(node.lhs, node.op, node.value);
    case 'int-and': {
      const m = node.mask;
      if (node.lhs.kind === 'field') {
        const s = node.lhs.field.slot;
        // NaN (absent) & m is 0, so absent fields are false without a check.
        return (c) => (c.ints[s]! & m) !== 0;
      }
      const g = intGetter(node.lhs);
      return (c) => (g(c) & m) !== 0;
    }
    case 'int-in': {
      const set = node.set;
      if (set.size === 0) return FALSE;
      const g = node.lhs.kind === 'field' ? null : intGetter(node.lhs);
      const s = node.lhs.kind === 'field' ? node.lhs.field.slot : 0;
      const lo = set.lo;
      const hi = set.hi;
      if (set.size <= 4) {
        // A linear scan beats binary search on a few ranges (no loop-carried midpoint).
        const n = set.size;
        return (c) => {
          const v = g === null ? c.ints[s]! : g(c);
          for (let i = 0; i < n; i++) if (v >= lo[i]! && v <= hi[i]!) return true;
          return false;
        };
      }
      const bits = intSetBitmap(set);
      if (bits !== null) {
        return (c) => {
          const v = g === null ? c.ints[s]! : g(c);
          // NaN (absent) fails v >= 0.
          return v >= 0 && v <= 0xffff && ((bits[v >>> 5]! >>> (v & 31)) & 1) === 1;
        };
      }
      return (c) => set.has(g === null ? c.ints[s]! : g(c));
    }
    case 'ip-cmp':
      return compileIpCmp(node.field, node.op, node.value.family, node.value.words);
    case 'ip-in':
      return ipMember(node.field, node.set);
    case 'ip-list': {
      const m = lists?.get(node.list) ?? EMPTY_IP_SET;
      const slot = m.precomputed?.slotFor(node.field.name);
      if (m.precomputed !== undefined && slot !== undefined) {
        const bit = m.precomputed.bit;
        // NaN (no lookup made) & bit is 0: not a member.
        return (c) => (c.ints[slot]! & bit) !== 0;
      }
      return ipMember(node.field, m);
    }
    case 'bytes-cmp':
      return anyOf(node.field, node.op === '!=', (s) => bytesCmp(s, node.op, node.value));
    case 'bytes-in':
      return anyOf(node.field, false, (s) => bytesIn(s, node.values));
    case 'bytes-contains':
      return anyOf(node.field, false, (s) => bytesContains(s, node.value));
    case 'bytes-matches':
      return anyOf(node.field, false, (s) => bytesMatches(s, node.regex));
  }
}

/**
 * The 8 KiB bitmap of an int set that lies within 0..65535 (ports, ICMP types,
 * lengths), or null: a bit test is about twice as fast as a binary search
 * on a port set with ranges (measured: bench/expr.bench.ts).
 */
export function intSetBitmap(set: NumberRangeSet): Uint32Array | null {
  const n = set.size;
  if (n === 0 || set.lo[0]! < 0 || set.hi[n - 1]! > 0xffff) return null;
  const bits = new Uint32Array(2048);
  for (let i = 0; i < n; i++) setBits(bits, set.lo[i]!, set.hi[i]!);
  return bits;
}

// Sets bits a..b (inclusive) of a bitmap, whole words at a time.
function setBits(bits: Uint32Array, a: number, b: number): void {
  while (a <= b && (a & 31) !== 0) bits[a >>> 5]! |= 1 << (a++ & 31);
  while (a + 31 <= b) {
    bits[a >>> 5] = 0xffffffff;
    a += 32;
  }
  while (a <= b) bits[a >>> 5]! |= 1 << (a++ & 31);
}

function compileAnd(items: Predicate[]): Predicate {
  if (items.length === 2) {
    const [a, b] = items as [Predicate, Predicate];
    return (c) => a(c) && b(c);
  }
  return (c) => {
    for (let i = 0; i < items.length; i++) if (!items[i]!(c)) return false;
    return true;
  };
}

function compileOr(items: Predicate[]): Predicate {
  if (items.length === 2) {
    const [a, b] = items as [Predicate, Predicate];
    return (c) => a(c) || b(c);
  }
  return (c) => {
    for (let i = 0; i < items.length; i++) if (items[i]!(c)) return true;
    return false;
  };
}

/** A function reading an int operand (a field or a bit_slice) from a context; NaN when absent. */
export function intGetter(lhs: IntOperand): IntGetter {
  if (lhs.kind === 'field') {
    const s = lhs.field.slot;
    return (c) => c.ints[s]!;
  }
  const s = lhs.field.slot;
  const start = lhs.start;
  const end = lhs.end;
  const firstByte = start >>> 3;
  const lastByte = (end - 1) >>> 3;
  const width = end - start;
  const tailShift = 7 - ((end - 1) & 7);
  return (c) => {
    const buf = c.bytesBuf[s];
    if (buf === null || buf === undefined) return NaN;
    const base = c.bytesStart[s]!;
    if (base + lastByte >= c.bytesEnd[s]!) return NaN;
    // Accumulate with multiplication: the up-to-40-bit intermediate does not fit JS's 32-bit shifts.
    let acc = 0;
    for (let i = firstByte; i <= lastByte; i++) acc = acc * 256 + buf[base + i]!;
    acc = Math.floor(acc / 2 ** tailShift);
    return acc % 2 ** width;
  };
}

function compileIntCmp(lhs: IntOperand, op: string, k: number): Predicate {
  if (lhs.kind === 'field') {
    const s = lhs.field.slot;
    switch (op) {
      case '==':
        return (c) => c.ints[s] === k;
      case '!=':
        return (c) => {
          const v = c.ints[s]!;
          return v === v && v !== k;
        };
      case '<':
        return (c) => c.ints[s]! < k;
      case '<=':
        return (c) => c.ints[s]! <= k;
      case '>':
        return (c) => c.ints[s]! > k;
      default:
        return (c) => c.ints[s]! >= k;
    }
  }
  const g = intGetter(lhs);
  switch (op) {
    case '==':
      return (c) => g(c) === k;
    case '!=':
      return (c) => {
        const v = g(c);
        return v === v && v !== k;
      };
    case '<':
      return (c) => g(c) < k;
    case '<=':
      return (c) => g(c) <= k;
    case '>':
      return (c) => g(c) > k;
    default:
      return (c) => g(c) >= k;
  }
}

function compileIpCmp(field: FieldDef, op: string, family: 4 | 6, w: readonly number[]): Predicate {
  const s = field.slot;
  if (family === 4) {
    const k = w[0]!;
    switch (op) {
      case '==':
        return (c) => c.ipFamily[s] === 4 && c.ip4[s] === k;
      case '!=':
        // Across families only != is true; absent is false.
        return (c) => c.ipFamily[s] === 6 || (c.ipFamily[s] === 4 && c.ip4[s] !== k);
      case '<':
        return (c) => c.ipFamily[s] === 4 && c.ip4[s]! < k;
      case '<=':
        return (c) => c.ipFamily[s] === 4 && c.ip4[s]! <= k;
      case '>':
        return (c) => c.ipFamily[s] === 4 && c.ip4[s]! > k;
      default:
        return (c) => c.ipFamily[s] === 4 && c.ip4[s]! >= k;
    }
  }
  const o = s * 4;
  const [k0, k1, k2, k3] = w as [number, number, number, number];
  const cmp6 = (c: ExecutionContext): number => {
    const a = c.ip6;
    if (a[o] !== k0) return a[o]! < k0 ? -1 : 1;
    if (a[o + 1] !== k1) return a[o + 1]! < k1 ? -1 : 1;
    if (a[o + 2] !== k2) return a[o + 2]! < k2 ? -1 : 1;
    if (a[o + 3] !== k3) return a[o + 3]! < k3 ? -1 : 1;
    return 0;
  };
  switch (op) {
    case '==':
      return (c) => c.ipFamily[s] === 6 && c.ip6[o] === k0 && c.ip6[o + 1] === k1 && c.ip6[o + 2] === k2 && c.ip6[o + 3] === k3;
    case '!=':
      return (c) => c.ipFamily[s] === 4 || (c.ipFamily[s] === 6 && cmp6(c) !== 0);
    case '<':
      return (c) => c.ipFamily[s] === 6 && cmp6(c) < 0;
    case '<=':
      return (c) => c.ipFamily[s] === 6 && cmp6(c) <= 0;
    case '>':
      return (c) => c.ipFamily[s] === 6 && cmp6(c) > 0;
    default:
      return (c) => c.ipFamily[s] === 6 && cmp6(c) >= 0;
  }
}

function ipMember(field: FieldDef, m: IpMatcher): Predicate {
  const s = field.slot;
  const o = s * 4;
  return (c) => {
    const fam = c.ipFamily[s];
    if (fam === 4) return m.contains4(c.ip4[s]!);
    if (fam === 6) {
      const a = c.ip6;
      return m.contains6(a[o]!, a[o + 1]!, a[o + 2]!, a[o + 3]!);
    }
    return false;
  };
}

// A bytes comparison over one slot; for a virtual any-of field the per-slot
// predicates are combined: any alternative matching, or for != all present ones.
function anyOf(field: FieldDef, notEqual: boolean, make: (slot: number) => Predicate): Predicate {
  if (field.anyOf === null) return make(field.slot);
  const slots = field.anyOf.map((f) => f.slot);
  if (!notEqual) return compileOr(slots.map(make));
  const preds = slots.map(make);
  return (c) => {
    let present = false;
    for (let i = 0; i < slots.length; i++) {
      if (c.bytesBuf[slots[i]!] === null) continue;
      present = true;
      if (!preds[i]!(c)) return false;
    }
    return present;
  };
}

function compareBytes(buf: Uint8Array, start: number, end: number, k: Uint8Array): number {
  const n = end - start;
  const m = n < k.length ? n : k.length;
  for (let i = 0; i < m; i++) {
    const d = buf[start + i]! - k[i]!;
    if (d !== 0) return d;
  }
  return n - k.length;
}

function bytesCmp(s: number, op: string, k: Uint8Array): Predicate {
  const test =
    op === '==' ? (d: number) => d === 0
    : op === '!=' ? (d: number) => d !== 0
    : op === '<' ? (d: number) => d < 0
    : op === '<=' ? (d: number) => d <= 0
    : op === '>' ? (d: number) => d > 0
    : (d: number) => d >= 0;
  if (op === '==' || op === '!=') {
    const want = op === '==';
    const len = k.length;
    return (c) => {
      const buf = c.bytesBuf[s];
      if (buf === null || buf === undefined) return false;
      const start = c.bytesStart[s]!;
      if (c.bytesEnd[s]! - start !== len) return !want;
      for (let i = 0; i < len; i++) if (buf[start + i] !== k[i]) return !want;
      return want;
    };
  }
  return (c) => {
    const buf = c.bytesBuf[s];
    if (buf === null || buf === undefined) return false;
    return test(compareBytes(buf, c.bytesStart[s]!, c.bytesEnd[s]!, k));
  };
}

// Values of up to 6 bytes become one exact number key (length in the top bits),
// so set membership is a Set<number> probe with no string built per packet.
const shortKey = shortBytesKey;

function bytesIn(s: number, values: readonly Uint8Array[]): Predicate {
  if (values.length > 0 && values.every((v) => v.length === 2)) {
    // Two-byte values (country codes) index a 64 Ki-bit bitmap, several times
    // faster than the Set<number> probe below (measured: bench/expr.bench.ts).
    const bits = new Uint32Array(2048);
    for (const v of values) {
      const k = (v[0]! << 8) | v[1]!;
      bits[k >>> 5]! |= 1 << (k & 31);
    }
    return (c) => {
      const buf = c.bytesBuf[s];
      if (buf === null || buf === undefined) return false;
      const start = c.bytesStart[s]!;
      if (c.bytesEnd[s]! - start !== 2) return false;
      const k = (buf[start]! << 8) | buf[start + 1]!;
      return ((bits[k >>> 5]! >>> (k & 31)) & 1) === 1;
    };
  }
  const short = new Set<number>();
  const long: Uint8Array[] = [];
  for (const v of values) {
    if (v.length <= 6) short.add(shortKey(v, 0, v.length));
    else long.push(v);
  }
  return (c) => {
    const buf = c.bytesBuf[s];
    if (buf === null || buf === undefined) return false;
    const start = c.bytesStart[s]!;
    const end = c.bytesEnd[s]!;
    if (end - start <= 6) return short.has(shortKey(buf, start, end));
    for (let i = 0; i < long.length; i++) if (compareBytes(buf, start, end, long[i]!) === 0) return true;
    return false;
  };
}

function bytesContains(s: number, k: Uint8Array): Predicate {
  const n = k.length;
  return (c) => {
    const buf = c.bytesBuf[s];
    if (buf === null || buf === undefined) return false;
    const start = c.bytesStart[s]!;
    const last = c.bytesEnd[s]! - n;
    if (n === 0) return true;
    const first = k[0]!;
    for (let i = start; i <= last; i++) {
      if (buf[i] !== first) continue;
      let j = 1;
      while (j < n && buf[i + j] === k[j]) j++;
      if (j === n) return true;
    }
    return false;
  };
}

function bytesMatches(s: number, re: RegExp): Predicate {
  return (c) => {
    const buf = c.bytesBuf[s];
    if (buf === null || buf === undefined) return false;
    let text = c.bytesText[s];
    if (text === null || text === undefined) {
      text = '';
      for (let i = c.bytesStart[s]!, end = c.bytesEnd[s]!; i < end; i++) text += String.fromCharCode(buf[i]!);
    }
    return re.test(text);
  };
}
