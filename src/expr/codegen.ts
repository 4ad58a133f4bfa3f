// The code-generating backend: turns a checked tree into the source of one JS
// boolean expression over the context's typed arrays, for the engine to inline
// many rules into one straight-line function (faster than a closure tree:
// bench/expr.bench.ts). The source is built only from the checked tree's
// numbers (slots, integer literals, constant indexes) and fixed operator text:
// no text the user wrote ever reaches it (test/engine/generated-alphabet.test.ts).
// Sets, byte strings, regexes and lists live in a constants array the code
// indexes. Field reads are holes the caller fills (see renderCode), and the
// result says what else the code reads, so no later step parses it back.

import type { Checked, IntOperand, ListProvider } from './checked.js';
import { compileChecked, intGetter, intSetBitmap } from './compiler.js';
import type { ExecutionContext } from './context.js';
import { IpRangeSet } from '../net/index.js';

/**
 * The context's arrays under the names the generated code reads them by
 * (ints, bools, IP families, IPv4 and IPv6 address words, pending lazy
 * groups); every function that holds generated code declares them, and takes
 * the constants array as `K` (see the name table in engine/code-writer.ts).
 */
export const CODEGEN_LOCALS = 'const I = c.ints, B = c.bools, F = c.ipFamily, A4 = c.ip4, A6 = c.ip6, PD = c.pending;';

/** The typed arrays of the context (CODEGEN_LOCALS) whose slots generated code reads by index, in hole-id order. */
const FIELD_ARRAYS = ['I', 'B', 'F', 'A4'] as const;

/** A read of one slot of one of the context's typed arrays: `I[7]` is { array: 'I', slot: 7 }. */
export interface FieldRead {
  readonly array: (typeof FIELD_ARRAYS)[number];
  readonly slot: number;
}

// A field read's hole in a template: HOLE, the read's id (slot * 4 + array), HOLE.
// No other generated text holds the character, so a split finds the holes.
const HOLE = '\u0001';

/** The hole a template holds for the read of `slot` of `array` (renderCode fills it). */
export function fieldHole(array: FieldRead['array'], slot: number): string {
  int(slot);
  return `${HOLE}${slot * 4 + FIELD_ARRAYS.indexOf(array)}${HOLE}`;
}

/** How the generated code reads a field by default: from the context's typed array, `I[7]`. */
export const contextRead = (r: FieldRead): string => `${r.array}[${r.slot}]`;

/**
 * The source of a template, each field read's hole written as `read` says
 * (the engine reads fields once into locals, or as literals in a packet
 * program); `read` sees the reads in the order they first occur.
 */
export function renderCode(template: string, read: (r: FieldRead) => string = contextRead): string {
  const parts = template.split(HOLE);
  for (let i = 1; i < parts.length; i += 2) {
    const id = Number(parts[i]);
    parts[i] = read({ array: FIELD_ARRAYS[id & 3]!, slot: id >>> 2 });
  }
  return parts.join('');
}

/** A generated boolean expression and what it reads besides its fields' slots. */
export interface GeneratedCode {
  /** The expression's source, field reads as holes (see renderCode). */
  readonly template: string;
  /** It calls a closure over the whole context (`K[n](c)`): bytes fields, bit slices, large address sets. */
  readonly readsContext: boolean;
  /** It reads IPv6 address words (A6) or resolves lazy groups (PD): the addresses must be in the context. */
  readonly readsAddresses: boolean;
}

// What one generate() call has emitted so far besides field reads.
interface Emitted {
  readsContext: boolean;
  readsAddresses: boolean;
}

// A call of the constant `ref` (a closure) on the whole context.
function callOnContext(ref: string, e: Emitted): string {
  e.readsContext = true;
  return `${ref}(c)`;
}

// A word of an IPv6 address, A6[n] (never a hole: the engine leaves it in the context).
function a6(n: number, e: Emitted): string {
  e.readsAddresses = true;
  return `A6[${int(n)}]`;
}

