// A ruleset bundle (the account-level network_transit entrypoint, optionally the
// zone-level one, and the lists they use) compiled into one immutable evaluator.
// Rules become straight-line generated code (see expr/codegen.ts) with per-rule
// counters: account rules first, then zone rules; in a ruleset, rules in order;
// disabled rules are passed over; the first matching block drops the packet;
// skip ends the current ruleset; log counts and records and goes on.

import { MoatError } from '../errors/index.js';
import { check, CODEGEN_LOCALS, ConstantPool, DEFAULT_LIMITS, generate, parse, type Checked, type Limits, type ListProvider } from '../expr/index.js';
import { planFor, TRANSIT_SCHEME, type DecodePlan } from '../packet/index.js';
import type { ExecutionContext } from '../expr/index.js';
import { packetProgramSource, PROGRAM_FRAME_TEST, type FieldLocal, type PacketProgram } from './fused.js';
import { expandExecutes, type ExpandedFrom, type ManagedRulesets } from './managed.js';
import type { Rule, Ruleset } from './ruleset.js';
import { warmUpFrames } from './warm-up.js';

/** What a bundle is made of. */
export interface BundleInput {
  account?: Ruleset | undefined;
  zone?: Ruleset | undefined;
  /** Lists by canonical name (`svc.malware`, `office_blocklist`). Managed lists not given are empty. */
  lists?: ListProvider | undefined;
  limits?: Partial<Limits> | undefined;
  /** Managed rulesets that execute rules run in place, by id. */
  managed?: ManagedRulesets | undefined;
}

/** Which ruleset a rule came from. */
export type Level = 'account' | 'zone';

/** A rule of a compiled bundle, with what its expression reads. */
export interface CompiledRule {
  readonly level: Level;
  /** Position in its ruleset. */
  readonly index: number;
  readonly rule: Rule;
  /** Set when the rule came from a managed ruleset run by an execute rule. */
  readonly from?: ExpandedFrom | undefined;
  readonly fields: readonly string[];
  readonly lists: readonly string[];
}

/** A bundle that did not compile: every error found, each naming its rule. */
export class BundleError extends Error {
  constructor(readonly errors: readonly MoatError[]) {
    super(`the ruleset bundle has ${errors.length} error${errors.length === 1 ? '' : 's'}:\n${errors.map((e) => '  ' + e.message).join('\n')}`);
    this.name = 'BundleError';
  }
}

/** Result of an evaluation when no rule blocked. */
export const VERDICT_PASS = -1;

// Return codes of a generated chunk besides a blocking rule's index.
const CONTINUE = -1;
const SKIP_LEVEL = -2;

type Chunk = (c: ExecutionContext, len: number) => number;

/** Lazy group -> int slot -> literal ranges [lo, hi, ...], or null (see ConstantPool.lazyValues). */
export type LazyValues = ReadonlyMap<number, ReadonlyMap<number, readonly number[]> | null>;

/** The compiled, immutable evaluator of a bundle. Counters are its only mutable state. */
export class Evaluator {
  /** Packets and bytes matched, per rule (indexes of `rules`). */
  readonly hitPackets: Float64Array;
  readonly hitBytes: Float64Array;
  /** Indexes of the log rules that matched the last packet: the first `loggedCount` entries. */
  readonly logged: Int32Array;
  private readonly loggedCountBox: Int32Array;
  /** Decoder plan: only what the rules read. */
  readonly plan: DecodePlan;
  /** Every field and list the rules read, sorted. */
  readonly fields: readonly string[];
  readonly lists: readonly string[];
  /**
   * The bytes fields whose bytes the compiled rules read, sorted: a keyed
   * field (FieldKey) not in this list is read through its key only, so the
   * packet path need not write its bytes.
   */
  readonly bytesFields: readonly string[];

