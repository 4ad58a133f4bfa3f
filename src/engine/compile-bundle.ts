// The compile front end: a bundle's rulesets (the account-level
// network_transit entrypoint, optionally the zone-level one, and the lists
// they use) parsed, checked and expanded (managed rulesets) into rules in
// evaluation order, every error located at its rule, then written as code.
//
// Semantics: account rules first, then zone rules; in a ruleset, rules in
// order; disabled rules are passed over; the first matching block drops the
// packet; skip ends the current ruleset; log counts and records and goes on.

import { MoatError } from '../errors/index.js';
import { check, DEFAULT_LIMITS, parse, type Checked, type ConstantOrigin, type Limits, type ListProvider } from '../expr/index.js';
import { TRANSIT_SCHEME } from '../packet/index.js';
import { linkBundle, MAX_FUNCTION_SOURCE, writeBundle, type BundleCode, type LevelSpan } from './code-writer.js';
import { Evaluator, newCounters, type CompiledRule, type Level } from './evaluator.js';
import { expandExecutes, type ManagedRulesets } from './managed.js';
import type { Ruleset } from './ruleset.js';
import { warmUpFrames } from './warm-up.js';

/** The rulesets and lists compileBundle compiles into one evaluator. */
export interface CompileInput {
  account?: Ruleset | undefined;
  zone?: Ruleset | undefined;
  /** Lists by canonical name (`svc.malware`, `office_blocklist`). Managed lists not given are empty. */
  lists?: ListProvider | undefined;
  limits?: Partial<Limits> | undefined;
  /** Managed rulesets that execute rules run in place, by id. */
  managed?: ManagedRulesets | undefined;
}

/** A bundle that did not compile: every error found, each naming its rule. */
export class BundleError extends Error {
  constructor(readonly errors: readonly MoatError[]) {
    super(`the ruleset bundle has ${errors.length} error${errors.length === 1 ? '' : 's'}:\n${errors.map((e) => '  ' + e.message).join('\n')}`);
    this.name = 'BundleError';
  }
}

const NO_LISTS: ListProvider = { has: () => false, get: () => undefined };

/** Compiles a bundle; throws BundleError listing every bad rule, so nothing half-compiled is ever used. */
export function compileBundle(input: CompileInput, codegen: { maxFunctionSource?: number } = {}): Evaluator {
  const limits = { ...DEFAULT_LIMITS, ...(input.limits ?? {}) };
  const lists: ListProvider = input.lists ?? NO_LISTS;
  const errors: MoatError[] = [];
  const rules: CompiledRule[] = [];
  const trees: Array<Checked | null> = [];
  const levels: Array<LevelSpan & { level: Level }> = [];
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

  const enabledTrees = rules.map((r, i) => (r.rule.enabled ? trees[i]! : null));
  const { code, pool } = writeBundle(rules, enabledTrees, levels, lists, codegen.maxFunctionSource ?? MAX_FUNCTION_SOURCE);
  const recipes = [...pool.origins].map(([index, origin]) => recipeOf(index, origin, enabledTrees));
  return evaluatorOf(Object.freeze(rules), { code, constants: pool.values, recipes }, Object.freeze(warmUpFrames(enabledTrees)));
}

/**
 * Where a constant that is not plain data (ConstantPool.origins) comes from:
 * the node of rule `rule`'s checked tree at `path` (the index of an item of
 * `and`/`or`/`xor` at each step, 0 for the operand of `not`), made as `make`.
 * Checking the rule's expression again gives the same tree, so the constant
 * can be made again in another thread (see bundle-transfer.ts).
 */
export interface ConstantRecipe {
  readonly index: number;
  readonly rule: number;
  readonly path: readonly number[];
  readonly make: ConstantOrigin['make'];
}

/** A compiled bundle's code: the sources and layout, the constants they read, and the recipes of the constants that are not plain data. */
export interface CompiledCode {
  readonly code: BundleCode;
  readonly constants: readonly unknown[];
  readonly recipes: readonly ConstantRecipe[];
}

/** The Evaluator of compiled code: new counters, the functions made over them (linkBundle). */
export function evaluatorOf(rules: readonly CompiledRule[], compiled: CompiledCode, frames: readonly Uint8Array[]): Evaluator {
  const counters = newCounters(rules.length, rules.filter((r) => r.rule.action === 'log').length);
  const { code } = compiled;
  const { run, program } = linkBundle(code, compiled.constants, counters);
  return new Evaluator({
    rules,
    run,
    functions: code.functions,
    counters,
    bytesRead: code.bytesRead,
    portRuns: code.portRuns,
    lazyValues: code.lazyValues,
    program,
    warmUpFrames: frames,
    sources: Object.freeze(code.sources),
    compiled,
  });
}

// The recipe of constant `index`, made from `origin.node`: found by identity in the rules' trees.
function recipeOf(index: number, origin: ConstantOrigin, trees: ReadonlyArray<Checked | null>): ConstantRecipe {
  const find = (t: Checked, path: number[]): number[] | null => {
    if (t === origin.node) return path;
    if (t.kind === 'not') return find(t.operand, [...path, 0]);
    if (t.kind === 'and' || t.kind === 'or' || t.kind === 'xor') {
      for (let i = 0; i < t.items.length; i++) {
        const p = find(t.items[i]!, [...path, i]);
        if (p !== null) return p;
      }
    }
    return null;
  };
  for (let rule = 0; rule < trees.length; rule++) {
    const path = trees[rule] === null ? null : find(trees[rule]!, []);
    if (path !== null) return { index, rule, path, make: origin.make };
  }
  throw new Error(`compileBundle: constant ${index} comes from no rule's tree`);
}

function locate(e: MoatError, where: string, pointer: string): MoatError {
  // Keep the expression's own code, message and span; say which rule it is.
  e.message = `${where}: ${e.message}`;
  e.pointer = pointer;
  return e;
}