/** Collects constants referenced by generated code. */
export class ConstantPool {
  readonly values: unknown[] = [];
  /**
   * Names of the bytes fields whose bytes the generated code reads (through a
   * closure predicate); keyed tests read only the key (see FieldKey), so a
   * producer can leave the bytes of the other keyed fields unwritten.
   */
  readonly bytesRead = new Set<string>();
  /**
   * How the generated tests read each lazy group (ExecutionContext.pending):
   * group -> int slot -> the literal ranges [lo, hi, lo, hi, ...] its tests
   * compare that slot with for equality or membership (`==`, `in`, keyed
   * bytes `==`/`in`); null for a group some test reads otherwise (`!=`,
   * ordering, bytes, closures). For a group whose reads are all such tests,
   * an absent value and a value outside every range give every test the same
   * answer, so a producer may write absent values without looking up an
   * address whose value it knows to be outside them (the packet path's value
   * screens).
   */
  readonly lazyValues = new Map<number, Map<number, number[]> | null>();
  /**
   * Where each constant that is not plain data came from (a closure, a range
   * set with methods), by index in `values`: the checked node it was made
   * from and how. Plain data (typed arrays, Sets of numbers) has none. A
   * bundle compiled in a worker thread crosses to the packet loop as source
   * and data; such constants are made again there from these recipes (see
   * engine/bundle-transfer.ts).
   */
  readonly origins = new Map<number, ConstantOrigin>();

  /** Adds a constant and returns the code that reads it; `origin` for one that is not plain data. */
  ref(v: unknown, origin?: ConstantOrigin): string {
    this.values.push(v);
    if (origin !== undefined) this.origins.set(this.values.length - 1, origin);
    return `K[${this.values.length - 1}]`;
  }
}

/**
 * How a constant that is not plain data is made from a checked node: its
 * predicate (compileChecked), the getter of its int operand (intGetter), or
 * its NumberRangeSet.
 */
export interface ConstantOrigin {
  readonly node: Checked;
  readonly make: 'predicate' | 'int-getter' | 'int-set';
}

/** The constant `origin` describes, made again from its node (see ConstantPool.origins). */
export function makeConstant(origin: ConstantOrigin, lists: ListProvider | undefined): unknown {
  const n = origin.node;
  if (origin.make === 'predicate') return compileChecked(n, lists);
  if (n.kind !== 'int-cmp' && n.kind !== 'int-and' && n.kind !== 'int-in') throw new Error(`codegen: a ${origin.make} constant from a ${n.kind} node`);
  if (origin.make === 'int-getter') return intGetter(n.lhs);
  if (n.kind !== 'int-in') throw new Error(`codegen: an int-set constant from a ${n.kind} node`);
  return n.set;
}

// Only finite numbers reach generated source, printed by Number#toString.
function num(v: number): string {
  if (!Number.isFinite(v)) throw new Error('codegen: non-finite literal');
  return Object.is(v, -0) ? '0' : String(v);
}

function int(v: number): string {
  if (!Number.isInteger(v) || v < 0) throw new Error('codegen: bad slot');
  return String(v);
}

/** Generates a boolean expression for `node`: its source with field reads as holes, and what else it reads. */
export function generate(node: Checked, pool: ConstantPool, lists: ListProvider | undefined): GeneratedCode {
  const e: Emitted = { readsContext: false, readsAddresses: false };
  const template = gen(node, pool, lists, e);
  return { template, readsContext: e.readsContext, readsAddresses: e.readsAddresses };
}

