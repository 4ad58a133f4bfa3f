// The run-time side of a compiled bundle: the immutable Evaluator the packet
// path calls per packet, with its per-rule counters (its only mutable state).
// compile-bundle.ts builds it; code-writer.ts writes the functions it runs.

import type { ExecutionContext } from '../expr/index.js';
import { planFor, type DecodePlan } from '../packet/index.js';
import type { CompiledCode } from './compile-bundle.js';
import type { ExpandedFrom } from './managed.js';
import type { PacketProgram } from './packet-program.js';
import type { Rule } from './ruleset.js';

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

/** Result of an evaluation when no rule blocked. */
export const VERDICT_PASS = -1;

/** A generated function over the context: the index of a blocking rule, VERDICT_PASS, or (a chunk) its own codes. */
export type Chunk = (c: ExecutionContext, len: number) => number;

/** Lazy group -> int slot -> literal ranges [lo, hi, ...], or null (see ConstantPool.lazyValues). */
export type LazyValues = ReadonlyMap<number, ReadonlyMap<number, readonly number[]> | null>;

/** The counters the generated code writes (see the parameter table in code-writer.ts). */
export interface Counters {
  /** Packets matched, per rule. */
  readonly packets: Float64Array;
  /** Bytes matched, per rule. */
  readonly bytes: Float64Array;
  /** Indexes of the log rules that matched the last packet. */
  readonly logged: Int32Array;
  /** One entry: how many of `logged` are the last packet's. */
  readonly loggedCount: Int32Array;
}

/** The counters of a bundle of `rules` rules, `logRules` of them log rules. */
export function newCounters(rules: number, logRules: number): Counters {
  return {
    packets: new Float64Array(rules),
    bytes: new Float64Array(rules),
    logged: new Int32Array(Math.max(1, logRules)),
    loggedCount: new Int32Array(1),
  };
}

/** The source of one generated function, under the name its sourceURL gives (`moat-bundle/<name>.js`). */
export interface GeneratedSource {
  readonly name: string;
  readonly source: string;
}

/** What an Evaluator is built from (see compileBundle). */
export interface EvaluatorParts {
  readonly rules: readonly CompiledRule[];
  /** The whole bundle: one generated function, or a driver over chunks. */
  readonly run: Chunk;
  /** Number of generated functions the rules were compiled into (1 unless over MAX_FUNCTION_SOURCE). */
  readonly functions: number;
  readonly counters: Counters;
  /** Bytes fields whose bytes the generated code reads (ConstantPool.bytesRead). */
  readonly bytesRead?: Iterable<string> | undefined;
  /** Runs of port rules compiled into one table read each (see port-dispatch.ts). */
  readonly portRuns?: number | undefined;
  readonly lazyValues?: LazyValues | undefined;
  readonly program?: PacketProgram | null | undefined;
  readonly warmUpFrames?: readonly Uint8Array[] | undefined;
  readonly sources?: readonly GeneratedSource[] | undefined;
  /** The code the functions were made from (see Evaluator.compiled). */
  readonly compiled?: CompiledCode | undefined;
}

/** The compiled, immutable evaluator of a bundle. Counters are its only mutable state. */
export class Evaluator {
  readonly rules: readonly CompiledRule[];
  /** Number of generated functions the rules were compiled into (1 unless over MAX_FUNCTION_SOURCE). */
  readonly functions: number;
  /** Runs of port rules compiled into one table read each (see port-dispatch.ts). */
  readonly portRuns: number;
  /**
   * How the rules read each lazy group (ConstantPool.lazyValues): the
   * literals they compare its fields with, or null when they read it
   * otherwise; groups they never read are missing.
   */
  readonly lazyValues: LazyValues;
  /**
   * The bundle fused with the decoder's fast path (see packet-program.ts), for
   * the frames that path takes; null for bundles in several functions or whose
   * rules read what a program does not decode.
   */
  readonly program: PacketProgram | null;
  /** Synthetic frames that reach each rule's tests (see warm-up.ts, PacketPath.warmUp). */
  readonly warmUpFrames: readonly Uint8Array[];
  /** The sources of the generated functions, for anyone debugging a verdict (`moat check --emit-js`). */
  readonly sources: readonly GeneratedSource[];
  /**
   * The code `run` and `program` were made from, with their constants:
   * what a loader in a worker thread hands to the packet loop, which makes
   * the functions again there (see bundle-transfer.ts). Undefined for an
   * evaluator built from functions alone.
   */
  readonly compiled: CompiledCode | undefined;
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
  private readonly run: Chunk;

  constructor(parts: EvaluatorParts) {
    this.rules = parts.rules;
    this.run = parts.run;
    this.functions = parts.functions;
    this.portRuns = parts.portRuns ?? 0;
    this.lazyValues = parts.lazyValues ?? new Map();
    this.program = parts.program ?? null;
    this.warmUpFrames = parts.warmUpFrames ?? [];
    this.sources = parts.sources ?? [];
    this.compiled = parts.compiled;
    this.hitPackets = parts.counters.packets;
    this.hitBytes = parts.counters.bytes;
    this.logged = parts.counters.logged;
    this.loggedCountBox = parts.counters.loggedCount;
    const enabled = this.rules.filter((r) => r.rule.enabled);
    this.fields = Object.freeze([...new Set(enabled.flatMap((r) => r.fields))].sort());
    this.lists = Object.freeze([...new Set(enabled.flatMap((r) => r.lists))].sort());
    this.bytesFields = Object.freeze([...new Set(parts.bytesRead ?? [])].sort());
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
   * (see ruleLine in code-writer.ts). evaluate() calls it; so does the packet
   * path for a verdict of the packet program.
   */
  countBlock(r: number, len: number): void {
    this.hitPackets[r]!++;
    this.hitBytes[r]! += len;
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