  constructor(
    readonly rules: readonly CompiledRule[],
    /** The whole bundle: one generated function, or a driver over chunks (see compileBundle). */
    private readonly run: Chunk,
    /** Number of generated functions the rules were compiled into (1 unless over MAX_FUNCTION_SOURCE). */
    readonly functions: number,
    counters: { packets: Float64Array; bytes: Float64Array; logged: Int32Array; loggedCount: Int32Array },
    bytesRead: Iterable<string> = [],
    /** Runs of port rules compiled into one table read each (see portRun). */
    readonly portRuns = 0,
    /**
     * How the rules read each lazy group (ConstantPool.lazyValues): the
     * literals they compare its fields with, or null when they read it
     * otherwise; groups they never read are missing.
     */
    readonly lazyValues: LazyValues = new Map(),
    /**
     * The bundle fused with the decoder's fast path (see fused.ts), for the
     * frames that path takes; null for bundles in several functions or whose
     * rules read what a program does not decode.
     */
    readonly program: PacketProgram | null = null,
    /** Synthetic frames that reach each rule's tests (see warm-up.ts, PacketPath.warmUp). */
    readonly warmUpFrames: readonly Uint8Array[] = [],
  ) {
    this.hitPackets = counters.packets;
    this.hitBytes = counters.bytes;
    this.logged = counters.logged;
    this.loggedCountBox = counters.loggedCount;
    this.fields = Object.freeze([...new Set(rules.filter((r) => r.rule.enabled).flatMap((r) => r.fields))].sort());
    this.lists = Object.freeze([...new Set(rules.filter((r) => r.rule.enabled).flatMap((r) => r.lists))].sort());
    this.bytesFields = Object.freeze([...new Set(bytesRead)].sort());
    this.plan = planFor(this.fields, this.bytesFields);
  }

  /** Number of log rules that matched the last packet. */
  get loggedCount(): number {
    return this.loggedCountBox[0]!;
  }

  /**
   * Evaluates one packet (its fields in `ctx`, `len` bytes on the wire).
   * Returns the index in `rules` of the rule that blocked it, or VERDICT_PASS.
   */
  evaluate(ctx: ExecutionContext, len: number): number {
    const r = this.run(ctx, len);
    if (r >= 0) this.countBlock(r, len);
    return r;
  }

  /**
   * Counts a packet of `len` bytes blocked by rule `r`: the generated code
   * counts the matches of log and skip rules itself, not those of block rules
   * (see ruleLine in bundle.ts). evaluate() calls it; so does the packet path
   * for a verdict of the packet program.
   */
  countBlock(r: number, len: number): void {
    this.hitPackets[r]++;
    this.hitBytes[r] += len;
  }

  /** A copy of every counter (for restoreCounters: see PacketPath.warmUp). */
  saveCounters(): Float64Array {
    const n = this.hitPackets.length;
    const out = new Float64Array(2 * n + this.logged.length + 1);
    out.set(this.hitPackets, 0);
    out.set(this.hitBytes, n);
    out.set(this.logged, 2 * n);
    out[out.length - 1] = this.loggedCountBox[0]!;
    return out;
  }

  /** Puts back the counters saveCounters() copied. */
  restoreCounters(saved: Float64Array): void {
    const n = this.hitPackets.length;
    this.hitPackets.set(saved.subarray(0, n));
    this.hitBytes.set(saved.subarray(n, 2 * n));
    this.logged.set(saved.subarray(2 * n, 2 * n + this.logged.length));
    this.loggedCountBox[0] = saved[saved.length - 1]!;
  }

  /** Sets every counter to zero. */
  resetCounters(): void {
    this.hitPackets.fill(0);
    this.hitBytes.fill(0);
  }
}

const NO_LISTS: ListProvider = { has: () => false, get: () => undefined };