function gen(node: Checked, pool: ConstantPool, lists: ListProvider | undefined, e: Emitted): string {
  switch (node.kind) {
    case 'and':
      return '(' + byCost(node.items, lists).map((i) => gen(i, pool, lists, e)).join(' && ') + ')';
    case 'or':
      return '(' + byCost(node.items, lists).map((i) => gen(i, pool, lists, e)).join(' || ') + ')';
    case 'xor':
      // Booleans compared with !== is xor; chains fold left as in the closures.
      return '(' + node.items.map((i) => gen(i, pool, lists, e)).join(' !== ') + ')';
    case 'not':
      return `!${gen(node.operand, pool, lists, e)}`;
    default: {
      // A test that reads lazy fields first resolves their groups when still
      // pending (see ExecutionContext.pending): one check per group and test,
      // then plain reads, in the test and in any closure it calls.
      const test = generateTest(node, pool, lists, e);
      const groups = lazyGroups(node, lists);
      if (groups.length === 0) return test;
      noteLazyValues(node, groups, pool);
      e.readsAddresses = true;
      return '(' + groups.map((g) => `(PD[${int(g)}] === 0 || c.resolver.resolve(${int(g)})), `).join('') + test + ')';
    }
  }
}

// Records in pool.lazyValues how `node` reads the lazy `groups` (see ConstantPool.lazyValues).
function noteLazyValues(node: Checked, groups: readonly number[], pool: ConstantPool): void {
  const reads = literalReads(node);
  for (const g of groups) {
    const known = pool.lazyValues.get(g);
    if (known === null) continue;
    const mine = reads?.filter((r) => r.group === g) ?? [];
    if (reads === null || mine.length === 0) {
      pool.lazyValues.set(g, null);
      continue;
    }
    const bySlot = known ?? new Map<number, number[]>();
    for (const r of mine) bySlot.set(r.slot, [...(bySlot.get(r.slot) ?? []), ...r.ranges]);
    pool.lazyValues.set(g, bySlot);
  }
}

// The lazy slots a test compares with literals for equality or membership, and
// those literals as ranges; null when the test reads a lazy field any other way.
function literalReads(node: Checked): Array<{ group: number; slot: number; ranges: number[] }> | null {
  if ((node.kind === 'int-cmp' || node.kind === 'int-in') && node.lhs.kind === 'field' && node.lhs.field.lazy >= 0) {
    const f = node.lhs.field;
    if (node.kind === 'int-cmp') return node.op === '==' ? [{ group: f.lazy, slot: f.slot, ranges: [node.value, node.value] }] : null;
    const ranges: number[] = [];
    for (let i = 0; i < node.set.size; i++) ranges.push(node.set.lo[i]!, node.set.hi[i]!);
    return [{ group: f.lazy, slot: f.slot, ranges }];
  }
  if ((node.kind === 'bytes-cmp' && node.op === '==') || node.kind === 'bytes-in') {
    const alts = literalKeys(node, node.kind === 'bytes-cmp' ? [node.value] : node.values);
    if (alts === undefined) return null;
    return alts.map((a) => ({ group: a.lazy, slot: a.slot, ranges: a.keys.flatMap((k) => [k, k]) }));
  }
  return null;
}

// The lazy groups a test reads, ascending.
function lazyGroups(node: Checked, lists: ListProvider | undefined): number[] {
  const out = new Set<number>();
  switch (node.kind) {
    case 'int-cmp':
    case 'int-and':
    case 'int-in':
      out.add(node.lhs.field.lazy);
      break;
    case 'ip-list': {
      const pre = lists?.get(node.list)?.precomputed;
      if (pre !== undefined && pre.slotFor(node.field.name) !== undefined) out.add(pre.lazyFor?.(node.field.name) ?? -1);
      else out.add(node.field.lazy);
      break;
    }
    case 'bool':
    case 'ip-cmp':
    case 'ip-in':
      out.add(node.field.lazy);
      break;
    case 'bytes-cmp':
    case 'bytes-in':
    case 'bytes-contains':
    case 'bytes-matches':
      for (const f of node.field.anyOf ?? [node.field]) {
        out.add(f.lazy);
        if (f.key !== null) out.add(f.key.field.lazy);
      }
      break;
    default:
      break;
  }
  out.delete(-1);
  return [...out].sort((a, b) => a - b);
}

