// A bundle loaded in one thread and run in another: the daemon's loader runs
// in a worker thread (reading, parsing, checking, compiling, building the
// address table) and hands the packet loop plain data, which crosses by
// structured clone, the table's arrays by transfer (moved, not copied). The
// packet loop only makes the generated functions and wraps the arrays, so a
// swap costs it milliseconds where loading costs hundreds (bench/swap.bench.ts).
//
// Errors cross as data too and are made again as the same BundleError and
// MoatError (codes, messages, pointers, spans, files) as loading in thread gives.

import { MoatError, type ErrorName, type Span } from '../errors/index.js';
import { check, DEFAULT_LIMITS, makeConstant, parse, type Checked, type Limits } from '../expr/index.js';
import { TRANSIT_SCHEME } from '../packet/index.js';
import { AddressTable, type TableParts } from '../table/index.js';
import type { BundleCode } from './code-writer.js';
import { BundleError, evaluatorOf, type ConstantRecipe } from './compile-bundle.js';
import type { CompiledRule } from './evaluator.js';
import { geoScreenQuestions } from './lazy-lookups.js';
import { BundleLoader, type BundleFiles, type LoadedBundle } from './load.js';
import type { Ruleset } from './ruleset.js';
import { tableLists } from './table-lists.js';

/** A MoatError as data. */
export interface MoatErrorData {
  readonly name: ErrorName;
  readonly message: string;
  readonly span?: Span | undefined;
  readonly pointer?: string | undefined;
  readonly hint?: string | undefined;
  readonly file?: string | undefined;
  readonly line?: number | undefined;
  readonly chain?: readonly MoatErrorData[] | undefined;
}

/** A failed load as data: a MoatError, a BundleError, or anything else (a bug). */
export type LoadErrorData =
  | { readonly kind: 'moat'; readonly error: MoatErrorData }
  | { readonly kind: 'bundle'; readonly message: string; readonly errors: readonly MoatErrorData[] }
  | { readonly kind: 'other'; readonly message: string; readonly stack?: string | undefined };

/** A loaded bundle as the worker hands it over (see BundleExporter, BundleImporter). */
export interface TransferredBundle {
  readonly rulesets: readonly Ruleset[];
  readonly digest: string;
  readonly tableReused: boolean;
  /** The exporter's number for the table: a reused table is not sent again, the importer keeps it by this number. */
  readonly tableId: number;
  /** The new table's arrays (their buffers transferred); null when the table is the previous one (tableReused). */
  readonly table: TableParts | null;
  /** The new table has the previous one's GeoIP data: the previous one's value screens hold for it. */
  readonly sameGeoIp: boolean;
  /** Value screens (AddressTable.valueScreens) the bundle's rules need that were not sent before for this GeoIP data. */
  readonly screens: ReadonlyArray<readonly [string, Uint32Array]>;
  readonly rules: readonly CompiledRule[];
  readonly code: BundleCode;
  /** The pool's constants; null where a recipe makes the constant (not plain data). */
  readonly constants: readonly unknown[];
  readonly recipes: readonly ConstantRecipe[];
  readonly warmUpFrames: readonly Uint8Array[];
  readonly missing: readonly MoatErrorData[];
}

function moatErrorData(e: MoatError): MoatErrorData {
  return {
    name: e.errorName, message: e.message, span: e.span, pointer: e.pointer, hint: e.hint, file: e.file, line: e.line,
    chain: e.chain?.map(moatErrorData),
  };
}

function moatErrorOf(d: MoatErrorData): MoatError {
  return new MoatError(d.name, d.message, { span: d.span, pointer: d.pointer, hint: d.hint, file: d.file, line: d.line, chain: d.chain?.map(moatErrorOf) });
}

/** A load's error as data (what loadErrorOf makes again). */
export function loadErrorData(err: unknown): LoadErrorData {
  if (err instanceof BundleError) return { kind: 'bundle', message: err.message, errors: err.errors.map(moatErrorData) };
  if (err instanceof MoatError) return { kind: 'moat', error: moatErrorData(err) };
  return { kind: 'other', message: err instanceof Error ? err.message : String(err), stack: err instanceof Error ? err.stack : undefined };
}

/** The error loadErrorData described: a BundleError, a MoatError, or an Error with the message. */
export function loadErrorOf(d: LoadErrorData): Error {
  if (d.kind === 'bundle') {
    const e = new BundleError(d.errors.map(moatErrorOf));
    e.message = d.message; // as it was made, before the loader located its errors in their files
    return e;
  }
  if (d.kind === 'moat') return moatErrorOf(d.error);
  const e = new Error(d.message);
  if (d.stack !== undefined) e.stack = d.stack;
  return e;
}

/**
 * The worker's side: a BundleLoader (which keeps an unchanged table, see
 * load.ts) whose bundles leave as TransferredBundle. A table leaves once: its
 * buffers are transferred, so the loader's copy is left without its arrays,
 * which it never reads again (a reused table serves the compiler only its
 * list names). Value screens are built from a table of the GeoIP data alone
 * (BundleLoader.geoOnlyTable), which stays here.
 */
