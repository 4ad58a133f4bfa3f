// Writes a bundle's JavaScript: each rule's generated condition (expr's
// generate) as a line that blocks, logs or skips; the lines as one function
// per bundle, or functions of consecutive rules run by a driver when the
// bundle is large; and the bundle's packet program (packet-program.ts).
//
// Names in the generated code, kept short because the size limits below count
// characters (a longer name would split bundles into more functions):
//   K            the constants (ConstantPool.values): sets, bitmaps, closures, port tables
//   P, Y         hit packets and hit bytes per rule (Counters.packets, .bytes)
//   LG, LN       logged rule indexes and, in LN[0], how many are the packet's (Counters.logged, .loggedCount)
//   FF           the fast path's frame test (packet programs only; see packet-program.ts for their `$` names)
//   c, len       the execution context and the packet's length on the wire
//   I B F A4 A6  the context's ints, bools, IP families, IPv4 and IPv6 address words (CODEGEN_LOCALS)
//   PD           the context's pending lazy groups, resolved through c.resolver
//   i_7, b_3...  a field read once into a local: i_7 is I[7] (function-body.ts)
//   L0, L1       the label of a level's rules (account, zone), which a skip breaks
//   d            a port run's table entry (port-dispatch.ts)
// Each rule's line starts with a `/* rule N */` marker (N its index in
// Evaluator.rules), and each function ends with `//# sourceURL=moat-bundle/<name>.js`.

import { CODEGEN_LOCALS, ConstantPool, generate, renderCode, type Checked, type GeneratedCode, type ListProvider } from '../expr/index.js';
import { VERDICT_PASS, type Chunk, type CompiledRule, type Counters, type GeneratedSource, type LazyValues } from './evaluator.js';
import { hoistFieldLoads, type BodyLine, type FunctionBody } from './function-body.js';
import { packetProgramSource, PROGRAM_FRAME_TEST, type PacketProgram } from './packet-program.js';
import { portRun } from './port-dispatch.js';
import type { Rule } from './ruleset.js';

/**
 * Largest generated body (characters) compiled as one function. V8 optimises
 * no function over 60 KB of bytecode (--max-optimized-bytecode-size), and a
 * function it does not optimise runs ~25x slower (measured:
 * bench/pipeline.bench.ts with its rules repeated). Generated rules take under
 * 1 byte of bytecode per character; this bound keeps a margin.
 */
export const MAX_FUNCTION_SOURCE = 30_000;

// Return codes of a generated chunk besides a blocking rule's index.
const CONTINUE = -1;
const SKIP_LEVEL = -2;

/** The rules of one level (account, zone) of a bundle: [start, end) in its rules. */
export interface LevelSpan {
  readonly start: number;
  readonly end: number;
}

/**
 * A bundle's generated code before it runs: the sources, and how its
 * functions are put together. Plain data (it crosses from the loader's worker
 * thread as is); linkBundle() makes the functions, over the constants.
 */
export interface BundleCode {
  /** Every generated source, those of the port runs' table builders too (for `moat check --emit-js`). */
  readonly sources: readonly GeneratedSource[];
  /**
   * The sources that run: `bundle` alone (and `packet-program` when the
   * bundle has one), or the chunks of each level, run in order by a driver.
   */
  readonly layout: { readonly kind: 'single'; readonly program: boolean } | { readonly kind: 'chunks'; readonly levels: ReadonlyArray<readonly string[]> };
  readonly functions: number;
  readonly bytesRead: readonly string[];
  readonly portRuns: number;
  readonly lazyValues: LazyValues;
}

/** A bundle's code as written, with the pool of the constants it reads. */
export interface WrittenBundle {
  readonly code: BundleCode;
  readonly pool: ConstantPool;
}