// One test (not and/or/xor/not), with plain reads of its fields.
function generateTest(node: Checked, pool: ConstantPool, lists: ListProvider | undefined, e: Emitted): string {
  switch (node.kind) {
    case 'and':
    case 'or':
    case 'xor':
    case 'not':
      return gen(node, pool, lists, e);
    case 'bool':
      return `(${fieldHole('B', node.field.slot)} === 1)`;
    case 'const':
      return node.value ? 'true' : 'false';
    case 'int-cmp': {
      const v = intValue(node, pool, e);
      const k = num(node.value);
      if (node.op === '!=') return `(${v} !== ${k} && ${v} === ${v})`;
      const op = node.op === '==' ? '===' : node.op;
      return `(${v} ${op} ${k})`;
    }
    case 'int-and':
      return `((${intValue(node, pool, e)} & ${num(node.mask)}) !== 0)`;
    case 'int-in':
    case 'ip-in':
    case 'ip-list':
    case 'bytes-cmp':
    case 'bytes-in':
    case 'bytes-contains':
    case 'bytes-matches':
      if (node.kind === 'bytes-cmp' || node.kind === 'bytes-in') {
        const keyed = keyedBytes(node, pool);
        if (keyed !== undefined) return keyed;
      }
      if (node.kind === 'ip-list') {
        const pre = lists?.get(node.list)?.precomputed;
        const slot = pre?.slotFor(node.field.name);
        if (pre !== undefined && slot !== undefined) return `((${fieldHole('I', slot)} & ${num(pre.bit)}) !== 0)`;
      }
      if (node.kind === 'ip-in' && node.set instanceof IpRangeSet && node.set.v4.size <= 4) {
        // A few IPv4 ranges inline as comparisons; IPv6 addresses go to the predicate.
        const s = node.field.slot;
        const a4 = fieldHole('A4', s);
        const f = fieldHole('F', s);
        const set = node.set.v4;
        const terms: string[] = [];
        for (let i = 0; i < set.size; i++) {
          const lo = num(set.lo[i]!);
          const hi = num(set.hi[i]!);
          terms.push(lo === hi ? `${a4} === ${lo}` : `(${a4} >= ${lo} && ${a4} <= ${hi})`);
        }
        const v4 = terms.length === 0 ? 'false' : `(${terms.join(' || ')})`;
        const six = node.set.v6;
        let v6: string;
        if (six.count === 0) v6 = 'false';
        else if (six.count <= 4) {
          // A few IPv6 ranges inline too, as comparisons word by word from the
          // first: cheaper than a predicate call (measured: bench/pipeline.bench.ts,
          // its last rule, on IPv6 packets).
          const o = node.field.slot * 4;
          const b = six.bounds;
          const ranges: string[] = [];
          for (let i = 0; i < six.count; i++) {
            const lo = Array.from(b.subarray(i * 8, i * 8 + 4));
            const hi = Array.from(b.subarray(i * 8 + 4, i * 8 + 8));
            if (lo.every((x, k) => x === hi[k])) {
              ranges.push(`(${lo.map((x, k) => `${a6(o + k, e)} === ${num(x)}`).join(' && ')})`);
              continue;
            }
            const parts = [wordsFrom(o, lo, 0, '>', 0, e), wordsFrom(o, hi, 0, '<', 0xffffffff, e)].filter((t) => t !== 'true');
            ranges.push(parts.length === 0 ? 'true' : `(${parts.join(' && ')})`);
          }
          v6 = `(${ranges.join(' || ')})`;
        } else v6 = callOnContext(pool.ref(compileChecked(node, lists), { node, make: 'predicate' }), e);
        return `(${f} === 4 ? ${v4} : ${f} === 6 && ${v6})`;
      }
      if (node.kind === 'int-in' && node.lhs.kind === 'field') {
        const v = fieldHole('I', node.lhs.field.slot);
        const set = node.set;
        if (set.size === 0) return 'false';
        if (set.size <= 4) {
          // A few ranges inline as comparisons (NaN, the absent value, fails them all).
          const terms: string[] = [];
          for (let i = 0; i < set.size; i++) {
            const lo = num(set.lo[i]!);
            const hi = num(set.hi[i]!);
            terms.push(lo === hi ? `${v} === ${lo}` : `(${v} >= ${lo} && ${v} <= ${hi})`);
          }
          return `(${terms.join(' || ')})`;
        }
        const bits = intSetBitmap(set);
        if (bits !== null) {
          const b = pool.ref(bits);
          return `(${v} >= 0 && ${v} <= 65535 && ((${b}[${v} >>> 5] >>> (${v} & 31)) & 1) === 1)`;
        }
        return `${pool.ref(set, { node, make: 'int-set' })}.has(${v})`;
      }
      // The remaining forms reuse the closure compiler's specialised predicates.
      if (node.kind !== 'ip-in' && node.kind !== 'ip-list' && node.kind !== 'int-in') {
        for (const f of node.field.anyOf ?? [node.field]) pool.bytesRead.add(f.name);
      }
      return callOnContext(pool.ref(compileChecked(node, lists), { node, make: 'predicate' }), e);
    case 'ip-cmp': {
      const f = fieldHole('F', node.field.slot);
      const a4 = fieldHole('A4', node.field.slot);
      const w = node.value.words.map(num);
      if (node.value.family === 4) {
        const k = w[0]!;
        if (node.op === '!=') return `(${f} === 6 || (${f} === 4 && ${a4} !== ${k}))`;
        const op = node.op === '==' ? '===' : node.op;
        return `(${f} === 4 && ${a4} ${op} ${k})`;
      }
      if (node.op === '==' || node.op === '!=') {
        const o = node.field.slot * 4;
        const eq = w.map((k, i) => `${a6(o + i, e)} === ${k}`).join(' && ');
        if (node.op === '==') return `(${f} === 6 && ${eq})`;
        return `(${f} === 4 || (${f} === 6 && !(${eq})))`;
      }
      return callOnContext(pool.ref(compileChecked(node, lists), { node, make: 'predicate' }), e);
    }
  }
}

