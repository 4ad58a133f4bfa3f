// Runs the hand-written conformance table (cases.ts) through the public API of the rules-language
// engine: compileExpression / checkExpression, TRANSIT_SCHEME.newContext() and its setters.
import { describe, it, expect } from 'vitest';
import { compileExpression, checkExpression, type ExpressionOptions } from '../../src/expr/index.js';
import { TRANSIT_SCHEME } from '../../src/packet/index.js';
import { MoatError } from '../../src/errors/index.js';
import { IpRangeSet } from '../../src/net/index.js';
import { CASES, DEFAULT_LISTS, type Case, type ErrorCase, type FieldValue, type Lists, type Packet, type RunsCase } from './cases.js';

const RAW_FIELDS = new Set(['ip', 'tcp', 'udp', 'icmp']);

function hexToBytes(hex: string): Uint8Array {
  if (hex.length % 2 !== 0 || /[^0-9a-fA-F]/.test(hex)) throw new Error(`bad hex in test table: ${hex}`);
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function listMap(lists: Lists): Map<string, IpRangeSet> {
  return new Map(Object.entries(lists).map(([name, entries]) => [name, IpRangeSet.fromStrings(entries)] as const));
}
const DEFAULT_LIST_MAP = listMap(DEFAULT_LISTS);

function optionsFor(c: Case): ExpressionOptions {
  if (c.lists === 'none') return { scheme: TRANSIT_SCHEME };
  return { scheme: TRANSIT_SCHEME, lists: c.lists === undefined ? DEFAULT_LIST_MAP : listMap(c.lists) };
}

// One context for the whole file, reset before every packet, as the engine's users do.
const ctx = TRANSIT_SCHEME.newContext();

function load(packet: Packet): void {
  ctx.reset();
  for (const [name, value] of Object.entries(packet)) setField(name, value);
}

function setField(name: string, value: FieldValue): void {
  const f = TRANSIT_SCHEME.field(name);
  const bad = (): never => {
    throw new Error(`test table: bad value ${JSON.stringify(value)} for ${f.type} field ${name}`);
  };
  switch (f.type) {
    case 'int':
      if (typeof value !== 'number') bad();
      ctx.setInt(f.slot, value as number);
      break;
    case 'bool':
      if (typeof value !== 'boolean') bad();
      ctx.setBool(f.slot, value as boolean);
      break;
    case 'ip':
      if (typeof value !== 'string') bad();
      ctx.setIp(f.slot, value as string);
      break;
    case 'bytes':
      if (RAW_FIELDS.has(name)) {
        if (typeof value === 'string') {
          const buf = hexToBytes(value);
          ctx.setBytes(f.slot, buf, 0, buf.length);
        } else if (typeof value === 'object') {
          ctx.setBytes(f.slot, hexToBytes(value.hex), value.start, value.end);
        } else bad();
      } else {
        if (typeof value !== 'string') bad();
        ctx.setString(f.slot, value as string);
      }
      break;
    default:
      bad();
  }
}

function isRuns(c: Case): c is RunsCase {
  return 'runs' in c;
}
function isError(c: Case): c is ErrorCase {
  return !isRuns(c) && typeof c.expect === 'object';
}

function show(s: string): string {
  return s.length > 120 ? `${JSON.stringify(s.slice(0, 100))}... (${s.length} chars)` : JSON.stringify(s);
}

function runErrorCase(c: ErrorCase): void {
  const codes = typeof c.expect.error === 'number' ? [c.expect.error] : [...c.expect.error];
  let thrown: unknown;
  try {
    compileExpression(c.expr, optionsFor(c));
  } catch (e) {
    thrown = e;
  }
  expect(thrown, `${show(c.expr)} should not compile`).toBeInstanceOf(MoatError);
  const err = thrown as MoatError;
  expect(codes, `${show(c.expr)}: got ${err.code} (${err.message})`).toContain(err.code);
  // The error carries a span within the source.
  expect(err.span, `${show(c.expr)}: error has no span`).toBeDefined();
  const span = err.span!;
  expect(Number.isInteger(span.start) && Number.isInteger(span.end), 'span bounds are integers').toBe(true);
  expect(span.start, 'span.start >= 0').toBeGreaterThanOrEqual(0);
  expect(span.end, 'span.end >= span.start').toBeGreaterThanOrEqual(span.start);
  expect(span.end, 'span.end <= source length').toBeLessThanOrEqual(c.expr.length);
  if (c.at !== undefined) {
    const covers = span.start <= c.at && (c.at < span.end || (span.start === span.end && span.start === c.at));
    expect(covers, `${show(c.expr)}: span ${span.start}..${span.end} should cover index ${c.at}`).toBe(true);
  }
  // checkExpression agrees (it never throws). Without the lists option it accepts any account
  // list by contract, so only compare when lists are given.
  if (c.lists !== 'none') {
    const r = checkExpression(c.expr, optionsFor(c));
    expect(r.ok, `checkExpression(${show(c.expr)}).ok`).toBe(false);
    expect(r.errors.some((e) => codes.includes(e.code)), `checkExpression codes ${r.errors.map((e) => e.code).join(',')}`).toBe(true);
  }
}

function runValueCase(c: Case, runs: ReadonlyArray<{ packet: Packet; expect: boolean }>): void {
  let filter;
  try {
    filter = compileExpression(c.expr, optionsFor(c));
  } catch (e) {
    const detail = e instanceof MoatError ? `${e.code} ${e.message}` : String(e);
    throw new Error(`${show(c.expr)} should compile, got error ${detail}`);
  }
  const got = runs.map((r) => {
    load(r.packet);
    return filter.execute(ctx);
  });
  // The code-generating backend must answer exactly as the closures do.
  const generated = compileExpression(c.expr, { ...optionsFor(c), backend: 'codegen' });
  const gotGenerated = runs.map((r) => {
    load(r.packet);
    return generated.execute(ctx);
  });
  expect(gotGenerated, `generated code for ${show(c.expr)}`).toEqual(got);
  const want = runs.map((r) => r.expect);
  const rows = runs.map((r, i) => `${JSON.stringify(r.packet)} -> expected ${want[i]}, got ${got[i]}`);
  expect(got, `${show(c.expr)}\n  ${rows.join('\n  ')}`).toEqual(want);
  if (c.reports?.fields !== undefined) expect([...filter.fields].sort()).toEqual([...c.reports.fields].sort());
  if (c.reports?.lists !== undefined) expect([...filter.lists].sort()).toEqual([...c.reports.lists].sort());
  if (c.lists !== 'none') {
    const r = checkExpression(c.expr, optionsFor(c));
    expect(r.ok, `checkExpression(${show(c.expr)}) errors: ${r.errors.map((e) => `${e.code} ${e.message}`).join('; ')}`).toBe(true);
  }
}

describe('rules language conformance', () => {
  it('has unique case names', () => {
    const names = CASES.map((c) => c.name);
    expect(names.filter((n, i) => names.indexOf(n) !== i)).toEqual([]);
  });

  for (const c of CASES) {
    it(c.name, () => {
      if (isRuns(c)) runValueCase(c, c.runs);
      else if (isError(c)) runErrorCase(c);
      else runValueCase(c, [{ packet: c.packet ?? {}, expect: c.expect as boolean }]);
    });
  }
});

describe('list options of checkExpression and compileExpression', () => {
  it('checkExpression without lists accepts any syntactically valid account list name', () => {
    const r = checkExpression('ip.src in $some_account_list', { scheme: TRANSIT_SCHEME });
    expect(r.ok).toBe(true);
    expect(r.lists).toEqual(['some_account_list']);
  });
  it('checkExpression without lists still rejects a bad list name', () => {
    const r = checkExpression('ip.src in $Bad', { scheme: TRANSIT_SCHEME });
    expect(r.ok).toBe(false);
    expect(r.errors.map((e) => e.code)).toContain(1016);
  });
  it('checkExpression reports $cf.* under the canonical svc.* name', () => {
    const r = checkExpression('ip.src in $cf.malware or ip.dst in $svc.botnetcc', { scheme: TRANSIT_SCHEME });
    expect(r.ok).toBe(true);
    expect([...r.lists].sort()).toEqual(['svc.botnetcc', 'svc.malware']);
  });
});