// The code of one rule: a block returns the rule's index and its caller
// (Evaluator.evaluate() or the packet path) counts the hit, since a counting
// site per rule would be a site without type feedback (see warm-up.ts); a log
// counts and records it and goes on; a skip counts and runs
// `skip`. Rule indexes and counter offsets are numbers; `cond` comes from
// generate() (numbers only too).
function ruleLine(rule: Rule, i: number, cond: string, skip: string): string {
  const count = `P[${i}]++; Y[${i}] += len;`;
  if (rule.action === 'block') return `if (${cond}) return ${i};`;
  if (rule.action === 'skip') return `if (${cond}) { ${count} ${skip} }`;
  return `if (${cond}) { ${count} LG[LN[0]++] = ${i}; }`;
}

// Rule i's line as a template, with its marker.
function ruleBodyLine(rule: Rule, i: number, code: GeneratedCode, skip: string): BodyLine {
  return { marker: `/* rule ${i} */`, template: ruleLine(rule, i, code.template, skip) };
}

// The function body of `lines`, which hold the rules of `codes`.
function functionBody(lines: readonly BodyLine[], codes: ReadonlyArray<GeneratedCode | null>): FunctionBody {
  return { lines, readsContext: codes.some((c) => c?.readsContext === true), readsAddresses: codes.some((c) => c?.readsAddresses === true) };
}

// The source of one generated function (made by linkBundle).
function functionSource(name: string, prologue: string, body: FunctionBody, end: number, sources: GeneratedSource[]): void {
  const h = hoistFieldLoads(body);
  const decls = h.locals.length === 0 ? '' : `const ${h.locals.map((l) => `${l.local} = ${l.array}[${l.slot}]`).join(', ')};\n`;
  const source = `return function ${name}(c, len) {\n${prologue}${CODEGEN_LOCALS}\n${decls}${h.source}\nreturn ${end};\n};\n//# sourceURL=moat-bundle/${name}.js`;
  sources.push({ name, source });
}

// The source of the bundle's packet program (see packet-program.ts); false when its code reads what a program does not provide.
function programSource(prologue: string, body: FunctionBody, end: number, sources: GeneratedSource[]): boolean {
  const source = packetProgramSource(body, prologue, end);
  if (source === null) return false;
  sources.push({ name: 'packet-program', source });
  return true;
}

/**
 * The functions of `code`, over `constants` (the pool's values) and
 * `counters`: the bundle's run (one function, or a driver over its chunks)
 * and its packet program. The sources are built from numbers and the
 * generator's own names only (see expr/codegen.ts).
 */
export function linkBundle(code: BundleCode, constants: readonly unknown[], counters: Counters): { run: Chunk; program: PacketProgram | null } {
  const byName = new Map(code.sources.map((s) => [s.name, s.source]));
  const make = (name: string): Chunk => {
    const f = new Function('K', 'P', 'Y', 'LG', 'LN', byName.get(name)!);
    return f(constants, counters.packets, counters.bytes, counters.logged, counters.loggedCount) as Chunk;
  };
  const layout = code.layout;
  if (layout.kind === 'chunks') return { run: chunkDriver(layout.levels.map((names) => names.map(make)), counters.loggedCount), program: null };
  let program: PacketProgram | null = null;
  if (layout.program) {
    const f = new Function('K', 'P', 'Y', 'LG', 'LN', 'FF', byName.get('packet-program')!);
    program = f(constants, counters.packets, counters.bytes, counters.logged, counters.loggedCount, PROGRAM_FRAME_TEST) as PacketProgram;
  }
  return { run: make('bundle'), program };
}

// Runs a large bundle's chunks in order: a chunk's SKIP_LEVEL ends its level.
function chunkDriver(levels: ReadonlyArray<readonly Chunk[]>, loggedCount: Int32Array): Chunk {
  return (ctx, len) => {
    loggedCount[0] = 0;
    for (let l = 0; l < levels.length; l++) {
      const chunks = levels[l]!;
      for (let i = 0; i < chunks.length; i++) {
        const r = chunks[i]!(ctx, len);
        if (r === CONTINUE) continue;
        if (r === SKIP_LEVEL) break;
        return r;
      }
    }
    return VERDICT_PASS;
  };
}

