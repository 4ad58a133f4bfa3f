// Packet programs (engine/packet-program.ts): a bundle fused with the decoder's fast
// path judges each frame it takes exactly as decoding into a context and
// running the bundle's function do (verdict, blocking rule, per-rule hits,
// logged rules, every path counter), on random bundles over random
// expressions of every field and random frames with damaged, tagged and
// fragmented variants; it takes exactly the frames the fast path takes; it is
// not built for rules that read what it does not decode; it allocates nothing.

import { describe, expect, it } from 'vitest';
import { compileBundle, PacketPath, tableLists, toRuleset, type Evaluator } from '../../src/engine/index.js';
import { FALLBACK, type ProgramHost } from '../../src/engine/packet-program.js';
import { fastFrame } from '../../src/packet/fast.js';
import { LINKTYPE, TRANSIT_SCHEME } from '../../src/packet/index.js';
import { generateCases, generatePackets, Rng } from '../support/diff-generator.js';
import { frameVariants } from '../support/frame-variants.js';
import { fewestGcs } from '../support/gc.js';
import { geoByEightTable } from '../support/geo-by-eight.js';

const table = geoByEightTable({
  bad: ['11.0.0.0/9', '12.1.2.0/24', '15.3.3.3', '2001:db8::/48'],
  office: ['13.0.0.0/10', '14.5.0.0/16', '12.1.2.128/25'],
});
// Tests of looked-up fields (lazy lookups, list screen, value screens) to mix in.
const LOOKED_UP = [
  'ip.src.country == "CN"', 'ip.dst.country in {"RU" "KP" "SY"}', 'ip.geoip.country != "CN"', 'ip.src.asnum > 64514',
  'ip.dst.asnum in {64510..64513}', 'ip.src in $bad', 'ip.dst in $office', 'not ip.dst in $bad',
];

type RuleJson = { action: string; expression: string; enabled?: boolean; action_parameters?: { ruleset: string } };

function randomRules(rng: Rng, expressions: readonly string[]): RuleJson[] {
  return Array.from({ length: rng.int(1, 8) }, () => {
    const r = rng.int(0, 99) / 100;
    const expression = rng.chance(0.25) ? rng.pick(LOOKED_UP) : rng.pick(expressions);
    const rule: RuleJson = r < 0.6 ? { action: 'block', expression } : r < 0.8 ? { action: 'log', expression } : { action: 'skip', expression, action_parameters: { ruleset: 'current' } };
    if (rng.chance(0.1)) rule.enabled = false;
    return rule;
  });
}

function compile(account: RuleJson[], zone: RuleJson[] | null): Evaluator {
  return compileBundle({
    account: toRuleset({ name: 'a', phase: 'network_transit', rules: account }),
    zone: zone === null ? undefined : toRuleset({ name: 'z', phase: 'network_transit', rules: zone }),
    lists: tableLists(table),
  });
}

