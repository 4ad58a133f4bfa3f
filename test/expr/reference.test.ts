// Differential test in process: the compiled engine against the naive reference
// evaluator in test/support, on random well-typed expressions and random packets
// (fields present or absent, IPv4 and IPv6, lists, bit_slice, the any-of country).
import { describe, expect, it } from 'vitest';
import { compileExpression, parse } from '../../src/expr/index.js';
import { IpRangeSet } from '../../src/net/index.js';
import { TRANSIT_SCHEME } from '../../src/packet/index.js';
import { Rng, seedFrom } from '../support/random.js';
import { REF_TYPES, refEval, type RefPacket } from '../support/reference-eval.js';

const SEED = seedFrom('MOAT_REF_SEED');

const INTS = [0, 1, 2, 5, 6, 17, 22, 53, 64, 80, 128, 255, 443, 1023, 1024, 8000, 8080, 65535, 13335, 4294967295];
const IPS = ['10.0.0.1', '10.0.0.255', '10.1.0.0', '192.0.2.7', '198.51.100.1', '0.0.0.0', '255.255.255.255',
  '2001:db8::1', '2001:db8::ffff', '2001:db8:1::', '::1', '::', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', '::ffff:10.0.0.1', 'fe80::1:2'];
const CIDRS = ['10.0.0.0/8', '10.0.0.0/24', '192.0.2.0/24', '0.0.0.0/0', '2001:db8::/32', '2001:db8::/64', '::/0', '::1/128', '10.0.0.1/32'];
const RANGES = ['10.0.0.0..10.0.0.200', '192.0.2.0..198.51.100.255', '2001:db8::..2001:db8::ff', '::1..::ffff:0:0'];
const STRINGS = ['tcp', 'udp', 'icmp', 'ipv6-icmp', 'gre', 'US', 'GB', 'DE', 'sfo06', 'WNAM', ''];
const LISTS: Record<string, string[]> = {
  'svc.malware': ['10.0.0.0/24', '2001:db8::/48'],
  'svc.botnetcc': ['192.0.2.7', '::1'],
  'svc.anonymizer': [],
  blocklist: ['198.51.100.0..198.51.100.10', '255.255.255.255', 'fe80::/10'],
};

const FIELDS = Object.keys(REF_TYPES);
const VALUE_FIELDS = FIELDS.filter((f) => !['ip', 'tcp', 'udp', 'icmp'].includes(f));
const RAW_FIELDS = ['ip', 'tcp', 'udp', 'icmp'];
const INT_OPS = [['==', 'eq'], ['!=', 'ne'], ['<', 'lt'], ['<=', 'le'], ['>', 'gt'], ['>=', 'ge']];

function intText(r: Rng, v: number): string {
  const k = r.int(4);
  if (k === 0 && v > 0) return '0x' + v.toString(16);
  if (k === 1 && v > 0) return '0' + v.toString(8);
  return String(v);
}

function quoted(s: string): string {
  return '"' + s.replace(/[\\"]/g, (c) => '\\' + c) + '"';
}

function leaf(r: Rng): string {
  if (r.chance(0.08)) {
    const f = r.pick(RAW_FIELDS);
    const start = r.int(40);
    const end = start + 1 + r.int(32);
    return `bit_slice(${r.chance(0.5) ? f : quoted(f)}, ${start}, ${end}) ${r.pick(INT_OPS)[r.int(2)]} ${r.int(300)}`;
  }
  const f = r.pick(VALUE_FIELDS);
  const type = REF_TYPES[f]!;
  if (type === 'bool') return f;
  if (type === 'int') {
    const k = r.int(10);
    if (k < 5) return `${f} ${r.pick(INT_OPS)[r.int(2)]} ${intText(r, r.pick(INTS))}`;
    if (k < 7) return `${f} ${r.chance(0.5) ? '&' : 'bitwise_and'} ${intText(r, r.pick([1, 2, 0x12, 0x40, 0x80, 0xff, 0x8000]))}`;
    const items = Array.from({ length: r.int(7) }, () => {
      const a = r.pick(INTS);
      return r.chance(0.3) ? `${a}..${a + r.int(2000)}` : intText(r, a);
    });
    return `${f} in {${items.join(' ')}}`;
  }
  if (type === 'ip') {
    const k = r.int(10);
    if (k < 4) return `${f} ${r.pick(INT_OPS)[r.int(2)]} ${r.pick(IPS)}`;
    if (k < 7) {
      const items = Array.from({ length: r.int(6) }, () => r.pick([...IPS, ...CIDRS, ...RANGES]));
      return `${f} in {${items.join(' ')}}`;
    }
    return `${f} in $${r.pick(['svc.malware', 'cf.malware', 'svc.botnetcc', 'cf.anonymizer', 'blocklist'])}`;
  }
  const k = r.int(10);
  if (k < 5) return `${f} ${r.pick(INT_OPS)[r.int(2)]} ${quoted(r.pick(STRINGS))}`;
  if (k < 7) return `${f} in {${Array.from({ length: r.int(4) }, () => quoted(r.pick(STRINGS))).join(' ')}}`;
  if (k < 9) return `${f} contains ${quoted(r.pick(['c', 'U', 'p', 'sfo', '-']))}`;
  return `${f} matches ${quoted(r.pick(['^t', 'p$', '^(US|GB)$', '[0-9]']))}`;
}

function expr(r: Rng, depth: number): string {
  if (depth === 0 || r.chance(0.3)) return leaf(r);
  const k = r.int(5);
  if (k === 0) return `${r.pick(['not ', '!'])}(${expr(r, depth - 1)})`;
  const op = r.pick(['and', '&&', 'or', '||', 'xor', '^^']);
  const a = expr(r, depth - 1);
  const b = expr(r, depth - 1);
  return r.chance(0.5) ? `(${a} ${op} ${b})` : `${a} ${op} ${b}`;
}

function packet(r: Rng): RefPacket {
  const p: RefPacket = {};
  for (const f of FIELDS) {
    if (f === 'ip.geoip.country' || r.chance(0.3)) continue;
    const t = REF_TYPES[f]!;
    if (t === 'int') p[f] = r.pick(INTS);
    else if (t === 'ip') p[f] = r.pick(IPS);
    else if (t === 'bool') p[f] = r.chance(0.5);
    else if (RAW_FIELDS.includes(f)) p[f] = String.fromCharCode(...Array.from({ length: r.int(12) }, () => r.int(256)));
    else p[f] = r.pick(STRINGS);
  }
  return p;
}

const lists = new Map(Object.entries(LISTS).map(([k, v]) => [k, IpRangeSet.fromStrings(v)]));
const ctx = TRANSIT_SCHEME.newContext();

function load(p: RefPacket): void {
  ctx.reset();
  for (const [name, v] of Object.entries(p)) {
    if (v === undefined) continue;
    const f = TRANSIT_SCHEME.field(name);
    if (f.type === 'int') ctx.setInt(f.slot, v as number);
    else if (f.type === 'bool') ctx.setBool(f.slot, v as boolean);
    else if (f.type === 'ip') ctx.setIp(f.slot, v as string);
    else if (f.raw) {
      const b = Uint8Array.from(v as string, (c) => c.charCodeAt(0));
      // Put the bytes at an offset inside a larger buffer, as a packet view would.
      const buf = new Uint8Array(b.length + 7);
      buf.set(b, 3);
      ctx.setBytes(f.slot, buf, 3, 3 + b.length);
    } else ctx.setString(f.slot, v as string);
  }
}

describe('both compiled backends against the reference evaluator', () => {
  it(`agrees on 3,000 random expressions over 100 random packets each (seed ${SEED}, MOAT_REF_SEED to replay)`, () => {
    const r = new Rng(SEED);
    const packets = Array.from({ length: 100 }, () => packet(r));
    let compared = 0;
    let trueCount = 0;
    for (let i = 0; i < 3000; i++) {
      const src = expr(r, 4);
      const filter = compileExpression(src, { scheme: TRANSIT_SCHEME, lists });
      const generated = compileExpression(src, { scheme: TRANSIT_SCHEME, lists, backend: 'codegen' });
      const ast = parse(src);
      for (const p of packets) {
        load(p);
        const want = refEval(ast, p, LISTS);
        const got = filter.execute(ctx);
        const gen = generated.execute(ctx);
        if (got !== want || gen !== want) {
          throw new Error(`seed ${SEED}: closures ${got}, generated code ${gen}, reference ${want}\nexpression: ${src}\npacket: ${JSON.stringify(p)}`);
        }
        compared++;
        if (got) trueCount++;
      }
    }
    expect(compared).toBe(300_000);
    // Both outcomes occur often: the comparison is not vacuous.
    expect(trueCount).toBeGreaterThan(compared * 0.15);
    expect(trueCount).toBeLessThan(compared * 0.85);
  });
});
