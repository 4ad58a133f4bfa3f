// Fuzzing the lexer, parser and checker: random and mutated inputs must give a
// coded error with a span inside the source (or compile), never another
// exception and never a hang. The seed is printed so a failure can be replayed.
import { describe, expect, it } from 'vitest';
import { checkExpression, compileExpression, renderError } from '../../src/expr/index.js';
import { MoatError } from '../../src/errors/index.js';
import { TRANSIT_SCHEME } from '../../src/packet/index.js';
import { Rng, seedFrom } from '../support/random.js';

const SEED = seedFrom('MOAT_FUZZ_SEED');

const CORPUS = [
  'tcp.dstport in {80 443 8000..8080} and not tcp.flags.syn',
  'ip.src in {10.0.0.0/8 2001:db8::/32 192.0.2.1..192.0.2.9} or ip.dst == ::ffff:1.2.3.4',
  'ip.proto == "tcp" && !(ip.ttl le 0x40) ^^ ip.geoip.country in {"US" "GB"}',
  'ip.src in $cf.malware or ip.dst in $office_list || ip.src in $svc.botnetcc',
  'bit_slice("udp", 64, 72) == 0x45 and udp contains 01:02:03 and ip.proto matches r#"^t.p$"#',
  'icmp.type eq 8 xor icmp.code ne 0 or tcp.flags & 0x12 or tcp.flags bitwise_and 2',
  'cf.colo.name == "sfo06" and ip.hdr_len > 5 and ip.opt.type == 0130 and sip',
  '((((tcp.dstport == 22))))\r\nand\nnot not tcp.flags.ack',
  'ip.src.country != "\\x55S" and ip.dst.asnum in {13335 15169..15170} and ip.len >= -1',
];

// Characters that matter to the grammar, plus hostile ones.
const ALPHABET = [
  ...'(){}$"\\#&|^!=<>~,.:/-_ \r\n\trx0123456789abcdefABCDEF',
  'and', 'or', 'xor', 'not', 'in', 'eq', '..', '::', '/33', '"', 'r#"', '"#', '\u0000', '\u00e9', '\ud83d', '\ude00', '\u2028',
  'tcp.dstport', 'ip.src', '$', '{', '}', ' ', '0x', '999999999999999999999',
];

function mutate(r: Rng, s: string): string {
  const n = 1 + r.int(4);
  for (let k = 0; k < n; k++) {
    const i = r.int(s.length + 1);
    switch (r.int(5)) {
      case 0:
        s = s.slice(0, i) + s.slice(i + 1 + r.int(6));
        break;
      case 1:
        s = s.slice(0, i) + r.pick(ALPHABET) + s.slice(i);
        break;
      case 2: {
        const j = r.int(s.length + 1);
        s = s.slice(0, i) + s.slice(Math.min(i, j), Math.max(i, j)) + s.slice(i);
        break;
      }
      case 3:
        s = s.slice(0, i) + r.pick(ALPHABET) + s.slice(i + 1);
        break;
      default:
        s = s.slice(0, i);
    }
  }
  return s;
}

function randomText(r: Rng): string {
  let s = '';
  const n = r.int(60);
  for (let i = 0; i < n; i++) s += r.chance(0.8) ? r.pick(ALPHABET) : String.fromCharCode(r.int(0x3000));
  return s;
}

function probe(src: string, outcomes: { ok: number; err: number }): void {
  const report = checkExpression(src, { scheme: TRANSIT_SCHEME });
  for (const e of report.errors) {
    expect(e).toBeInstanceOf(MoatError);
    expect(e.span, `no span for ${JSON.stringify(src)}`).toBeDefined();
    expect(e.span!.start).toBeGreaterThanOrEqual(0);
    expect(e.span!.start).toBeLessThanOrEqual(src.length);
    expect(e.span!.end).toBeGreaterThanOrEqual(e.span!.start);
    expect(typeof renderError(src, e)).toBe('string');
  }
  try {
    const f = compileExpression(src, { scheme: TRANSIT_SCHEME, lists: new Map() });
    const ctx = TRANSIT_SCHEME.newContext();
    f.execute(ctx);
    outcomes.ok++;
  } catch (err) {
    if (!(err instanceof MoatError)) throw new Error(`seed ${SEED}: ${JSON.stringify(src)} threw ${String(err)}`);
    outcomes.err++;
  }
}

describe('fuzzing the language front end', () => {
  it(`gives every mutated expression a coded error or a filter (seed ${SEED}, MOAT_FUZZ_SEED to replay)`, () => {
    const r = new Rng(SEED);
    const outcomes = { ok: 0, err: 0 };
    for (let i = 0; i < 30_000; i++) probe(mutate(r, r.pick(CORPUS)), outcomes);
    // The mutations reach both sides: some still compile, most do not.
    expect(outcomes.ok).toBeGreaterThan(500);
    expect(outcomes.err).toBeGreaterThan(5_000);
  });

  it(`gives every random string a coded error or a filter (seed ${SEED})`, () => {
    const r = new Rng(SEED ^ 0x5a5a5a5a);
    const outcomes = { ok: 0, err: 0 };
    for (let i = 0; i < 30_000; i++) probe(randomText(r), outcomes);
    expect(outcomes.err).toBeGreaterThan(25_000);
  });

  it('handles pathological inputs within the limits quickly', () => {
    const outcomes = { ok: 0, err: 0 };
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
      probe(src, outcomes);
    }
    expect(outcomes.ok + outcomes.err).toBe(10);
  });
});
