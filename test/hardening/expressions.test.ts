// Issue #16 item 12, expressions: the fuzzing of the rules language as
// fast-check properties with a fixed time budget each (they run until the
// budget is spent, not for a number of inputs). Mutated conformance cases,
// token soup, deep nesting, inputs at the length limit and arbitrary Unicode
// (lone surrogates included) must give coded errors with a span inside the
// source, or a filter; never another exception, never a hang. Both compiler
// back ends (closures, generated code) must agree on what compiles and on
// every answer over decoded frames, and checkExpression must agree with them.
// The seed is printed: MOAT_FUZZ_SEED replays a run.
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { ERRORS, MoatError } from '../../src/errors/index.js';
import { checkExpression, compileExpression, DEFAULT_LIMITS, renderError, type ExecutionContext, type Filter } from '../../src/expr/index.js';
import { IpRangeSet } from '../../src/net/index.js';
import { clearDecoded, decode, FULL_PLAN, LINKTYPE, PacketInfo, TRANSIT_SCHEME } from '../../src/packet/index.js';
import { CASES, DEFAULT_LISTS } from '../expr/cases.js';
import { generateCases, generatePackets, Rng } from '../support/diff-generator.js';
import { frameVariants } from '../support/frame-variants.js';
import { seedFrom } from '../support/random.js';

const SEED = seedFrom('MOAT_FUZZ_SEED');
/** Time each property runs for. */
const BUDGET_MS = Number(process.env['MOAT_FUZZ_MS'] ?? 4000);
/**
 * Most a check and two compilations of one expression (at most 4,096
 * characters) may take, at best of three tries: one slow try is a pause of the
 * shared machine (a GC, another process), three are the input's cost.
 */
const SLOW_MS = 1000;

const LISTS = new Map(Object.entries(DEFAULT_LISTS).map(([name, entries]) => [name, IpRangeSet.fromStrings(entries)] as const));
const CODES = new Set(Object.values(ERRORS).map((d) => d.code));

const CORPUS = [
  ...new Set(CASES.map((c) => c.expr)),
  'tcp.dstport in {80 443 8000..8080} and not tcp.flags.syn',
  'ip.src in {10.0.0.0/8 2001:db8::/32 192.0.2.1..192.0.2.9} or ip.dst == ::ffff:1.2.3.4',
  'ip.proto == "tcp" && !(ip.ttl le 0x40) ^^ ip.geoip.country in {"US" "GB"}',
  'bit_slice("udp", 64, 72) == 0x45 and udp contains 01:02:03 and ip.proto matches r#"^t.p$"#',
  'cf.colo.name == "sfo06" and ip.hdr_len > 5 and ip.opt.type == 0130 and sip',
  '((((tcp.dstport == 22))))\r\nand\nnot not tcp.flags.ack',
];

