// Port dispatch (port-dispatch.ts, portRun): a run of block rules that each test one
// port field alone is compiled into one table read. The verdicts, matched
// rules, counters and logged rules are those of the rules evaluated one by one
// (the closure compiler), on random rulesets mixing such runs with rules that
// must stay out of them (true on an absent port, other fields, log rules).

import { describe, expect, it } from 'vitest';
import { compileBundle, toRuleset, VERDICT_PASS } from '../../src/engine/index.js';
import { compileExpression } from '../../src/expr/index.js';
import { TRANSIT_SCHEME as S } from '../../src/packet/index.js';
import { Rng } from '../support/random.js';

type Action = 'block' | 'log';

function portRule(rng: Rng, field: string): string {
  const p = () => (rng.chance(0.5) ? rng.pick([22, 53, 80, 443, 3389, 0, 65535]) : rng.int(65536));
  switch (rng.int(7)) {
    case 0:
      return `${field} == ${p()}`;
    case 1:
      return `${field} in {${Array.from({ length: 1 + rng.int(12) }, p).join(' ')}}`;
    case 2: {
      const a = p();
      return `${field} in {${p()} ${a}..${Math.min(65535, a + rng.int(2000))}}`;
    }
    case 3:
      return `${field} ${rng.pick(['<', '>', '<=', '>=', '!='])} ${p()}`;
    case 4:
      return `${field} in {${p()} ${p()}} or ${field} == ${p()}`;
    case 5:
      // A bit mask: the table is filled value by value (see portCuts).
      return `${field} & ${1 << rng.int(16)}`;
    default:
      return `${field} in {${Array.from({ length: 30 + rng.int(40) }, p).join(' ')}}`;
  }
}

function randomRules(rng: Rng): Array<{ action: Action; expression: string }> {
  const rules: Array<{ action: Action; expression: string }> = [];
  while (rules.length < 40) {
    const r = rng.next();
    if (r < 0.6) {
      // A run of port rules on one field.
      const field = rng.pick(['tcp.dstport', 'tcp.srcport', 'udp.dstport', 'udp.srcport']);
      for (let n = 2 + rng.int(12); n > 0; n--) rules.push({ action: 'block', expression: portRule(rng, field) });
    } else if (r < 0.7) {
      // True when the port is absent: must not join a run.
      rules.push({ action: 'block', expression: `not tcp.dstport in {${rng.int(65536)} ${rng.int(65536)}}` });
    } else if (r < 0.8) {
      rules.push({ action: 'log', expression: portRule(rng, 'tcp.dstport') });
    } else {
      rules.push({ action: 'block', expression: `${portRule(rng, 'udp.dstport')} and ip.len > ${rng.int(1500)}` });
    }
  }
  return rules;
}

describe('port dispatch', () => {
  const slot = (f: string) => S.field(f).slot;
  let runs = 0;
  for (let seed = 0; seed < 12; seed++) {
    it(`gives the verdicts, counters and logs of the rules one by one (ruleset ${seed})`, () => {
      const rng = new Rng(90_000 + seed);
      const rules = randomRules(rng);
      const ev = compileBundle({ account: toRuleset({ name: 'a', phase: 'network_transit', rules }) });
      runs += ev.portRuns;
      const filters = rules.map((r) => compileExpression(r.expression, { scheme: S }));
      const ctx = S.newContext();
      const hits = new Float64Array(rules.length);
      for (let i = 0; i < 4000; i++) {
        ctx.reset();
        const tcp = rng.chance(0.5);
        const port = () => (rng.chance(0.3) ? rng.pick([22, 53, 80, 443, 3389, 0, 65535]) : rng.int(65536));
        if (rng.chance(0.9)) {
          ctx.setInt(slot(tcp ? 'tcp.dstport' : 'udp.dstport'), port());
          ctx.setInt(slot(tcp ? 'tcp.srcport' : 'udp.srcport'), port());
        }
        ctx.setInt(slot('ip.len'), rng.int(1600));
        const len = 60 + rng.int(1000);
        let want = VERDICT_PASS;
        const logs: number[] = [];
        for (const [k, r] of rules.entries()) {
          if (!filters[k]!.execute(ctx)) continue;
          hits[k]!++;
          if (r.action === 'log') logs.push(k);
          else {
            want = k;
            break;
          }
        }
        expect(ev.evaluate(ctx, len), `packet ${i}`).toBe(want);
        expect(Array.from(ev.logged.subarray(0, ev.loggedCount))).toEqual(logs);
      }
      expect(Array.from(ev.hitPackets)).toEqual(Array.from(hits));
    });
  }
  // Every port value, so that each edge of every set, range and comparison is
  // met (the tables are filled span by span between those edges).
  for (let seed = 0; seed < 3; seed++) {
    it(`gives the verdicts of the rules one by one for every port value (ruleset ${seed})`, () => {
      const rng = new Rng(91_000 + seed);
      const rules = randomRules(rng);
      const ev = compileBundle({ account: toRuleset({ name: 'a', phase: 'network_transit', rules }) });
      expect(ev.portRuns).toBeGreaterThan(0);
      const filters = rules.map((r) => compileExpression(r.expression, { scheme: S }));
      const ctx = S.newContext();
      const ports = ['tcp.dstport', 'tcp.srcport', 'udp.dstport', 'udp.srcport'].map(slot);
      let mismatches = 0;
      for (let v = 0; v < 65536; v++) {
        ctx.reset();
        for (const s of ports) ctx.setInt(s, v);
        ctx.setInt(slot('ip.len'), 700);
        let want = VERDICT_PASS;
        for (const [k, r] of rules.entries()) {
          if (r.action === 'block' && filters[k]!.execute(ctx)) {
            want = k;
            break;
          }
        }
        if (ev.evaluate(ctx, 100) !== want && mismatches++ < 5) expect(ev.evaluate(ctx, 100), `port ${v}`).toBe(want);
      }
      expect(mismatches).toBe(0);
    });
  }
  it('compiled some runs (the tests above cover them)', () => {
    expect(runs).toBeGreaterThan(12);
  });
});