// The IPv6 address at A6[o..o+3] compared with the bound `w` from word k on:
// `op` '>' tests address >= w, '<' tests address <= w. Words past k that are
// all `pad` (0 for a lower bound, 0xffffffff for an upper one) need no test.
function wordsFrom(o: number, w: readonly number[], k: number, op: '>' | '<', pad: number, e: Emitted): string {
  if (w.slice(k).every((x) => x === pad)) return 'true';
  const a = a6(o + k, e);
  const x = num(w[k]!);
  const rest = k === 3 ? 'true' : wordsFrom(o, w, k + 1, op, pad, e);
  if (rest === 'true') return `${a} ${op}= ${x}`;
  return `(${a} ${op} ${x} || (${a} === ${x} && ${rest}))`;
}

// Cost of a test in the generated code, roughly in loads: a comparison of a
// field is 1, a call into a closure predicate (bytes, IP sets, bit slices,
// lists not precomputed) 8, and a test of a lazy field (ExecutionContext.pending,
// which may cost a lookup) LAZY_COST more. The operands of `and` and `or` are generated
// cheapest first: every predicate is pure and total (no side effects, no
// exceptions), so the order does not change the result, and a cheap test that
// decides the operator spares the dear one. On the pipeline benchmark the 8
// rules `ip.src.country in {...} and tcp.dstport == N` then test the port
// first and read the country only when the port matches, and the rules
// `ip.dst.asnum == N and ip.proto == "udp"` read the AS number of UDP packets only.
function cost(node: Checked, lists: ListProvider | undefined): number {
  const own = testCost(node, lists);
  // A lazy field may cost a lookup (cache misses in a table of megabytes): test it last.
  return node.kind === 'and' || node.kind === 'or' || node.kind === 'xor' || node.kind === 'not' || lazyGroups(node, lists).length === 0 ? own : own + LAZY_COST;
}

