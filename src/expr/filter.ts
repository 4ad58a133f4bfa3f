// The public pipeline: parse → check → compile, and the compiled Filter.

import { MoatError } from '../errors/index.js';
import type { ListProvider } from './checked.js';
import { check } from './checker.js';
import { compileGenerated } from './codegen.js';
import { compileChecked, type Predicate } from './compiler.js';
import type { ExecutionContext } from './context.js';
import { DEFAULT_LIMITS, type Limits } from './limits.js';
import { parse } from './parser.js';
import type { Scheme } from './scheme.js';

/** Options shared by checking and compiling. */
export interface ExpressionOptions {
  scheme: Scheme;
  /** Lists by canonical name (`svc.malware`, `office_blocklist`). */
  lists?: ListProvider | undefined;
  limits?: Partial<Limits> | undefined;
  /** How to run: a closure tree (default) or generated code. Both give the same answers. */
  backend?: 'closures' | 'codegen' | undefined;
}

/** The outcome of checking an expression. */
export interface CheckReport {
  readonly ok: boolean;
  readonly errors: MoatError[];
  /** Field names the expression reads, sorted. */
  readonly fields: string[];
  /** Canonical list names it reads, sorted. */
  readonly lists: string[];
}

/** A compiled expression. `execute` allocates nothing (except `matches` on raw bytes). */
export class Filter {
  constructor(
    readonly source: string,
    readonly scheme: Scheme,
    /** Field names the expression reads: the decoder may skip every other field. */
    readonly fields: readonly string[],
    /** Canonical list names the expression reads. */
    readonly lists: readonly string[],
    private readonly predicate: Predicate,
  ) {
    Object.freeze(this);
  }

  /** Evaluates the filter against one packet's context. */
  execute(ctx: ExecutionContext): boolean {
    return this.predicate(ctx);
  }

  /** The bare predicate, for callers that evaluate many filters in a loop. */
  get test(): Predicate {
    return this.predicate;
  }
}

const NO_LISTS: ListProvider = { has: () => false, get: () => undefined };

function limitsOf(o: ExpressionOptions): Limits {
  return { ...DEFAULT_LIMITS, ...(o.limits ?? {}) };
}

/** Checks an expression; never throws on bad input. */
export function checkExpression(source: string, options: ExpressionOptions): CheckReport {
  try {
    const ast = parse(source, limitsOf(options));
    const r = check(ast, options.scheme, { lists: options.lists });
    return { ok: r.errors.length === 0, errors: r.errors, fields: r.fields, lists: r.lists };
  } catch (err) {
    if (err instanceof MoatError) return { ok: false, errors: [err], fields: [], lists: [] };
    throw err;
  }
}

/** Parses, checks and compiles; throws the first MoatError of a bad expression. */
export function compileExpression(source: string, options: ExpressionOptions): Filter {
  const ast = parse(source, limitsOf(options));
  // A filter that runs must have every list it names: without a provider, only
  // the managed lists (compiled as empty) are known.
  const r = check(ast, options.scheme, { lists: options.lists ?? NO_LISTS });
  if (r.tree === null) throw r.errors[0]!;
  const predicate = options.backend === 'codegen' ? compileGenerated(r.tree, options.lists) : compileChecked(r.tree, options.lists);
  return new Filter(source, options.scheme, Object.freeze(r.fields), Object.freeze(r.lists), predicate);
}