export class BundleExporter {
  readonly loader: BundleLoader;
  private table: AddressTable | undefined;
  private tableId = 0;
  private geoKey: string | undefined;
  /** Value screens sent for the current GeoIP data. */
  private sent = new Set<string>();

  constructor(loader = new BundleLoader()) {
    this.loader = loader;
  }

  /** Loads `files`; returns the bundle as data and the buffers to transfer with it. Throws as BundleLoader.load. */
  load(files: BundleFiles): { bundle: TransferredBundle; transfer: ArrayBuffer[] } {
    const b = this.loader.load(files);
    const transfer = new Set<ArrayBuffer>();
    const fresh = b.table !== this.table;
    const geoKey = this.loader.geoIpKey;
    const sameGeoIp = geoKey === this.geoKey;
    if (!sameGeoIp) this.sent = new Set();
    let table: TableParts | null = null;
    if (fresh) {
      table = b.table.parts;
      for (const v of Object.values(table)) if (ArrayBuffer.isView(v)) transfer.add(v.buffer as ArrayBuffer);
    }
    // The screens the packet paths will ask for, built here (~20 ms each) rather than on the packet loop.
    const screens: Array<readonly [string, Uint32Array]> = [];
    const geo = this.loader.geoOnlyTable();
    if (geo !== undefined) {
      for (const q of geoScreenQuestions(b.evaluator, b.table.countryCodes)) if (q !== null) geo.valueScreen(q.family, q.countries, q.asns);
      for (const [memo, screen] of geo.valueScreens) {
        if (this.sent.has(memo)) continue;
        this.sent.add(memo);
        screens.push([memo, screen]); // copied: this table keeps its screens for the next tables
      }
    }
    const compiled = b.evaluator.compiled;
    if (compiled === undefined) throw new Error('BundleExporter: the evaluator has no compiled code');
    const holes = new Set(compiled.recipes.map((r) => r.index));
    // The warm-up frames in one buffer: one transfer and one backing store on the packet loop's side, not ~400.
    const packed = new Uint8Array(b.evaluator.warmUpFrames.reduce((n, f) => n + f.length, 0));
    let at = 0;
    const frames = b.evaluator.warmUpFrames.map((f) => {
      packed.set(f, at);
      at += f.length;
      return packed.subarray(at - f.length, at);
    });
    transfer.add(packed.buffer);
    const bundle: TransferredBundle = {
      rulesets: b.rulesets,
      digest: b.digest,
      tableReused: b.tableReused,
      tableId: fresh ? ++this.tableId : this.tableId,
      table,
      sameGeoIp,
      screens,
      rules: b.evaluator.rules,
      code: compiled.code,
      constants: compiled.constants.map((c, i) => (holes.has(i) ? null : c)),
      recipes: compiled.recipes,
      warmUpFrames: frames,
      missing: b.missing.map(moatErrorData),
    };
    // Committed once the whole bundle is ready to leave.
    this.table = b.table;
    this.geoKey = geoKey;
    return { bundle, transfer: [...transfer] };
  }
}

/** Limits for checking again what a load already accepted (its own limits applied then). */
const NO_LIMITS: Limits = { ...DEFAULT_LIMITS, maxLength: Number.MAX_SAFE_INTEGER, maxDepth: Number.MAX_SAFE_INTEGER };

/**
 * The packet loop's side: makes a TransferredBundle a LoadedBundle again,
 * keeping the last table (a reused table is not sent again). What it does
 * is what a swap costs the packet loop besides the packet path: wrap the
 * table's arrays, make the constants that are not plain data (their rules
 * checked again), and make the generated functions. import() does it in one
 * go; importSliced() in slices between which the packet loop runs (a bundle
 * with many such constants re-checks one rule each, ~0.1-0.5 ms apiece).
 */
export class BundleImporter {
  private table: AddressTable | undefined;
  private tableId = -1;
  /**
   * What the last import cost this thread (ms): wrapping the table, making the
   * constants again, making the functions; and in how many slices, the longest
   * of them (what the packet loop waited for at most).
   */
  lastTimings = { tableMs: 0, constantsMs: 0, functionsMs: 0, slices: 1, longestSliceMs: 0 };

  /** The bundle `b` describes. Throws on a bundle whose reused table this importer never received (a bug). */
  import(b: TransferredBundle): LoadedBundle {
    const t0 = performance.now();
    const steps = this.steps(b);
    let r = steps.next();
    while (r.done !== true) r = steps.next();
    this.lastTimings.longestSliceMs = performance.now() - t0;
    return r.value;
  }