/** Compiles a bundle; throws BundleError listing every bad rule, so nothing half-compiled is ever used. */
export function compileBundle(input: BundleInput, codegen: { maxFunctionSource?: number } = {}): Evaluator {
  const limits = { ...DEFAULT_LIMITS, ...(input.limits ?? {}) };
  const lists: ListProvider = input.lists ?? NO_LISTS;
  const errors: MoatError[] = [];
  const rules: CompiledRule[] = [];
  const trees: Array<ReturnType<typeof check>['tree']> = [];
  const levels: Array<{ level: Level; start: number; end: number }> = [];
  for (const level of ['account', 'zone'] as const) {
    const rs = input[level];
    if (rs === undefined) continue;
    const start = rules.length;
    const expanded = expandExecutes(rs, input.managed, `${level} ruleset${rs.name ? ` "${rs.name}"` : ''}`);
    errors.push(...expanded.errors);
    for (const { rule, index, from } of expanded.rules) {
      const where = `${level} ruleset${rs.name ? ` "${rs.name}"` : ''}, rule ${index}${rule.id ? ` (${rule.id})` : ''}${from ? ` of managed ruleset ${from.managedId}` : ''}`;
      const pointer = `/rules/${index}/expression`;
      // Expanded rules can be longer than one expression may be: their parts were each within the limit.
      const ruleLimits = from === undefined ? limits : { ...limits, maxLength: limits.maxLength * 2 + 16 };
      try {
        const ast = parse(rule.expression, ruleLimits);
        const r = check(ast, TRANSIT_SCHEME, { lists });
        for (const e of r.errors) errors.push(locate(e, where, pointer));
        rules.push({ level, index, rule, from, fields: r.fields, lists: r.lists });
        trees.push(r.tree);
      } catch (err) {
        if (!(err instanceof MoatError)) throw err;
        errors.push(locate(err, where, pointer));
        rules.push({ level, index, rule, from, fields: [], lists: [] });
        trees.push(null);
      }
    }
    levels.push({ level, start, end: rules.length });
  }
  if (errors.length > 0) throw new BundleError(errors);

  const counters = {
    packets: new Float64Array(rules.length),
    bytes: new Float64Array(rules.length),
    logged: new Int32Array(Math.max(1, rules.filter((r) => r.rule.action === 'log').length)),
    loggedCount: new Int32Array(1),
  };
  const run = generateBundle(rules, trees, levels, lists, counters, codegen.maxFunctionSource ?? MAX_FUNCTION_SOURCE);
  const warm = Object.freeze(warmUpFrames(rules.map((r, i) => (r.rule.enabled ? trees[i]! : null))));
  return new Evaluator(Object.freeze(rules), run.run, run.functions, counters, run.bytesRead, run.portRuns, run.lazyValues, run.program, warm);
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

function locate(e: MoatError, where: string, pointer: string): MoatError {
  // Keep the expression's own code, message and span; say which rule it is.
  e.message = `${where}: ${e.message}`;
  e.pointer = pointer;
  return e;
}

// Int slots of lazy fields (see ExecutionContext.pending): read where the
// generated code has resolved them, never ahead.
const LAZY_INT_SLOTS: ReadonlySet<string> = new Set(
  TRANSIT_SCHEME.fields.filter((f) => f.lazy >= 0 && f.type === 'int').map((f) => String(f.slot)),
);

// Reads each field a chunk uses once, into a local, instead of at every use:
// the rules of a chunk read the same few fields (ports, protocol, flags) many
// times. The source is our own generated code (numbers only), so rewriting the
// typed-array reads I[n], B[n], F[n] and A4[n] by pattern is exact. Lazy
// fields keep their reads in place: they are valid only once resolved.
function hoistFieldLoads(body: string): { locals: FieldLocal[]; body: string } {
  const locals: FieldLocal[] = [];
  const seen = new Set<string>();
  const out = body.replace(/\b(I|B|F|A4)\[(\d+)\]/g, (m, arr: FieldLocal['array'], n: string) => {
    if (arr === 'I' && LAZY_INT_SLOTS.has(n)) return m;
    const local = `${arr.toLowerCase()}_${n}`;
    if (!seen.has(local)) {
      seen.add(local);
      locals.push({ local, array: arr, slot: Number(n) });
    }
    return local;
  });
  return { locals, body: out };
}

type Counters = { packets: Float64Array; bytes: Float64Array; logged: Int32Array; loggedCount: Int32Array };

/**
 * Largest generated body (characters) compiled as one function. V8 optimises
 * no function over 60 KB of bytecode (--max-optimized-bytecode-size), and a
 * function it does not optimise runs ~25x slower: measured on the pipeline
 * benchmark's 50 rules repeated, one function of 400 rules (43,500 characters)
 * was optimised, one of 600 (65,300) never was (25 us per packet for 1,000 rules).
 * Generated rules take under 1 byte of bytecode per character; this bound keeps
 * a margin.
 */
export const MAX_FUNCTION_SOURCE = 30_000;

// The code of one rule: a block returns the rule's index (its caller,
// Evaluator.evaluate() or the packet path, counts the hit), a log counts and
// records it and goes on, a skip counts and runs `skip`. Rule indexes and
// counter offsets are numbers; `cond` comes from generate() (numbers only too).
//
// Why a block does not count here: each `P[i]++` is a site of its own in the
// optimised code, and a site never reached before optimisation has no type
// feedback, so the first packet a rule blocks after that deoptimised the whole
// function, which then ran unoptimised until V8 optimised it again. On the
// pipeline benchmark's 50 rules, the first 1M packets cost 14-18 optimisations
// of the packet program, most of them for a rule's first hit, and `moat replay`
// of that file ran at ~1.0 M packets/s against ~3 M once warm. One counting
// site in the caller is warm after the first block.
function ruleLine(rule: Rule, i: number, cond: string, skip: string): string {
  const count = `P[${i}]++; Y[${i}] += len;`;
  if (rule.action === 'block') return `if (${cond}) return ${i};`;
  if (rule.action === 'skip') return `if (${cond}) { ${count} ${skip} }`;
  return `if (${cond}) { ${count} LG[LN[0]++] = ${i}; }`;
}

function compileFunction(name: string, prologue: string, body: string, end: number, pool: ConstantPool, counters: Counters): Chunk {
  const h = hoistFieldLoads(body);
  const decls = h.locals.length === 0 ? '' : `const ${h.locals.map((l) => `${l.local} = ${l.array}[${l.slot}]`).join(', ')};\n`;
  const source = `return function ${name}(c, len) {\n${prologue}${CODEGEN_LOCALS}\n${decls}${h.body}\nreturn ${end};\n};`;
  const make = new Function('K', 'P', 'Y', 'LG', 'LN', source);
  return make(pool.values, counters.packets, counters.bytes, counters.logged, counters.loggedCount) as Chunk;
}

// The bundle's packet program (see fused.ts), or null when its code reads what a program does not provide.
function compileProgram(prologue: string, body: string, end: number, pool: ConstantPool, counters: Counters): PacketProgram | null {
  const h = hoistFieldLoads(body);
  const source = packetProgramSource(h.locals, h.body, prologue, end);
  if (source === null) return null;
  const make = new Function('K', 'P', 'Y', 'LG', 'LN', 'FF', source);
  return make(pool.values, counters.packets, counters.bytes, counters.logged, counters.loggedCount, PROGRAM_FRAME_TEST) as PacketProgram;
}

// Port dispatch. Rulesets often hold runs of block rules that each test one
// port field alone (`tcp.dstport in {22 3389 5900}`, one rule per service):
// each is a bitmap or a chain of compares, so a packet that matches none (most)
// pays them all. A run of at least PORT_RUN_MIN consecutive such rules on the
// same field becomes one table read: table[port] = 1 + the position in the run
// of the first rule that matches that port, 0 for none. The table is built by
// running each rule's own generated condition on every port value, so it says
// exactly what the rules say; a rule joins a run only when its condition is
// false for an absent port (a port of the other protocol, a fragment), since
// the dispatch skips absent ports. Measured on the pipeline benchmark's 50
// rules (12 leading tcp.dstport sets, 10 of them 8 KB bitmaps), alternating
// in-process A/B, CPU median: the whole packet path 330 -> 289 ns/packet (16
// passes), as the ten bitmaps no longer compete for L1 with the lookups; the
// evaluator alone on 512 contexts kept in cache, where the bitmaps stay in
// L1, goes 73 -> 89 ns (10 passes), so the gain is the packet path's.
const PORT_FIELDS: ReadonlySet<string> = new Set(['tcp.dstport', 'tcp.srcport', 'udp.dstport', 'udp.srcport']);
const PORT_RUN_MIN = 4;
/** Most rules in one run (positions fit a Uint8Array). */
const PORT_RUN_MAX = 255;

/** The dispatch of the run of port rules starting at rule i, or null when fewer than PORT_RUN_MIN qualify. */
function portRun(
  rules: readonly CompiledRule[], trees: ReadonlyArray<Checked | null>, conds: ReadonlyArray<string | null>, pool: ConstantPool, i: number, end: number,
): { line: string; end: number } | null {
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
  const matchAt = new Function('K', 'c', 'v', `${CODEGEN_LOCALS}\nI[${slot}] = v;\n${tests}\nreturn 0;`) as (K: readonly unknown[], c: ExecutionContext, v: number) => number;
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
    // (a few hundred calls where every port value cost 65,536: 3.5 of the 7
    // ms of compileBundle on the pipeline benchmark's rules, which each
    // ruleset update pays; see bench/swap.bench.ts).
    for (let k = 0; k + 1 < cuts.length; k++) table.fill(inRun(matchAt(pool.values, ctx, cuts[k]!)), cuts[k]!, cuts[k + 1]!);
  } else {
    // Other tests (a bit mask, a bit slice of the port): every value.
    for (let v = 0; v < 65536; v++) table[v] = inRun(matchAt(pool.values, ctx, v));
  }
  const t = pool.ref(table);
  const s = `I[${slot}]`;
  const first = i - 1;
  return {
    line: `if (${s} >= 0 && ${s} <= 65535) { const d = ${t}[${s}]; if (d !== 0) return d + ${first}; }`,
    end: j,
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

/** The port field a rule alone tests, when it may join a port run: an enabled block rule reading one port field and no list. */
function portField(r: CompiledRule, cond: string | null): string | null {
  if (cond === null || r.rule.action !== 'block' || r.lists.length > 0 || r.fields.length !== 1) return null;
  const f = r.fields[0]!;
  return PORT_FIELDS.has(f) && !/\blen\b/.test(cond) ? f : null;
}

/**
 * The bundle's code. When its rules fit in MAX_FUNCTION_SOURCE, one function:
 * each level a labelled block that a skip breaks out of. Measured against
 * chunks of 24 rules and a driver loop, evaluating the pipeline benchmark's
 * 50 rules on 512 preloaded contexts, alternating A/B: 111 -> 85 ns per
 * packet; the whole packet path (16 passes), 459 -> 422 ns. Larger bundles: functions of
 * consecutive rules of one level up to that size each (fewer calls than a
 * fixed count: 400 rules in chunks of 24 cost 794 ns, in one function 430),
 * run in order by a driver.
 */
function generateBundle(
  rules: readonly CompiledRule[],
  trees: ReadonlyArray<ReturnType<typeof check>['tree']>,
  levels: ReadonlyArray<{ start: number; end: number }>,
  lists: ListProvider,
  counters: Counters,
  max: number,
): { run: Chunk; program: PacketProgram | null; functions: number; bytesRead: Set<string>; portRuns: number; lazyValues: LazyValues } {
  // One pool for every function: each reads the constants it needs by index.
  const pool = new ConstantPool();
  const conds = rules.map((r, i) => (r.rule.enabled ? generate(trees[i]!, pool, lists) : null));
  const bytesRead = pool.bytesRead;
  let total = 0;
  for (let i = 0; i < rules.length; i++) if (conds[i] !== null) total += ruleLine(rules[i]!.rule, i, conds[i]!, '').length + 16;
  if (total <= max) {
    const lines: string[] = [];
    let portRuns = 0;
    levels.forEach(({ start, end }, l) => {
      lines.push(`L${l}: {`);
      for (let i = start; i < end; i++) {
        const run = portRun(rules, trees, conds, pool, i, end);
        if (run !== null) {
          lines.push(run.line);
          portRuns++;
          i = run.end - 1;
          continue;
        }
        if (conds[i] !== null) lines.push(ruleLine(rules[i]!.rule, i, conds[i]!, `break L${l};`));
      }
      lines.push('}');
    });
    const body = lines.join('\n');
    return {
      run: compileFunction('bundle', 'LN[0] = 0;\n', body, VERDICT_PASS, pool, counters),
      program: compileProgram('LN[0] = 0;', body, VERDICT_PASS, pool, counters),
      functions: 1, bytesRead, portRuns, lazyValues: pool.lazyValues,
    };
  }
  const chunks = levels.map(({ start, end }) => {
    const out: Chunk[] = [];
    let lines: string[] = [];
    let size = 0;
    let first = start;
    const flush = (last: number) => {
      if (lines.length > 0) out.push(compileFunction(`rules${first}to${last}`, '', lines.join('\n'), CONTINUE, pool, counters));
      lines = [];
      size = 0;
      first = last + 1;
    };
    for (let i = start; i < end; i++) {
      if (conds[i] === null) continue;
      const line = ruleLine(rules[i]!.rule, i, conds[i]!, `return ${SKIP_LEVEL};`);
      if (size + line.length > max) flush(i - 1);
      lines.push(line);
      size += line.length + 16;
    }
    flush(end - 1);
    return out;
  });
  return { run: chunkDriver(chunks, counters.loggedCount), program: null, functions: chunks.reduce((n, c) => n + c.length, 0), bytesRead, portRuns: 0, lazyValues: pool.lazyValues };
}
