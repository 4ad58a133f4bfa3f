// Generated code never holds text the user wrote: over random checked trees
// and random rulesets (with hostile strings in bytes literals), every emitted
// source (bundle functions, chunks, port-run builders, packet programs) uses
// only numbers, operators and a fixed set of names, plus `/* rule N */`
// markers and a sourceURL line; bytes literals go to the constants (K), and a
// rule's condition never reads the packet's length (the port dispatch counts on it).

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compileBundle, tableLists, toRuleset, type Evaluator } from '../../src/engine/index.js';
import { check, ConstantPool, DEFAULT_LIMITS, generate, parse, renderCode } from '../../src/expr/index.js';
import { TRANSIT_SCHEME } from '../../src/packet/index.js';
import { geoByEightTable } from '../support/geo-by-eight.js';

const table = geoByEightTable({ bad: ['11.0.0.0/9', '2001:db8::/48'], office: ['13.0.0.0/10'] });

// Every name generated code may hold (see the table in src/engine/code-writer.ts and packet-program.ts).
const NAMES = new Set([
  // JavaScript
  'return', 'function', 'const', 'let', 'if', 'else', 'for', 'true', 'false', 'NaN', 'break', 'has',
  // parameters and context arrays
  'K', 'P', 'Y', 'LG', 'LN', 'FF', 'c', 'len', 'v', 'd', 'k', 'I', 'B', 'F', 'A4', 'A6', 'PD',
  'ints', 'bools', 'ipFamily', 'ip4', 'ip6', 'pending', 'resolver', 'resolve',
  // function names
  'bundle', 'packetProgram', 'matchAt',
  // packet programs
  '$buf', '$off', '$cap', '$host', '$fr', '$p', '$l4', '$v4', '$tcp', '$ws', '$wd', 'beginAt',
]);
const NAME_FORMS = [/^[ibf]_\d+$/, /^a4_\d+$/, /^L\d+$/, /^rules\d+to\d+$/];