/** What reading a lazy field adds to a test's cost (see cost()). */
const LAZY_COST = 16;

function testCost(node: Checked, lists: ListProvider | undefined): number {
  switch (node.kind) {
    case 'and':
    case 'or':
    case 'xor': {
      let c = 0;
      for (const i of node.items) c += cost(i, lists);
      return c;
    }
    case 'not':
      return cost(node.operand, lists);
    case 'bool':
      return 1;
    case 'const':
      return 0;
    case 'int-cmp':
    case 'int-and':
      return node.lhs.kind === 'field' ? 1 : 8;
    case 'int-in':
      return node.lhs.kind === 'field' ? (node.set.size <= 4 ? node.set.size : 2) : 8;
    case 'ip-cmp':
      return node.value.family === 4 || node.op === '==' || node.op === '!=' ? 2 : 8;
    case 'ip-in':
      return node.set.v4.size <= 4 ? 2 : 8;
    case 'ip-list': {
      const pre = lists?.get(node.list)?.precomputed;
      return pre !== undefined && pre.slotFor(node.field.name) !== undefined ? 1 : 8;
    }
    case 'bytes-cmp':
    case 'bytes-in': {
      // Keyed: integer comparisons of the key (see keyedBytes).
      const alts = literalKeys(node, node.kind === 'bytes-cmp' ? [node.value] : node.values);
      if (alts === undefined || (node.kind === 'bytes-cmp' && node.op !== '==' && (node.op !== '!=' || alts.length !== 1))) return 8;
      return alts.length * (node.kind === 'bytes-in' && node.values.length > 4 ? 2 : Math.max(1, node.kind === 'bytes-in' ? node.values.length : 1));
    }
    default:
      return 8;
  }
}

/** The items sorted by cost, cheapest first; equal costs keep their written order. */
function byCost(items: readonly Checked[], lists: ListProvider | undefined): readonly Checked[] {
  const costs = items.map((i) => cost(i, lists));
  return items
    .map((item, i) => ({ item, i, c: costs[i]!, eq: isEquality(item) ? 0 : 1 }))
    .sort((x, y) => x.c - y.c || x.eq - y.eq || x.i - y.i)
    .map((x) => x.item);
}

// Among tests of equal cost, an equality on an int field goes first: it is
// the likeliest to decide an `and` (one value of many) and its branch is the
// likeliest to go the same way packet after packet, where flags and ordering
// tests on mixed traffic are coin flips the CPU mispredicts. On the pipeline
// benchmark's `tcp.flags.syn and not tcp.flags.ack and ip.ttl < N and
// tcp.dstport == M` rules the port is then tested first (measured:
// bench/pipeline.bench.ts).
function isEquality(node: Checked): boolean {
  return node.kind === 'int-cmp' && node.op === '==' && node.lhs.kind === 'field';
}

// The value of an int test's operand (`node.lhs`).
function intValue(node: Extract<Checked, { lhs: IntOperand }>, pool: ConstantPool, e: Emitted): string {
  const lhs = node.lhs;
  if (lhs.kind === 'field') return fieldHole('I', lhs.field.slot);
  // bit_slice: the compiler's getter (absent = NaN), called from the generated code.
  pool.bytesRead.add(lhs.field.name);
  return callOnContext(pool.ref(intGetter(lhs), { node, make: 'int-getter' }), e);
}

type BytesTest = Extract<Checked, { kind: 'bytes-cmp' | 'bytes-in' }>;

