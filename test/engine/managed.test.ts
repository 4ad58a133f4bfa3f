// Execute rules run a managed ruleset in place: the managed rules, gated by the
// execute rule's expression, with overrides by rule, by category and for the
// whole ruleset; the rules after the execute rule still run.
import { describe, expect, it } from 'vitest';
import { applyOverrides } from '../../src/engine/managed.js';
import { BundleError, compileBundle, toRuleset, VERDICT_PASS, type Ruleset } from '../../src/engine/index.js';
import { TRANSIT_SCHEME as S } from '../../src/packet/index.js';

const ctx = S.newContext();
function packet(dstport: number, ttl = 64): typeof ctx {
  ctx.reset();
  ctx.setInt(S.field('tcp.dstport').slot, dstport);
  ctx.setInt(S.field('ip.ttl').slot, ttl);
  ctx.setString(S.field('ip.proto').slot, 'tcp');
  return ctx;
}

const MANAGED_ID = 'aaaabbbbccccddddeeeeffff00001111';
const managed: Ruleset = toRuleset({
  id: MANAGED_ID,
  name: 'moat managed',
  phase: 'network_transit_managed',
  version: '3',
  rules: [
    { id: 'r1', action: 'block', expression: 'tcp.dstport == 23', categories: ['telnet', 'legacy'], enabled: true },
    { id: 'r2', action: 'log', expression: 'tcp.dstport == 21', categories: ['ftp', 'legacy'], enabled: true },
    { id: 'r3', action: 'block', expression: 'tcp.dstport == 3389', categories: ['rdp'], enabled: false },
  ],
});

function entry(params: Record<string, unknown>, gate = 'true', after: Array<Record<string, unknown>> = []): Ruleset {
  return toRuleset({
    name: 'entry',
    phase: 'network_transit',
    rules: [
      { action: 'skip', expression: 'tcp.dstport == 1', action_parameters: { ruleset: 'current' } },
      { action: 'execute', expression: gate, action_parameters: { id: MANAGED_ID, ...params } },
      ...after,
    ],
  });
}

const verdict = (ev: ReturnType<typeof compileBundle>, port: number, ttl?: number) => {
  const r = ev.evaluate(packet(port, ttl), 60);
  return r === VERDICT_PASS ? 'pass' : `${ev.rules[r]!.rule.id ?? '#' + r}:${ev.rules[r]!.rule.action}`;
};

describe('an execute rule', () => {
  it('runs the managed rules in place, with their own actions and enabled flags', () => {
    const ev = compileBundle({ account: entry({}, 'true', [{ id: 'after', action: 'block', expression: 'tcp.dstport in {21 3389}' }]), managed: new Map([[MANAGED_ID, managed]]) });
    expect(verdict(ev, 23)).toBe('r1:block');
    // r2 only logs, so the rule after the execute rule still blocks port 21
    expect(verdict(ev, 21)).toBe('after:block');
    expect(ev.loggedCount).toBe(1);
    expect(ev.rules[ev.logged[0]!]!.rule.id).toBe('r2');
    // r3 is disabled in the managed ruleset
    expect(verdict(ev, 3389)).toBe('after:block');
    expect(verdict(ev, 80)).toBe('pass');
    // a skip before the execute rule ends the ruleset, managed rules included
    expect(verdict(ev, 1)).toBe('pass');
    expect(ev.rules.filter((r) => r.from?.managedId === MANAGED_ID).map((r) => r.rule.id)).toEqual(['r1', 'r2', 'r3']);
  });

  it('applies its expression as a gate on every managed rule', () => {
    const ev = compileBundle({ account: entry({}, 'ip.ttl > 10'), managed: new Map([[MANAGED_ID, managed]]) });
    expect(verdict(ev, 23, 64)).toBe('r1:block');
    expect(verdict(ev, 23, 5)).toBe('pass');
  });

  it('overrides by rule over category over the whole ruleset', () => {
    const ev = compileBundle({
      account: entry({
        overrides: {
          action: 'log',
          categories: [{ category: 'legacy', action: 'block' }, { category: 'rdp', enabled: true }],
          rules: [{ id: 'r1', action: 'log' }],
        },
      }),
      managed: new Map([[MANAGED_ID, managed]]),
    });
    expect(verdict(ev, 23)).toBe('pass'); // r1: rule override says log
    expect(verdict(ev, 21)).toBe('r2:block'); // r2: category legacy says block
    expect(verdict(ev, 3389)).toBe('pass'); // r3: enabled by category, action log from the ruleset override
    expect(ev.loggedCount).toBe(1);
  });

  it('resolves overrides in the documented order', () => {
    const exec = entry({ overrides: { enabled: false, categories: [{ category: 'ftp', enabled: true }], rules: [{ id: 'r1', enabled: true, action: 'log' }] } }).rules[1]!;
    expect(applyOverrides(exec, managed.rules[0]!)).toEqual({ action: 'log', enabled: true });
    expect(applyOverrides(exec, managed.rules[1]!)).toEqual({ action: 'log', enabled: true });
    expect(applyOverrides(exec, managed.rules[2]!)).toEqual({ action: 'block', enabled: false });
  });

  it('runs nothing when it is disabled', () => {
    const rs = entry({});
    const disabled = toRuleset({ ...rs, rules: rs.rules.map((r) => (r.action === 'execute' ? { ...r, enabled: false } : r)) });
    const ev = compileBundle({ account: disabled, managed: new Map([[MANAGED_ID, managed]]) });
    expect(verdict(ev, 23)).toBe('pass');
  });

  it('rejects the bundle when the managed ruleset is missing or pinned to another version', () => {
    expect(() => compileBundle({ account: entry({}) })).toThrow(BundleError);
    try {
      compileBundle({ account: entry({ version: '2' }), managed: new Map([[MANAGED_ID, managed]]) });
      expect.unreachable();
    } catch (err) {
      expect((err as BundleError).errors[0]!.code).toBe(6006);
      expect((err as BundleError).errors[0]!.message).toMatch(/pins version 2 .* version 3 was given/);
    }
    expect(() => compileBundle({ account: entry({ version: '3' }), managed: new Map([[MANAGED_ID, managed]]) })).not.toThrow();
  });

  it('gives the same verdicts as the same rules written out by hand', () => {
    const ev = compileBundle({
      account: entry({ overrides: { categories: [{ category: 'rdp', enabled: true }] } }, 'ip.ttl >= 32'),
      managed: new Map([[MANAGED_ID, managed]]),
    });
    const flat = compileBundle({
      account: toRuleset({
        phase: 'network_transit',
        rules: [
          { action: 'skip', expression: 'tcp.dstport == 1', action_parameters: { ruleset: 'current' } },
          { id: 'r1', action: 'block', expression: 'ip.ttl >= 32 and tcp.dstport == 23' },
          { id: 'r2', action: 'log', expression: 'ip.ttl >= 32 and tcp.dstport == 21' },
          { id: 'r3', action: 'block', expression: 'ip.ttl >= 32 and tcp.dstport == 3389' },
        ],
      }),
    });
    for (const port of [1, 21, 22, 23, 80, 3389]) {
      for (const ttl of [1, 31, 32, 200]) {
        const a = ev.evaluate(packet(port, ttl), 60);
        const la = ev.loggedCount;
        const b = flat.evaluate(packet(port, ttl), 60);
        expect([port, ttl, a, la]).toEqual([port, ttl, b, flat.loggedCount]);
      }
    }
  });
});