// Pieces that matter to the grammar, plus hostile ones.
const ALPHABET = [
  ...'(){}[]$"\\#&|^!=<>~,.:/-_ \r\n\trx0123456789abcdefABCDEF',
  'and', 'or', 'xor', 'not', 'in', 'eq', 'ne', 'lt', 'le', 'gt', 'ge', 'contains', 'matches', 'wildcard', 'strict wildcard',
  '..', '::', '/33', '"', 'r#"', '"#', '\u0000', '\u00e9', '\ud83d', '\ude00', '\u2028', '\ufeff',
  'tcp.dstport', 'ip.src', 'ip.dst.country', 'ip.len', 'tcp.flags', 'udp', 'icmp.type', 'sip', 'ip.proto', 'lower(', 'any(', 'all(', 'len(',
  'bit_slice(', 'ip.src.asnum', '$office', '$cf.malware', '{', '}', ' ', '0x', '999999999999999999999', '-1', '1.2.3.4', '::1', '10.0.0.0/8',
];
const TOKENS = ALPHABET.filter((t) => t.length > 1 || /[(){}$"=<>!&|^~]/.test(t));

// ---------------------------------------------------------------- inputs

const edit = fc.record({ kind: fc.integer({ min: 0, max: 4 }), at: fc.nat(), to: fc.nat(), piece: fc.constantFrom(...ALPHABET) });

function applyEdits(s: string, edits: ReadonlyArray<{ kind: number; at: number; to: number; piece: string }>): string {
  for (const e of edits) {
    const i = e.at % (s.length + 1);
    const j = e.to % (s.length + 1);
    if (e.kind === 0) s = s.slice(0, i) + s.slice(i + 1 + (j % 6));
    else if (e.kind === 1) s = s.slice(0, i) + e.piece + s.slice(i);
    else if (e.kind === 2) s = s.slice(0, i) + s.slice(Math.min(i, j), Math.max(i, j)) + s.slice(i);
    else if (e.kind === 3) s = s.slice(0, i) + e.piece + s.slice(i + 1);
    else s = s.slice(0, i);
  }
  return s;
}

// Valid expressions over every field (the tshark differential's generator), some lightly edited.
const genRng = new Rng(SEED ^ 0x16);
const GENERATED = generateCases(genRng.fork(), generatePackets(genRng.fork(), 200).map((p) => p.fields), 400).cases.map((c) => c.cf);
const generated = fc.tuple(fc.constantFrom(...GENERATED), fc.array(edit, { maxLength: 2 })).map(([s, edits]) => applyEdits(s, edits));
const mutated = fc.tuple(fc.constantFrom(...CORPUS), fc.array(edit, { minLength: 1, maxLength: 5 })).map(([s, edits]) => applyEdits(s, edits));
const soup = fc.array(fc.constantFrom(...TOKENS), { maxLength: 40 }).chain((ts) => fc.constantFrom(' ', '').map((sep) => ts.join(sep)));
const anyChar = fc.oneof(
  fc.constantFrom(...ALPHABET),
  fc.integer({ min: 0, max: 0x10ffff }).map((cp) => String.fromCodePoint(cp)),
  fc.integer({ min: 0xd800, max: 0xdfff }).map((u) => String.fromCharCode(u)),
);
const unicode = fc.array(anyChar, { maxLength: 60 }).map((cs) => cs.join(''));
// Nesting around the depth limit (128) in the forms the parser, checker and compilers recurse on.
const FORMS: ReadonlyArray<readonly [string, string, string]> = [
  ['(', 'tcp.dstport == 22', ')'], ['not ', 'tcp.flags.syn', ''], ['!(', 'tcp.flags.ack', ')'],
  ['(tcp.flags.syn or ', 'tcp.flags.ack', ')'], ['(ip.len > 3 and ', 'udp.dstport in {53 123}', ')'], ['lower(', 'ip.dst.country', ')'],
];
const deep = fc.tuple(fc.constantFrom(...FORMS), fc.integer({ min: 100, max: 200 })).map(([[open, mid, close], n]) => open.repeat(n) + mid + close.repeat(n));
// Around the length limit (4,096 characters).
const long = fc.tuple(fc.constantFrom(...CORPUS.filter((c) => c.length > 0)), fc.integer({ min: DEFAULT_LIMITS.maxLength - 40, max: DEFAULT_LIMITS.maxLength + 40 }), fc.constantFrom(' or ', ' and ', ''))
  .map(([s, n, join]) => {
    let out = s;
    while (out.length < n) out += join + s;
    return out.slice(0, n);
  });

// ---------------------------------------------------------------- contexts the filters run on

/** Decoded contexts: an empty one and generated frames of every kind (VLAN, fragments, extension headers, cuts). */
function contexts(): ExecutionContext[] {
  const rng = new Rng(SEED);
  const variants = frameVariants(rng);
  const out = [TRANSIT_SCHEME.newContext()];
  for (let i = 0; i < 24; i++) {
    const f = rng.pick(variants);
    const ctx = TRANSIT_SCHEME.newContext();
    const info = new PacketInfo();
    clearDecoded(ctx, info);
    decode(f, 0, f.length, LINKTYPE.ETHERNET, ctx, info, FULL_PLAN);
    out.push(ctx);
  }
  return out;
}

// ---------------------------------------------------------------- the property

interface Tally {
  inputs: number;
  compiled: number;
  refused: number;
  crashes: string[];
  wrong: string[];
  slowestMs: number;
}

const tallies: Record<string, Tally> = {};
const CONTEXTS = contexts();

function compileBoth(src: string): { closures: Filter | MoatError; codegen: Filter | MoatError } {
  const one = (backend: 'closures' | 'codegen'): Filter | MoatError => {
    try {
      return compileExpression(src, { scheme: TRANSIT_SCHEME, lists: LISTS, backend });
    } catch (err) {
      if (err instanceof MoatError) return err;
      throw err;
    }
  };
  return { closures: one('closures'), codegen: one('codegen') };
}

/** One expression: true when everything held; what did not is in the tally. */
function probe(src: string, t: Tally): boolean {
  t.inputs++;
  const shown = JSON.stringify(src.length > 200 ? src.slice(0, 200) + '…' : src);
  const wrong = (why: string): false => {
    t.wrong.push(`${shown}: ${why}`);
    return false;
  };
  let report;
  let both;
  let ms = Infinity;
  try {
    for (let tries = 0; tries < 3 && ms > SLOW_MS; tries++) {
      const started = performance.now();
      report = checkExpression(src, { scheme: TRANSIT_SCHEME, lists: LISTS });
      both = compileBoth(src);
      ms = Math.min(ms, performance.now() - started);
    }
  } catch (err) {
    t.crashes.push(`${shown}: ${(err as Error).stack ?? String(err)}`);
    return false;
  }
  if (report === undefined || both === undefined) return false;
  t.slowestMs = Math.max(t.slowestMs, ms);
  if (ms > SLOW_MS) return wrong(`took ${ms.toFixed(0)} ms`);
  for (const e of report.errors) {
    if (!(e instanceof MoatError) || !CODES.has(e.code) || e.code < 1000 || e.code >= 3000) return wrong(`checkExpression gave ${String(e)}, not an expression error of the registry`);
    if (e.span === undefined || e.span.start < 0 || e.span.end < e.span.start || e.span.end > src.length + 1) return wrong(`error ${e.code} has span ${JSON.stringify(e.span)}`);
    if (typeof renderError(src, e) !== 'string') return wrong('renderError failed');
  }
  const { closures, codegen } = both;
  if (closures instanceof MoatError || codegen instanceof MoatError) {
    t.refused++;
    if (!(closures instanceof MoatError && codegen instanceof MoatError) || closures.code !== codegen.code) {
      return wrong(`the back ends disagree: closures ${closures instanceof MoatError ? closures.code : 'compile'}, codegen ${codegen instanceof MoatError ? codegen.code : 'compile'}`);
    }
    if (!CODES.has(closures.code) || closures.code < 1000 || closures.code >= 3000) return wrong(`compileExpression threw ${closures.code}, not an expression error`);
    if (report.ok) return wrong(`checkExpression says ok, compileExpression refuses with ${closures.code}`);
    return true;
  }
  t.compiled++;
  if (!report.ok) return wrong(`compileExpression compiles what checkExpression refuses (${report.errors[0]?.code})`);
  for (const [i, ctx] of CONTEXTS.entries()) {
    let a;
    let b;
    try {
      a = closures.execute(ctx);
      b = codegen.execute(ctx);
    } catch (err) {
      t.crashes.push(`${shown} on context ${i}: ${(err as Error).stack ?? String(err)}`);
      return false;
    }
    if (a !== b) return wrong(`on context ${i}: closures say ${a}, generated code ${b}`);
  }
  return true;
}

function budgeted(name: string, arb: fc.Arbitrary<string>, seedOffset: number, compiles = false): void {
  it(`${name}: a coded error or a filter the back ends agree on, within ${SLOW_MS} ms each (seed ${SEED}, ${BUDGET_MS} ms)`, () => {
    const t: Tally = (tallies[name] = { inputs: 0, compiled: 0, refused: 0, crashes: [], wrong: [], slowestMs: 0 });
    const run = fc.check(fc.property(arb, (src) => probe(src, t)), { seed: (SEED + seedOffset) | 0, numRuns: Number.MAX_SAFE_INTEGER, interruptAfterTimeLimit: BUDGET_MS, endOnFailure: true });
    // What went wrong, then fast-check's report (its seed and path replay the input).
    expect(t.crashes.slice(0, 3)).toEqual([]);
    expect(t.wrong.slice(0, 5)).toEqual([]);
    expect(run.failed, fc.defaultReportMessage(run) ?? '').toBe(false);
    // The budget was spent on inputs, and they reach both sides.
    expect(t.inputs).toBeGreaterThan(100);
    expect(t.refused).toBeGreaterThan(0);
    if (compiles) expect(t.compiled).toBeGreaterThan(t.inputs / 4);
  }, BUDGET_MS + 30_000);
}

describe('fuzzing the rules language with a time budget', () => {
  budgeted('generated valid expressions, some edited', generated, 4, true);
  budgeted('mutated conformance cases', mutated, 0);
  budgeted('token soup', soup, 1);
  budgeted('arbitrary Unicode', unicode, 2);
  budgeted('nesting around the depth limit and length around the length limit', fc.oneof(deep, long), 3);

  afterAll(() => {
    const all = Object.values(tallies);
    const sum = (f: (t: Tally) => number): number => all.reduce((n, t) => n + f(t), 0);
    console.log(
      `expressions: ${sum((t) => t.inputs)} inputs (${Object.entries(tallies).map(([k, t]) => `${k} ${t.inputs}`).join(', ')}); ` +
        `${sum((t) => t.compiled)} compiled and run on ${CONTEXTS.length} contexts by both back ends, ${sum((t) => t.refused)} coded errors; ` +
        `crashes ${sum((t) => t.crashes.length)}, hangs ${all.filter((t) => t.slowestMs > SLOW_MS).length} (slowest ${Math.max(...all.map((t) => t.slowestMs)).toFixed(1)} ms), wrong answers ${sum((t) => t.wrong.length)}`,
    );
  });

  it('handles pathological inputs within the limits quickly', () => {
    const t: Tally = { inputs: 0, compiled: 0, refused: 0, crashes: [], wrong: [], slowestMs: 0 };
    for (const src of [
      '('.repeat(4096),
      '!'.repeat(4096),
      'a or '.repeat(819),
      '"'.repeat(4096),
      '{'.repeat(4096),
      'tcp.dstport in {' + '1 '.repeat(2040) + '}',
      'r' + '#'.repeat(300) + '"x"',
      'ip.src in {' + '::1 '.repeat(1000) + '}',
      '$'.repeat(4096),
      '\\'.repeat(4096),
    ]) {
      probe(src, t);
    }
    expect(t.crashes).toEqual([]);
    expect(t.wrong).toEqual([]);
    expect(t.inputs).toBe(10);
  });
});
