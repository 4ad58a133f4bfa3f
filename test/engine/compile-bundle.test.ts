// A bundle evaluates the account entrypoint, then the zone entrypoint, with
// block, skip and log semantics, counts per rule, and is rejected whole when
// any rule is bad.
import { describe, expect, it } from 'vitest';
import { BundleError, compileBundle, MAX_FUNCTION_SOURCE, parseRuleset, toRuleset, VERDICT_PASS, type Ruleset } from '../../src/engine/index.js';
import { MoatError } from '../../src/errors/index.js';
import { IpRangeSet } from '../../src/net/index.js';
import { TRANSIT_SCHEME as S } from '../../src/packet/index.js';

const ctx = S.newContext();
function packet(dstport: number, src = '192.0.2.1'): typeof ctx {
  ctx.reset();
  ctx.setInt(S.field('tcp.dstport').slot, dstport);
  ctx.setIp(S.field('ip.src').slot, src);
  ctx.setString(S.field('ip.proto').slot, 'tcp');
  return ctx;
}

const rs = (rules: Array<Partial<Ruleset['rules'][number]> & { action: string; expression: string }>, name = 'rs'): Ruleset =>
  toRuleset({ name, phase: 'network_transit', rules });

describe('evaluating a bundle', () => {
  const account = rs([
    { action: 'skip', expression: 'tcp.dstport == 22 and ip.src in {192.0.2.0/24}', action_parameters: { ruleset: 'current' } },
    { action: 'log', expression: 'tcp.dstport in {22 23}' },
    { action: 'block', expression: 'tcp.dstport in {22 23}' },
    { action: 'block', expression: 'tcp.dstport == 80', enabled: false },
  ], 'account');
  const zone = rs([{ action: 'block', expression: 'tcp.dstport == 22' }], 'zone');
  const ev = compileBundle({ account, zone });

  it('runs rules in order and lets the first matching block drop the packet', () => {
    expect(ev.evaluate(packet(23), 60)).toBe(2);
    expect(ev.loggedCount).toBe(1);
    expect(ev.logged[0]).toBe(1);
  });

  it('ends only the current ruleset on skip: the zone ruleset still runs', () => {
    expect(ev.evaluate(packet(22, '192.0.2.9'), 60)).toBe(4); // skipped account rules, blocked by the zone rule
    expect(ev.rules[4]!.level).toBe('zone');
    expect(ev.loggedCount).toBe(0);
  });

  it('passes over disabled rules and passes packets no rule blocks', () => {
    expect(ev.evaluate(packet(80), 60)).toBe(VERDICT_PASS);
  });

  it('counts packets and bytes per rule', () => {
    ev.resetCounters();
    ev.evaluate(packet(23), 100);
    ev.evaluate(packet(23), 50);
    ev.evaluate(packet(22, '192.0.2.7'), 10);
    expect(Array.from(ev.hitPackets)).toEqual([1, 2, 2, 0, 1]);
    expect(Array.from(ev.hitBytes)).toEqual([10, 150, 150, 0, 10]);
  });

  it('reports the fields and lists the enabled rules read, for the decoder', () => {
    expect(ev.fields).toEqual(['ip.src', 'tcp.dstport']);
    expect(ev.plan.tcp).toBe(true);
    expect(ev.plan.udp).toBe(false);
  });

  it('keeps working across many rules', () => {
    const many = rs(Array.from({ length: 100 }, (_, i) => ({ action: 'block', expression: `tcp.dstport == ${1000 + i}` })));
    const big = compileBundle({ account: many });
    expect(big.evaluate(packet(1000), 1)).toBe(0);
    expect(big.evaluate(packet(1099), 1)).toBe(99);
    expect(big.evaluate(packet(1100), 1)).toBe(VERDICT_PASS);
  });

  it('answers alike as one function, as chunks of any size and by the rules read one by one', () => {
    // Random bundles of block, skip, log and disabled rules at both levels;
    // a packet's verdict, logged rules and counters are compared with a direct
    // reading of the semantics (first block wins, skip ends its level).
    let seed = 7;
    const rnd = (n: number) => {
      seed = (seed * 1103515245 + 12345) >>> 0;
      return (seed >>> 8) % n;
    };
    const actions = ['block', 'block', 'skip', 'log'] as const;
    for (let round = 0; round < 40; round++) {
      const make = (n: number) => Array.from({ length: n }, () => {
        const lo = rnd(8);
        return { action: actions[rnd(4)]!, expression: `tcp.dstport >= ${lo} and tcp.dstport <= ${lo + rnd(4)}`, enabled: rnd(6) !== 0, action_parameters: { ruleset: 'current' } };
      });
      const input = { account: rs(make(1 + rnd(30)), 'account'), zone: rnd(3) === 0 ? undefined : rs(make(1 + rnd(30)), 'zone') };
      const evs = [compileBundle(input), compileBundle(input, { maxFunctionSource: 1 }), compileBundle(input, { maxFunctionSource: 150 + rnd(400) })];
      expect(evs[0]!.functions).toBe(1);
      for (let port = 0; port < 13; port++) {
        // The reference: rules in order, per level.
        const logged: number[] = [];
        const hits: number[] = [];
        let verdict = VERDICT_PASS;
        const rules = [...input.account.rules, ...(input.zone?.rules ?? [])];
        const nAccount = input.account.rules.length;
        levels: for (const [a, b] of [[0, nAccount], [nAccount, rules.length]] as const) {
          for (let i = a; i < b; i++) {
            const r = rules[i]!;
            const m = /(\d+) and tcp.dstport <= (\d+)/.exec(r.expression)!;
            if (!r.enabled || port < Number(m[1]) || port > Number(m[2])) continue;
            hits.push(i);
            if (r.action === 'block') {
              verdict = i;
              break levels;
            }
            if (r.action === 'skip') break;
            logged.push(i);
          }
        }
        for (const ev of evs) {
          ev.resetCounters();
          expect(ev.evaluate(packet(port), 10)).toBe(verdict);
          expect(Array.from(ev.logged.subarray(0, ev.loggedCount))).toEqual(logged);
          expect(Array.from(ev.hitPackets).flatMap((h, i) => (h === 1 ? [i] : []))).toEqual(hits);
        }
      }
    }
  });

  it('compiles a bundle too large for one function into chunks that agree with it', () => {
    // Over MAX_FUNCTION_SOURCE (V8 would not optimise one function): chunks of consecutive rules.
    const many = rs(Array.from({ length: 1200 }, (_, i) => ({ action: i % 7 === 3 ? 'log' : 'block', expression: `tcp.dstport == ${1000 + i}` })));
    const big = compileBundle({ account: many });
    const one = compileBundle({ account: many }, { maxFunctionSource: Infinity });
    expect(big.functions).toBeGreaterThan(1);
    expect(one.functions).toBe(1);
    for (const port of [1000, 1003, 1004, 1600, 2199, 2200]) {
      expect(big.evaluate(packet(port), 1)).toBe(one.evaluate(packet(port), 1));
      expect(big.loggedCount).toBe(one.loggedCount);
    }
    expect(big.evaluate(packet(2199), 1)).toBe(1199);
    expect(MAX_FUNCTION_SOURCE).toBeGreaterThan(1000);
  });

  it('uses the lists it is given, and empty managed lists when not given', () => {
    const r = rs([{ action: 'block', expression: 'ip.src in $office or ip.src in $cf.malware' }]);
    const withList = compileBundle({ account: r, lists: new Map([['office', IpRangeSet.fromStrings(['192.0.2.0/24'])]]) });
    expect(withList.evaluate(packet(1, '192.0.2.200'), 1)).toBe(0);
    expect(withList.evaluate(packet(1, '198.51.100.1'), 1)).toBe(VERDICT_PASS);
  });
});

