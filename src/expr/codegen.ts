// The code-generating backend: turns a checked tree into the source of one JS
// boolean expression over the context's typed arrays, for the engine to inline
// many rules into one straight-line function (measured 7.5x faster than a
// closure tree in performance.md §3e). The source is built only from the
// checked tree's numbers (slots, integer literals, constant indexes) and fixed
// operator text: no text the user wrote ever reaches it. Sets, byte strings,
// regexes and lists live in a constants array the generated code indexes.

import type { Checked, IntOperand, ListProvider } from './checked.js';
import { compileChecked, intGetter, intSetBitmap } from './compiler.js';
import type { ExecutionContext } from './context.js';
import { IpRangeSet } from '../net/index.js';

/**
 * Names the generated code uses. The engine's generated function declares them:
 * `const I = c.ints, B = c.bools, F = c.ipFamily, A4 = c.ip4, A6 = c.ip6;`
 * and `K` is the constants array.
 */
export const CODEGEN_LOCALS = 'const I = c.ints, B = c.bools, F = c.ipFamily, A4 = c.ip4, A6 = c.ip6;';

/** Collects constants referenced by generated code. */
export class ConstantPool {
  readonly values: unknown[] = [];

  /** Adds a constant and returns the code that reads it. */
  ref(v: unknown): string {
    this.values.push(v);
    return `K[${this.values.length - 1}]`;
  }
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

/** Generates the source of a boolean expression for `node`. */
export function generate(node: Checked, pool: ConstantPool, lists: ListProvider | undefined): string {
  switch (node.kind) {
    case 'and':
      return '(' + byCost(node.items, lists).map((i) => generate(i, pool, lists)).join(' && ') + ')';
    case 'or':
      return '(' + byCost(node.items, lists).map((i) => generate(i, pool, lists)).join(' || ') + ')';
    case 'xor':
      // Booleans compared with !== is xor; chains fold left as in the closures.
      return '(' + node.items.map((i) => generate(i, pool, lists)).join(' !== ') + ')';
    case 'not':
      return `!${generate(node.operand, pool, lists)}`;
    case 'bool':
      return `(B[${int(node.field.slot)}] === 1)`;
    case 'int-cmp': {
      const v = intValue(node.lhs, pool);
      const k = num(node.value);
      if (node.op === '!=') return `(${v} !== ${k} && ${v} === ${v})`;
      const op = node.op === '==' ? '===' : node.op;
      return `(${v} ${op} ${k})`;
    }
    case 'int-and':
      return `((${intValue(node.lhs, pool)} & ${num(node.mask)}) !== 0)`;
    case 'int-in':
    case 'ip-in':
    case 'ip-list':
    case 'bytes-cmp':
    case 'bytes-in':
    case 'bytes-contains':
    case 'bytes-matches':
      if (node.kind === 'ip-list') {
        const pre = lists?.get(node.list)?.precomputed;
        const slot = pre?.slotFor(node.field.name);
        if (pre !== undefined && slot !== undefined) return `((I[${int(slot)}] & ${num(pre.bit)}) !== 0)`;
      }
      if (node.kind === 'ip-in' && node.set instanceof IpRangeSet && node.set.v4.size <= 4) {
        // A few IPv4 ranges inline as comparisons; IPv6 addresses go to the predicate.
        const s = int(node.field.slot);
        const set = node.set.v4;
        const terms: string[] = [];
        for (let i = 0; i < set.size; i++) {
          const lo = num(set.lo[i]!);
          const hi = num(set.hi[i]!);
          terms.push(lo === hi ? `A4[${s}] === ${lo}` : `(A4[${s}] >= ${lo} && A4[${s}] <= ${hi})`);
        }
        const v4 = terms.length === 0 ? 'false' : `(${terms.join(' || ')})`;
        const v6 = node.set.v6.count === 0 ? 'false' : `${pool.ref(compileChecked(node, lists))}(c)`;
        return `(F[${s}] === 4 ? ${v4} : F[${s}] === 6 && ${v6})`;
      }
      if (node.kind === 'int-in' && node.lhs.kind === 'field') {
        const v = `I[${int(node.lhs.field.slot)}]`;
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
        return `${pool.ref(set)}.has(${v})`;
      }
      // The remaining forms reuse the closure compiler's specialised predicates.
      return `${pool.ref(compileChecked(node, lists))}(c)`;
    case 'ip-cmp': {
      const s = int(node.field.slot);
      const w = node.value.words.map(num);
      if (node.value.family === 4) {
        const k = w[0]!;
        if (node.op === '!=') return `(F[${s}] === 6 || (F[${s}] === 4 && A4[${s}] !== ${k}))`;
        const op = node.op === '==' ? '===' : node.op;
        return `(F[${s}] === 4 && A4[${s}] ${op} ${k})`;
      }
      const o = node.field.slot * 4;
      const eq = w.map((k, i) => `A6[${o + i}] === ${k}`).join(' && ');
      if (node.op === '==') return `(F[${s}] === 6 && ${eq})`;
      if (node.op === '!=') return `(F[${s}] === 4 || (F[${s}] === 6 && !(${eq})))`;
      return `${pool.ref(compileChecked(node, lists))}(c)`;
    }
  }
}

// Cost of a test in the generated code, roughly in loads: a comparison of a
// field is 1, a call into a closure predicate (bytes, IP sets, bit slices,
// lists not precomputed) 8. The operands of `and` and `or` are generated
// cheapest first: every predicate is pure and total (no side effects, no
// exceptions), so the order does not change the result, and a cheap test that
// decides the operator spares the dear one. On the pipeline benchmark the 8
// rules `ip.src.country in {...} and tcp.dstport == N` then test the port
// first and call the country predicate only when the port matches.
function cost(node: Checked, lists: ListProvider | undefined): number {
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
    default:
      return 8;
  }
}

/** The items sorted by cost, cheapest first; equal costs keep their written order. */
function byCost(items: readonly Checked[], lists: ListProvider | undefined): readonly Checked[] {
  const costs = items.map((i) => cost(i, lists));
  return items.map((item, i) => ({ item, i, c: costs[i]! })).sort((x, y) => x.c - y.c || x.i - y.i).map((x) => x.item);
}

function intValue(lhs: IntOperand, pool: ConstantPool): string {
  if (lhs.kind === 'field') return `I[${int(lhs.field.slot)}]`;
  // bit_slice: the compiler's getter (absent = NaN), called from the generated code.
  return `${pool.ref(intGetter(lhs))}(c)`;
}

/** Compiles a checked tree through code generation into a standalone predicate (tests, single filters). */
export function compileGenerated(node: Checked, lists: ListProvider | undefined): (c: ExecutionContext) => boolean {
  const pool = new ConstantPool();
  const body = generate(node, pool, lists);
  // The source is built from numbers only (see the header comment).
  const make = new Function('K', `return function generatedFilter(c) { ${CODEGEN_LOCALS} return ${body}; };`);
  return make(pool.values) as (c: ExecutionContext) => boolean;
}