// The keys of `values` for each field `node` reads (a virtual any-of field
// reads several), or undefined when a field has no key or a value no key.
function literalKeys(node: BytesTest, values: readonly Uint8Array[]): Array<{ slot: number; lazy: number; keys: number[] }> | undefined {
  const out: Array<{ slot: number; lazy: number; keys: number[] }> = [];
  for (const f of node.field.anyOf ?? [node.field]) {
    if (f.key === null) return undefined;
    const keys: number[] = [];
    for (const v of values) {
      const k = f.key.of(v, 0, v.length);
      if (!Number.isInteger(k) || k < 0) return undefined;
      keys.push(k);
    }
    out.push({ slot: f.key.field.slot, lazy: f.key.field.lazy, keys });
  }
  return out;
}

/**
 * `==`, `!=` and `in` on a keyed bytes field (FieldKey) as integer tests of its
 * key: `ip.proto == "udp"` is `I[n] === 17`, `ip.src.country in {"CN" "RU"}`
 * two comparisons, instead of a call into a closure that compares bytes, and
 * the packet path writes keys instead of byte views (measured:
 * bench/pipeline.bench.ts).
 * An absent value's key is NaN, which fails every test, as the closures do;
 * `!=` is true only for a present value. Undefined when a literal has no key,
 * or for `!=` on a virtual any-of field (left to the closure).
 */
function keyedBytes(node: BytesTest, pool: ConstantPool): string | undefined {
  if (node.kind === 'bytes-cmp') {
    if (node.op !== '==' && node.op !== '!=') return undefined;
    const alts = literalKeys(node, [node.value]);
    if (alts === undefined) return undefined;
    if (node.op === '!=') {
      if (alts.length !== 1) return undefined;
      const v = fieldHole('I', alts[0]!.slot);
      return `(${v} !== ${num(alts[0]!.keys[0]!)} && ${v} === ${v})`;
    }
    return '(' + alts.map((a) => `${fieldHole('I', a.slot)} === ${num(a.keys[0]!)}`).join(' || ') + ')';
  }
  const alts = literalKeys(node, node.values);
  if (alts === undefined) return undefined;
  return '(' + alts.map((a) => keyIn(fieldHole('I', a.slot), a.keys, pool)).join(' || ') + ')';
}

// Membership of the key `v` in `keys`: comparisons for a few, else a bitmap
// over [min, max] when that span is at most 2^20 (128 KiB; two-byte values
// such as country codes span at most 2^16), else a Set probe.
function keyIn(v: string, keys: readonly number[], pool: ConstantPool): string {
  const ks = [...new Set(keys)].sort((a, b) => a - b);
  if (ks.length === 0) return 'false';
  if (ks.length <= 4) return '(' + ks.map((k) => `${v} === ${num(k)}`).join(' || ') + ')';
  const min = ks[0]!;
  const span = ks[ks.length - 1]! - min;
  if (span < 2 ** 20) {
    const bits = new Uint32Array((span >>> 5) + 1);
    for (const k of ks) bits[(k - min) >>> 5]! |= 1 << ((k - min) & 31);
    const b = pool.ref(bits);
    const d = `(${v} - ${num(min)})`;
    return `(${v} >= ${num(min)} && ${v} <= ${num(min + span)} && ((${b}[${d} >>> 5] >>> (${d} & 31)) & 1) === 1)`;
  }
  return `${pool.ref(new Set(ks))}.has(${v})`;
}

/** Compiles a checked tree through code generation into a standalone predicate (tests, single filters). */
export function compileGenerated(node: Checked, lists: ListProvider | undefined): (c: ExecutionContext) => boolean {
  const pool = new ConstantPool();
  const body = renderCode(generate(node, pool, lists).template);
  // The source is built from numbers only (see the header comment).
  const make = new Function('K', `return function generatedFilter(c) { ${CODEGEN_LOCALS} return ${body}; };\n//# sourceURL=moat-bundle/generated-filter.js`);
  return make(pool.values) as (c: ExecutionContext) => boolean;
}
