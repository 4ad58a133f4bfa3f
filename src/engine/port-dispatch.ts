// Port dispatch: a run of block rules that each test one port field alone
// (`tcp.dstport in {22 3389 5900}`, one rule per service) becomes one table
// read, table[port] = 1 + the position in the run of the first rule that
// matches that port, 0 for none, instead of a bitmap or compares per rule.

import { CODEGEN_LOCALS, fieldHole, type Checked, type ConstantPool, type ExecutionContext } from '../expr/index.js';
import { TRANSIT_SCHEME } from '../packet/index.js';
import type { CompiledRule, GeneratedSource } from './evaluator.js';
import type { BodyLine } from './function-body.js';

// A packet that matches none of a run's rules (most) would pay every rule's
// test; the table read costs one load whatever the run's size, and keeps the
// rules' bitmaps out of L1 (measured: bench/pipeline.bench.ts). The table is
// built by running the rules' own generated conditions on every port value,
// so it says exactly what the rules say; a rule joins a run only when its
// condition is false for an absent port (a port of the other protocol, a
// fragment), since the dispatch skips absent ports.
const PORT_FIELDS: ReadonlySet<string> = new Set(['tcp.dstport', 'tcp.srcport', 'udp.dstport', 'udp.srcport']);
const PORT_RUN_MIN = 4;
/** Most rules in one run (positions fit a Uint8Array). */
const PORT_RUN_MAX = 255;

/** A rule's generated condition as the port dispatch sees it: rendered with plain context reads (`I[7]`). */
export type PlainCondition = string | null;

/**
 * The dispatch of the run of port rules starting at rule i (before `end`), or
 * null when fewer than PORT_RUN_MIN qualify: the line that replaces the run,
 * the end of the run, and the source of the function that built its table.
 */
export function portRun(
  rules: readonly CompiledRule[], trees: ReadonlyArray<Checked | null>, conds: readonly PlainCondition[], pool: ConstantPool, i: number, end: number,
): { line: BodyLine; end: number; builder: GeneratedSource } | null {
  const field = portField(rules[i]!, conds[i]!);
  if (field === null) return null;
  let j = i + 1;
  while (j < end && j - i < PORT_RUN_MAX && portField(rules[j]!, conds[j]!) === field) j++;
  if (j - i < PORT_RUN_MIN) return null;
  const slot = TRANSIT_SCHEME.field(field).slot;
  const ctx = TRANSIT_SCHEME.newContext();
  // The rules' own generated code (numbers only, see generate()) in one
  // function: the first rule (1-based) that matches port value v, or 0, on a
  // context holding only the port (NaN: the port absent).
  const tests = conds.slice(i, j).map((cond, k) => `if (${cond!}) return ${k + 1};`).join('\n');
  const name = `port-run-${i}`;
  const body = `${CODEGEN_LOCALS}\nI[${slot}] = v;\n${tests}\nreturn 0;`;
  const url = `//# sourceURL=moat-bundle/${name}.js`;
  const matchAt = new Function('K', 'c', 'v', `${body}\n${url}`) as (K: readonly unknown[], c: ExecutionContext, v: number) => number;
  // A rule true for an absent port: the run stops before it.
  const absent = matchAt(pool.values, ctx, NaN);
  if (absent !== 0) j = i + absent - 1;
  if (j - i < PORT_RUN_MIN) return null;
  // A port value whose first match is a rule after the run is none of the run's.
  const size = j - i;
  const inRun = (d: number) => (d > size ? 0 : d);
  const table = new Uint8Array(65536);
  const cuts = portCuts(trees.slice(i, j));
  if (cuts !== null) {
    // Only comparisons with and sets of integer literals: the run's answer is
    // the same over each span between two cuts, so one call per span fills it
    // (a few hundred calls where every port value cost 65,536, paid by every
    // ruleset update; measured: bench/swap.bench.ts).
    for (let k = 0; k + 1 < cuts.length; k++) table.fill(inRun(matchAt(pool.values, ctx, cuts[k]!)), cuts[k]!, cuts[k + 1]!);
  } else {
    // Other tests (a bit mask, a bit slice of the port): every value.
    for (let v = 0; v < 65536; v++) table[v] = inRun(matchAt(pool.values, ctx, v));
  }
  const t = pool.ref(table);
  const s = fieldHole('I', slot);
  const first = i - 1;
  return {
    line: { marker: `/* rules ${i}-${j - 1} */`, template: `if (${s} >= 0 && ${s} <= 65535) { const d = ${t}[${s}]; if (d !== 0) return d + ${first}; }` },
    end: j,
    builder: { name, source: `function matchAt(K, c, v) {\n${body}\n}\n${url}` },
  };
}

/**
 * The port values (0 .. 65536, ascending, first 0 and last 65536) where the
 * truth of `trees` may change, when they compare the port only with integer
 * literals (`==`, `<`..., `in` sets and ranges; `and`, `or`, `xor`, `not`):
 * between two cuts every test keeps its value. null for any other test.
 */
function portCuts(trees: ReadonlyArray<Checked | null>): number[] | null {
  const cuts = new Set<number>([0, 65536]);
  const add = (x: number) => {
    for (const c of [Math.floor(x), Math.floor(x) + 1]) if (c > 0 && c < 65536) cuts.add(c);
  };
  const walk = (t: Checked): boolean => {
    switch (t.kind) {
      case 'and':
      case 'or':
      case 'xor':
        return t.items.every(walk);
      case 'not':
        return walk(t.operand);
      case 'const':
        return true;
      case 'int-cmp':
        if (t.lhs.kind !== 'field') return false;
        add(t.value);
        return true;
      case 'int-in':
        if (t.lhs.kind !== 'field') return false;
        for (let r = 0; r < t.set.lo.length; r++) {
          add(t.set.lo[r]! - 1);
          add(t.set.hi[r]!);
        }
        return true;
      default:
        return false;
    }
  };
  for (const t of trees) if (t === null || !walk(t)) return null;
  return [...cuts].sort((a, b) => a - b);
}

/**
 * The port field a rule alone tests, when it may join a port run: an enabled
 * block rule reading one port field and no list. (Its condition never reads
 * the packet's length: generate() emits no `len`, which
 * test/engine/generated-alphabet.test.ts checks.)
 */
function portField(r: CompiledRule, cond: PlainCondition): string | null {
  if (cond === null || r.rule.action !== 'block' || r.lists.length > 0 || r.fields.length !== 1) return null;
  const f = r.fields[0]!;
  return PORT_FIELDS.has(f) ? f : null;
}