/**
 * The bundle's code. When its rules fit in `max` characters, one function:
 * each level a labelled block that a skip breaks out of (faster than chunks
 * and a driver loop; measured: bench/pipeline.bench.ts). Larger bundles:
 * functions of consecutive rules of one level up to that size each (fewer
 * calls than a fixed count of rules each), run in order by a driver.
 * `trees[i]` is rule i's checked tree, null for a disabled rule.
 */
export function writeBundle(
  rules: readonly CompiledRule[],
  trees: ReadonlyArray<Checked | null>,
  levels: readonly LevelSpan[],
  lists: ListProvider,
  max: number,
): WrittenBundle {
  // One pool for every function: each reads the constants it needs by index.
  const pool = new ConstantPool();
  const codes = rules.map((r, i) => (r.rule.enabled ? generate(trees[i]!, pool, lists) : null));
  // Sizes count the conditions as they read the context (`I[7]`), as the port dispatch runs them.
  const plain = codes.map((c) => (c === null ? null : renderCode(c.template)));
  const sources: GeneratedSource[] = [];
  let total = 0;
  for (let i = 0; i < rules.length; i++) if (plain[i] !== null) total += ruleLine(rules[i]!.rule, i, plain[i]!, '').length + 16;
  if (total <= max) {
    const lines: BodyLine[] = [];
    let portRuns = 0;
    levels.forEach(({ start, end }, l) => {
      lines.push({ marker: '', template: `L${l}: {` });
      for (let i = start; i < end; i++) {
        const run = portRun(rules, trees, plain, pool, i, end);
        if (run !== null) {
          lines.push(run.line);
          sources.push(run.builder);
          portRuns++;
          // The run's rules' codes stay out of the body (their flags too): the table holds them.
          for (let k = i; k < run.end; k++) codes[k] = null;
          i = run.end - 1;
          continue;
        }
        if (codes[i] !== null) lines.push(ruleBodyLine(rules[i]!.rule, i, codes[i]!, `break L${l};`));
      }
      lines.push({ marker: '', template: '}' });
    });
    const body = functionBody(lines, codes);
    functionSource('bundle', 'LN[0] = 0;\n', body, VERDICT_PASS, sources);
    const program = programSource('LN[0] = 0;', body, VERDICT_PASS, sources);
    return { pool, code: { sources, layout: { kind: 'single', program }, functions: 1, bytesRead: [...pool.bytesRead], portRuns, lazyValues: pool.lazyValues } };
  }
  const chunks = levels.map(({ start, end }) => {
    const out: string[] = [];
    let lines: BodyLine[] = [];
    let size = 0;
    let first = start;
    const flush = (last: number) => {
      if (lines.length > 0) {
        const body = functionBody(lines, codes.slice(first, last + 1));
        const name = `rules${first}to${last}`;
        functionSource(name, '', body, CONTINUE, sources);
        out.push(name);
      }
      lines = [];
      size = 0;
      first = last + 1;
    };
    for (let i = start; i < end; i++) {
      if (codes[i] === null) continue;
      const skip = `return ${SKIP_LEVEL};`;
      const length = ruleLine(rules[i]!.rule, i, plain[i]!, skip).length;
      if (size + length > max) flush(i - 1);
      lines.push(ruleBodyLine(rules[i]!.rule, i, codes[i]!, skip));
      size += length + 16;
    }
    flush(end - 1);
    return out;
  });
  return {
    pool,
    code: { sources, layout: { kind: 'chunks', levels: chunks }, functions: chunks.reduce((n, c) => n + c.length, 0), bytesRead: [...pool.bytesRead], portRuns: 0, lazyValues: pool.lazyValues },
  };
}