/** The names of `source` that are not allowed, after its allowed comments are taken out; throws on any other text. */
function strangers(source: string): string[] {
  const bare = source
    .replace(/\n\/\/# sourceURL=moat-bundle\/[a-z0-9-]+\.js$/, '')
    .replace(/\/\* rules? \d+(-\d+)? \*\//g, ' ');
  // No quotes, escapes, comments or other characters: numbers, operators, punctuation and names only.
  const odd = bare.match(/[^A-Za-z0-9_$ \n(){}[\];,.+\-*/%<>=!&|^~?:]|\/\/|\/\*/);
  if (odd !== null) throw new Error(`unexpected ${JSON.stringify(odd[0])} in generated code:\n${source}`);
  const names = bare.replace(/\b\d+(\.\d+)?(e[+-]?\d+)?\b/g, ' ').match(/[A-Za-z_$][A-Za-z0-9_$]*/g) ?? [];
  return [...new Set(names)].filter((n) => !NAMES.has(n) && !NAME_FORMS.some((f) => f.test(n)));
}

// A string literal of any bytes, quotes and backslashes included, written with \x escapes.
const bytesLiteral = fc.uint8Array({ minLength: 1, maxLength: 6 }).map((b) => `"${Array.from(b, (x) => `\\x${x.toString(16).padStart(2, '0')}`).join('')}"`);
const hostile = fc.constantFrom('"\\x22"', '"\\x27\\x60"', '"\\x5c"', '"*/"', '"//"', '"CN"', '"RU"', '"tcp"');
const str = fc.oneof(bytesLiteral, hostile);
// A regular expression matching any given ASCII bytes, each written as the regex escape \xNN.
const pattern = fc.uint8Array({ minLength: 1, maxLength: 6 }).map((b) => `"${Array.from(b, (x) => `\\\\x${(x & 0x7f).toString(16).padStart(2, '0')}`).join('')}"`);
const port = fc.integer({ min: 0, max: 65535 });
const v4 = fc.tuple(fc.integer({ min: 0, max: 255 }), fc.integer({ min: 0, max: 255 }), fc.integer({ min: 16, max: 32 })).map(([a, b, n]) => `${a}.${b}.0.0/${n}`);

const leaf: fc.Arbitrary<string> = fc.oneof(
  fc.tuple(fc.constantFrom('tcp.dstport', 'tcp.srcport', 'udp.dstport', 'ip.ttl', 'ip.len', 'ip.src.asnum', 'tcp.flags'), fc.constantFrom('==', '!=', '<', '>='), port).map(([f, op, n]) => `${f} ${op} ${n}`),
  fc.tuple(fc.constantFrom('tcp.dstport', 'udp.dstport', 'ip.dst.asnum'), fc.array(port, { minLength: 1, maxLength: 40 })).map(([f, ps]) => `${f} in {${ps.join(' ')}}`),
  fc.constantFrom('tcp.flags.syn', 'tcp.flags.ack', 'tcp.flags & 18', 'ip.src in $bad', 'not ip.dst in $office', 'ip.src == 2001:db8::1', 'ip.dst > 2001:db8::1',
    'ip.src in {2001:db8::/32 10.0.0.0/8}', 'bit_slice(tcp, 104, 112) == 2'),
  fc.array(v4, { minLength: 1, maxLength: 8 }).map((cs) => `ip.src in {${cs.join(' ')}}`),
  fc.tuple(fc.constantFrom('ip.src.country', 'ip.geoip.country', 'ip.proto', 'ip.dst.country'), fc.constantFrom('==', '!=', 'contains', '<'), str).map(([f, op, s]) => `${f} ${op} ${s}`),
  fc.tuple(fc.constantFrom('ip.src.country', 'ip.proto'), pattern).map(([f, p]) => `${f} matches ${p}`),
  fc.tuple(fc.constantFrom('ip.src.country', 'ip.proto'), fc.array(str, { minLength: 1, maxLength: 8 })).map(([f, ss]) => `${f} in {${ss.join(' ')}}`),
);
const { expr } = fc.letrec<{ expr: string }>((tie) => ({
  expr: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leaf,
    fc.tuple(tie('expr'), fc.constantFrom('and', 'or', 'xor'), tie('expr')).map(([a, op, b]) => `(${a} ${op} ${b})`),
    tie('expr').map((a) => `not ${a}`),
  ),
}));

const rule = fc.record({ action: fc.constantFrom('block', 'block', 'log', 'skip'), expression: expr, enabled: fc.boolean() });

function compile(account: ReadonlyArray<{ action: string; expression: string; enabled: boolean }>, zone: typeof account | null, max?: number): Evaluator {
  const rs = (name: string, rules: typeof account) =>
    toRuleset({ name, phase: 'network_transit', rules: rules.map((r) => ({ ...r, action_parameters: r.action === 'skip' ? { ruleset: 'current' } : undefined })) });
  return compileBundle({ account: rs('a', account), zone: zone === null ? undefined : rs('z', zone), lists: tableLists(table) }, max === undefined ? {} : { maxFunctionSource: max });
}

describe('generated code', () => {
  it('of random checked trees holds numbers, operators and known names only, and never the packet length', () => {
    fc.assert(
      fc.property(expr, (e) => {
        const r = check(parse(e, DEFAULT_LIMITS), TRANSIT_SCHEME, { lists: tableLists(table) });
        expect(r.errors, e).toEqual([]);
        const source = renderCode(generate(r.tree!, new ConstantPool(), tableLists(table)).template);
        expect(strangers(source), e).toEqual([]);
        expect(/\blen\b/.test(source), e).toBe(false);
      }),
      { numRuns: 300 },
    );
  });

  it('of random rulesets holds numbers, operators, known names, a marker per rule and a sourceURL per function', () => {
    let programs = 0;
    let chunked = 0;
    fc.assert(
      fc.property(fc.array(rule, { minLength: 1, maxLength: 30 }), fc.option(fc.array(rule, { minLength: 1, maxLength: 10 })), fc.constantFrom(undefined, 400), (account, zone, max) => {
        const ev = compile(account, zone, max);
        if (ev.program !== null) programs++;
        if (ev.functions > 1) chunked++;
        expect(ev.sources.length).toBeGreaterThan(0);
        const marked = new Set<number>();
        for (const { name, source } of ev.sources) {
          expect(strangers(source), name).toEqual([]);
          expect(source.endsWith(`\n//# sourceURL=moat-bundle/${name}.js`), name).toBe(true);
          if (name === 'bundle' || name.startsWith('rules')) {
            for (const m of source.matchAll(/\/\* rules? (\d+)(?:-(\d+))? \*\//g)) for (let i = Number(m[1]); i <= Number(m[2] ?? m[1]); i++) marked.add(i);
          }
        }
        // Every enabled rule's code is marked with its index.
        const enabled = ev.rules.flatMap((r, i) => (r.rule.enabled ? [i] : []));
        expect([...marked].sort((a, b) => a - b)).toEqual(enabled);
      }),
      { numRuns: 300 },
    );
    expect(programs).toBeGreaterThan(0);
    expect(chunked).toBeGreaterThan(0);
  });

  it('of a port run (its table builder included) holds numbers, operators and known names only', () => {
    const ev = compile([22, 80, 443, 3389, 5900].map((p) => ({ action: 'block', expression: `tcp.dstport in {${p} ${p + 1000}}`, enabled: true })), null);
    expect(ev.portRuns).toBe(1);
    expect(ev.sources.map((s) => s.name)).toEqual(['port-run-0', 'bundle', 'packet-program']);
    for (const { source } of ev.sources) expect(strangers(source)).toEqual([]);
    expect(ev.sources[1]!.source).toContain('/* rules 0-4 */');
  });

  it('puts bytes literals in the constants, not in the source', () => {
    const ev = compile([{ action: 'block', expression: 'ip.src.country contains "\\x27Q" or ip.proto matches "^u\\x22"', enabled: true }], null);
    const source = ev.sources.find((s) => s.name === 'bundle')!.source;
    expect(strangers(source)).toEqual([]);
    expect(source).toMatch(/K\[\d+\]\(c\)/);
  });
});
