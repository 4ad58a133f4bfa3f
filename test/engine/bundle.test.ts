// A bundle evaluates the account entrypoint, then the zone entrypoint, with
// block, skip and log semantics, counts per rule, and is rejected whole when
// any rule is bad.
import { describe, expect, it } from 'vitest';
import { BundleError, compileBundle, parseRuleset, toRuleset, VERDICT_PASS, type Ruleset } from '../../src/engine/index.js';
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

  it('keeps working across many rules (several generated functions)', () => {
    const many = rs(Array.from({ length: 100 }, (_, i) => ({ action: 'block', expression: `tcp.dstport == ${1000 + i}` })));
    const big = compileBundle({ account: many });
    expect(big.evaluate(packet(1000), 1)).toBe(0);
    expect(big.evaluate(packet(1099), 1)).toBe(99);
    expect(big.evaluate(packet(1100), 1)).toBe(VERDICT_PASS);
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
      expect((err as MoatError).message.startsWith('f.json: ')).toBe(true);
    }
  });
});