  /**
   * As import(), in slices of about `sliceMs` (a step is not cut: wrapping
   * the table, one constant's rule, the functions), awaiting `turn()` (the
   * next turn of the event loop) between two. Nothing of the bundle is seen
   * before it resolves, and the importer's table is committed only then: the
   * caller imports one bundle at a time (WorkerLoading chains them).
   */
  async importSliced(b: TransferredBundle, sliceMs: number, turn: () => Promise<void>): Promise<LoadedBundle> {
    const steps = this.steps(b);
    let slices = 1;
    let longest = 0;
    let start = performance.now();
    for (;;) {
      const r = steps.next();
      const now = performance.now();
      if (r.done === true) {
        this.lastTimings.slices = slices;
        this.lastTimings.longestSliceMs = Math.max(longest, now - start);
        return r.value;
      }
      if (now - start < sliceMs) continue;
      longest = Math.max(longest, now - start);
      await turn();
      slices++;
      start = performance.now();
    }
  }

  // The import's steps: each yield is a point where the packet loop may run.
  private *steps(b: TransferredBundle): Generator<void, LoadedBundle> {
    const timings = { tableMs: 0, constantsMs: 0, functionsMs: 0, slices: 1, longestSliceMs: 0 };
    const t0 = performance.now();
    let table: AddressTable;
    if (b.table === null) {
      if (this.table === undefined || b.tableId !== this.tableId) throw new Error(`BundleImporter: bundle reuses table ${b.tableId}, which was not received`);
      table = this.table;
    } else {
      table = AddressTable.fromParts(b.table);
      if (b.sameGeoIp && this.table !== undefined) table.shareValueScreens(this.table);
    }
    table.adoptValueScreens(b.screens);
    const lists = tableLists(table);
    timings.tableMs = performance.now() - t0;
    yield;
    const constants = [...b.constants];
    const trees = new Map<number, Checked>();
    for (const r of b.recipes) {
      const t = performance.now();
      let tree = trees.get(r.rule);
      if (tree === undefined) {
        const checked = check(parse(b.rules[r.rule]!.rule.expression, NO_LIMITS), TRANSIT_SCHEME, { lists });
        if (checked.tree === null || checked.errors.length > 0) throw new Error(`BundleImporter: rule ${r.rule} no longer checks: ${checked.errors[0]?.message ?? 'no tree'}`);
        tree = checked.tree;
        trees.set(r.rule, tree);
      }
      let node = tree;
      for (const k of r.path) node = node.kind === 'not' ? node.operand : (node as Extract<Checked, { items: unknown }>).items[k]!;
      constants[r.index] = makeConstant({ node, make: r.make }, lists);
      timings.constantsMs += performance.now() - t;
      yield;
    }
    const t2 = performance.now();
    const evaluator = evaluatorOf(b.rules, { code: b.code, constants, recipes: b.recipes }, b.warmUpFrames);
    timings.functionsMs = performance.now() - t2;
    this.lastTimings = timings;
    this.table = table;
    this.tableId = b.tableId;
    return { evaluator, table, rulesets: b.rulesets, digest: b.digest, tableReused: b.tableReused, missing: b.missing.map(moatErrorOf) };
  }
}

/** A copy of `a` over a SharedArrayBuffer (`a` itself when it is over one already). */
function shared<T extends Uint16Array | Uint32Array | Int32Array | Int16Array | Float64Array>(a: T): T {
  if (a.buffer instanceof SharedArrayBuffer) return a;
  const Ctor = a.constructor as new (b: SharedArrayBuffer) => T;
  const out = new Ctor(new SharedArrayBuffer(a.byteLength));
  out.set(a as never);
  return out;
}

/**
 * `b` with its address table's arrays and value screens over
 * SharedArrayBuffers, so that every packet worker given it (structured clone
 * shares, not copies, a SharedArrayBuffer) looks addresses up in the same
 * memory: the table's bytes are in the process once, whatever the number of
 * workers (daemon/packet-workers.ts). The arrays are copied once here; arrays
 * already shared are kept. The rest of the bundle (rules, code, warm-up
 * frames) is small and each worker makes its own functions from it.
 */
export function shareBundle(b: TransferredBundle): TransferredBundle {
  const t = b.table;
  const table: TableParts | null = t === null ? null : {
    ...t,
    seg4: shared(t.seg4), index4: shared(t.index4), rec4: shared(t.rec4), country4: shared(t.country4), asn4: shared(t.asn4), lists4: shared(t.lists4),
    starts6: shared(t.starts6), index6: shared(t.index6), record6: shared(t.record6), country6: shared(t.country6), asn6: shared(t.asn6), lists6: shared(t.lists6), rec6: shared(t.rec6),
    listScreen4: t.listScreen4 === null ? null : shared(t.listScreen4),
    listScreen6: t.listScreen6 === null ? null : shared(t.listScreen6),
  };
  return { ...b, table, screens: b.screens.map(([memo, s]) => [memo, shared(s)] as const) };
}

/** Bytes of a table's arrays, and whether every one of them is over a SharedArrayBuffer. */
export function tableIsShared(parts: TableParts): { shared: boolean; bytes: number } {
  let all = true;
  let bytes = 0;
  for (const v of Object.values(parts)) {
    if (!ArrayBuffer.isView(v)) continue;
    bytes += v.byteLength;
    if (!(v.buffer instanceof SharedArrayBuffer)) all = false;
  }
  return { shared: all, bytes };
}