describe('rejecting a bundle', () => {
  it('rejects it whole, naming every bad rule with a JSON pointer to its expression', () => {
    const bad = rs([
      { action: 'block', expression: 'tcp.dstport in {22, 23}' },
      { action: 'block', expression: 'tcp.dstport == 80' },
      { action: 'block', expression: 'ip.src in $nope' },
      { action: 'block', expression: 'foo == 1', id: 'r-4' },
    ], 'edge');
    try {
      compileBundle({ account: bad });
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(BundleError);
      const errors = (err as BundleError).errors;
      expect(errors.map((e) => [e.code, e.pointer])).toEqual([
        [1011, '/rules/0/expression'],
        [2006, '/rules/2/expression'],
        [2001, '/rules/3/expression'],
      ]);
      expect(errors[2]!.message).toBe('account ruleset "edge", rule 3 (r-4): unknown field foo');
    }
  });
});

describe('reading rulesets', () => {
  it('accepts the v4 envelope around a ruleset, as the API returns it', () => {
    const text = JSON.stringify({ success: true, errors: [], messages: [], result: { id: 'x', phase: 'network_transit', version: '3', rules: [{ id: 'a', action: 'block', expression: 'tcp.dstport == 1' }] } });
    const r = parseRuleset(text, 'entry.json');
    expect(r.version).toBe('3');
    expect(r.rules[0]).toMatchObject({ id: 'a', action: 'block', enabled: true });
  });

  it.each([
    ['{', 6001, undefined],
    ['[]', 6002, ''],
    ['{"rules": {}}', 6002, '/rules'],
    ['{"rules": [{"action": "drop", "expression": "x"}]}', 6007, '/rules/0/action'],
    ['{"rules": [{"action": "skip", "expression": "x"}]}', 6007, '/rules/0/action_parameters/ruleset'],
    ['{"rules": [{"action": "block"}]}', 6002, '/rules/0/expression'],
    ['{"rules": [{"action": "block", "expression": "x", "enabled": "yes"}]}', 6002, '/rules/0/enabled'],
    ['{"phase": "http_request_firewall_custom", "rules": []}', 6004, '/phase'],
    ['{"success": true, "result": {"rules": [{"action": 1, "expression": "x"}]}}', 6007, '/result/rules/0/action'],
  ])('rejects %s with code %i at %s', (text, code, pointer) => {
    try {
      parseRuleset(text, 'f.json');
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(MoatError);
      expect((err as MoatError).code).toBe(code);
      expect((err as MoatError).pointer).toBe(pointer);
      // A JSON syntax error also says the line and column.
      expect((err as MoatError).message).toMatch(/^f\.json(:\d+:\d+)?: /);
    }
  });
});