describe('packet programs', () => {
  const rng = new Rng(60_221);
  const packets = generatePackets(rng.fork(), 400);
  // Random expressions over every field the generator knows, each true for some frames and false for others.
  const expressions = generateCases(rng.fork(), packets.map((p) => p.fields), 300).cases.map((c) => c.cf);
  const frames = frameVariants(rng.fork());

  it('judge every frame as decoding and the bundle function do: verdicts, rules, hits, logs and counters', () => {
    let programs = 0;
    let taken = 0;
    let dropped = 0;
    for (let b = 0; b < 80; b++) {
      const account = randomRules(rng, expressions);
      const zone = rng.chance(0.5) ? randomRules(rng, expressions) : null;
      const withProgram = compile(account, zone);
      const without = compile(account, zone);
      const x = new PacketPath(withProgram, { table });
      const y = new PacketPath(without, { table, programs: false });
      if (withProgram.program !== null) programs++;
      const where = [...account, ...(zone ?? [])].map((r) => `${r.action} ${r.expression}`).join(' | ');
      for (const [i, f] of frames.entries()) {
        // Inside a larger buffer, at an offset, as frames sit in a capture buffer.
        const buf = new Uint8Array(f.length + 5);
        buf.set(f, 2);
        const dx = x.process(buf, 2, f.length, f.length + 4, LINKTYPE.ETHERNET);
        const dy = y.process(buf, 2, f.length, f.length + 4, LINKTYPE.ETHERNET);
        const logsX = Array.from(withProgram.logged.subarray(0, withProgram.loggedCount));
        const logsY = Array.from(without.logged.subarray(0, without.loggedCount));
        if (dx !== dy || x.lastRule !== y.lastRule || logsX.join() !== logsY.join()) {
          expect({ frame: i, dropped: dx, rule: x.lastRule, logs: logsX }, where).toEqual({ frame: i, dropped: dy, rule: y.lastRule, logs: logsY });
        }
        if (dx) dropped++;
        if (withProgram.program !== null && fastFrame(buf, 2, f.length) >= 0) taken++;
      }
      expect(Array.from(withProgram.hitPackets), where).toEqual(Array.from(without.hitPackets));
      expect(Array.from(withProgram.hitBytes), where).toEqual(Array.from(without.hitBytes));
      expect(Array.from(x.counters.v), where).toEqual(Array.from(y.counters.v));
    }
    // Many bundles have a program (not those with a rule that orders IPv6 addresses or protocol names), programs took a good share of the frames, and the bundles drop some.
    expect(programs).toBeGreaterThan(30);
    expect(taken).toBeGreaterThan(programs * frames.length * 0.3);
    expect(dropped).toBeGreaterThan(80 * frames.length * 0.05);
  });

  it('hold the rules once per protocol, up to a size, and past it once for both, judging alike either way', () => {
    // A body over MAX_SPECIALISED_BODY but within one function.
    const account = Array.from({ length: 130 }, (_, i) => ({ action: i % 7 === 0 ? 'log' : 'block', expression: expressions[i % expressions.length]! }))
      .filter((r) => !/ip\.(src|dst) (<|>|le|ge|lt|gt)|ip\.proto (<|>|le|ge|lt|gt)/.test(r.expression));
    const small = compile(account.slice(0, 6), null);
    const large = compile(account, null);
    expect(small.program!.toString()).toContain('if ($tcp) {');
    expect(large.functions).toBe(1);
    expect(large.program, 'the large bundle has a program').not.toBeNull();
    expect(large.program!.toString()).not.toContain('if ($tcp) {');
    for (const ev of [small, large]) {
      const twin = compile(ev === small ? account.slice(0, 6) : account, null);
      const x = new PacketPath(ev, { table });
      const y = new PacketPath(twin, { table, programs: false });
      for (const [i, f] of frames.entries()) {
        const dx = x.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET);
        const dy = y.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET);
        if (dx !== dy || x.lastRule !== y.lastRule) expect({ frame: i, dropped: dx, rule: x.lastRule }).toEqual({ frame: i, dropped: dy, rule: y.lastRule });
      }
      expect(Array.from(ev.hitPackets)).toEqual(Array.from(twin.hitPackets));
      expect(x.counters.dropped).toBeGreaterThan(0);
    }
  });

  it('take exactly the frames of the fast path, and refuse the others having counted nothing', () => {
    const ev = compile([{ action: 'block', expression: 'tcp.dstport == 22 or udp.dstport == 53 or ip.src in $bad' }], null);
    const program = ev.program!;
    expect(program).not.toBeNull();
    const ctx = TRANSIT_SCHEME.newContext();
    const host: ProgramHost = { beginAt: () => undefined };
    let refused = 0;
    for (const f of frames) {
      const before = Array.from(ev.hitPackets);
      const r = program(f, 0, f.length, f.length, ctx, host);
      expect(r === FALLBACK).toBe(fastFrame(f, 0, f.length) < 0);
      if (r === FALLBACK) {
        refused++;
        expect(Array.from(ev.hitPackets)).toEqual(before);
      }
    }
    expect(refused).toBeGreaterThan(frames.length * 0.1);
    expect(refused).toBeLessThan(frames.length * 0.7);
  });

  it('are not built for rules that read bytes, nor for bundles split into several functions', () => {
    expect(compile([{ action: 'block', expression: 'tcp.dstport == 22' }], null).program).not.toBeNull();
    for (const expression of ['ip.src.country matches "^C"', 'tcp contains 01:02', 'ip.proto matches "^t"', 'sip']) {
      expect(compile([{ action: 'block', expression }], null).program, expression).toBeNull();
    }
    const rules = Array.from({ length: 40 }, (_, i) => ({ action: 'block', expression: `tcp.dstport == ${i + 1} and ip.ttl > ${i}` }));
    const split = compileBundle({ account: toRuleset({ name: 'a', phase: 'network_transit', rules }) }, { maxFunctionSource: 400 });
    expect(split.functions).toBeGreaterThan(1);
    expect(split.program).toBeNull();
  });

  it('allocate nothing per frame', async () => {
    const ev = compile([
      { action: 'block', expression: 'ip.src in $bad and tcp.flags.syn' },
      { action: 'log', expression: 'ip.dst.country == "RU"' },
      { action: 'block', expression: 'udp.dstport in {53 123} and ip.len > 100' },
    ], null);
    const path = new PacketPath(ev, { table });
    const clean = frames.filter((f) => fastFrame(f, 0, f.length) >= 0);
    const gcs = await fewestGcs(() => {
      for (let k = 0; k < 1_000_000; k++) {
        const f = clean[k % clean.length]!;
        path.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET);
      }
    });
    expect(path.counters.packets).toBeGreaterThan(2_000_000);
    expect(gcs).toBe(0);
  });
});
