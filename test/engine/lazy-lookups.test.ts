// Lazy lookups (engine/lazy-lookups.ts): countries, AS numbers and list bits
// are looked up when a rule first reads them, list bits through the list
// screen first. Random bundles over random frames give the verdicts, blocking
// rules and per-rule hits of the reference evaluator (test/support/
// reference-eval.ts) over every field of the frame, countries, AS numbers and
// lists included, with fewer lookups than looking every address up; rules
// that never get to an address's country cost no lookup; and processing
// allocates nothing.

import { describe, expect, it } from 'vitest';
import { compileBundle, PacketPath, tableLists, toRuleset, VERDICT_PASS, type Evaluator } from '../../src/engine/index.js';
import { parse } from '../../src/expr/index.js';
import { decode, FULL_PLAN, LINKTYPE, PacketInfo, TRANSIT_SCHEME } from '../../src/packet/index.js';
import { fewestGcs } from '../support/gc.js';
import { COUNTRIES_BY_EIGHT, geoByEightTable } from '../support/geo-by-eight.js';
import { buildFrame, TCP, type FrameSpec } from '../support/packet-builder.js';
import { Rng } from '../support/random.js';
import { readContext } from '../support/read-context.js';
import { refEval, refIp, type RefPacket } from '../support/reference-eval.js';

// Countries and AS numbers by /8 (see geoByEightTable), two lists.
const LISTS = {
  bad: ['11.0.0.0/9', '12.1.2.0/24', '15.3.3.3', '2001:db8::/48'],
  office: ['13.0.0.0/10', '14.5.0.0/16', '12.1.2.128/25'],
};
const table = geoByEightTable(LISTS);

// geoByEightTable's GeoIP data restated: 10.x to 19.x by /8, 2001:db8::/32 RU
// without an AS number; with aliases, ::ffff:0:0/96 and 2002::/16 answer with
// the IPv4 address they embed.
function geoOf(ip: string | undefined, aliases: boolean): { country?: string; asnum?: number } {
  if (ip === undefined) return {};
  const [fam, v0] = refIp(ip);
  let v = v0;
  if (fam === 6) {
    if (v >> 96n === 0x20010db8n) return { country: 'RU' };
    if (!aliases) return {};
    if (v >> 32n === 0xffffn) v &= 0xffffffffn;
    else if (v >> 112n === 0x2002n) v = (v >> 80n) & 0xffffffffn;
    else return {};
  }
  const top = Number(v >> 24n);
  return top >= 10 && top < 20 ? { country: COUNTRIES_BY_EIGHT[top - 10]!, asnum: 64510 + top - 10 } : {};
}

/** A frame's fields as the reference evaluator takes them: every decoded field, the looked-up ones too. */
function refPacket(f: Uint8Array, aliases = false): RefPacket {
  const ctx = TRANSIT_SCHEME.newContext();
  decode(f, 0, f.length, LINKTYPE.ETHERNET, ctx, new PacketInfo(), FULL_PLAN);
  const p: RefPacket = readContext(ctx);
  const src = geoOf(p['ip.src'] as string | undefined, aliases);
  const dst = geoOf(p['ip.dst'] as string | undefined, aliases);
  p['ip.src.country'] = src.country;
  p['ip.src.asnum'] = src.asnum;
  p['ip.dst.country'] = dst.country;
  p['ip.dst.asnum'] = dst.asnum;
  return p;
}

/**
 * What the bundle's rules do with a frame by the reference evaluator: the
 * first block rule that matches (VERDICT_PASS: none, or no source address:
 * undecodable, passed), and every rule that matched up to it (`hits`).
 */
function reference(bundle: Evaluator, p: RefPacket, hits: number[]): number {
  if (p['ip.src'] === undefined) return VERDICT_PASS;
  for (const [i, r] of bundle.rules.entries()) {
    if (!refEval(parse(r.rule.expression), p, LISTS)) continue;
    hits[i] = (hits[i] ?? 0) + 1;
    if (r.rule.action === 'block') return i;
  }
  return VERDICT_PASS;
}

/** Lookups a path makes that looks up, for every evaluated frame, each address present on each side the rules read. */
function everyAddressLookups(bundle: Evaluator, p: RefPacket): number {
  if (p['ip.src'] === undefined) return 0;
  const lists = bundle.lists.length > 0;
  const src = lists || ['ip.src.country', 'ip.geoip.country', 'ip.src.asnum'].some((f) => bundle.fields.includes(f));
  const dst = lists || ['ip.dst.country', 'ip.geoip.country', 'ip.dst.asnum'].some((f) => bundle.fields.includes(f));
  return (src ? 1 : 0) + (dst && p['ip.dst'] !== undefined ? 1 : 0);
}

// Tests that read the looked-up fields, in every form the compiler has (keyed
// comparisons, closures over the country's bytes, ordering, `!=`), and cheap ones.
const LOOKED_UP = [
  'ip.src.country == "CN"', 'ip.dst.country in {"RU" "KP" "SY"}', 'ip.geoip.country == "SY"', 'ip.src.country != "IR"',
  'ip.dst.country matches "^[CR]"', 'ip.src.country < "M"', 'ip.geoip.country != "CN"',
  'ip.src.asnum == 64512', 'ip.dst.asnum in {64510..64513}', 'ip.dst.asnum != 64515', 'ip.src.asnum > 64514',
  'ip.src in $bad', 'ip.dst in $office', 'not ip.dst in $bad', 'ip.src in $office',
];
const CHEAP = ['tcp.dstport == 22', 'udp.dstport == 53', 'ip.proto == "tcp"', 'ip.ttl > 60', 'tcp.flags.syn'];
// Tests that compare the GeoIP fields with literals only (`==`, `in`): what value screens serve.
const LITERAL = [
  'ip.src.country == "CN"', 'ip.dst.country in {"RU" "KP" "SY"}', 'ip.geoip.country == "SY"', 'not ip.src.country in {"IR" "CU"}',
  'ip.src.asnum == 64512', 'ip.dst.asnum in {64510..64511 64519}', 'not ip.dst.asnum == 64515', 'ip.src in $bad', 'ip.dst in $office',
];

function randomRule(rng: Rng, pool: readonly string[] = LOOKED_UP): string {
  const terms = Array.from({ length: 1 + rng.int(3) }, () => (rng.chance(0.65) ? rng.pick(pool) : rng.pick(CHEAP)));
  const e = terms.join(rng.chance(0.6) ? ' and ' : ' or ');
  return rng.chance(0.15) ? `not (${e})` : e;
}

/** An account-level bundle of `rules` over the lists of `over`. */
function bundleOf(rules: ReadonlyArray<{ action: string; expression: string }>, over = table) {
  return compileBundle({ account: toRuleset({ name: 'a', phase: 'network_transit', rules }), lists: tableLists(over) });
}

function randomBundle(rng: Rng, pool: readonly string[]) {
  return bundleOf(Array.from({ length: 3 + rng.int(8) }, () => ({
    action: rng.chance(0.15) ? 'log' : 'block',
    expression: randomRule(rng, pool),
  })));
}

function randomFrame(rng: Rng): Uint8Array {
  const six = rng.chance(0.2);
  const addr = () => (six ? rng.pick(['2001:db8::1', '2001:db9::2', '2001:db8:1::3']) : rng.pick([`${8 + rng.int(14)}.${rng.int(8)}.${rng.int(4)}.${rng.int(256)}`, '12.1.2.200', '15.3.3.3', '11.200.0.1']));
  const l4: FrameSpec['l4'] = rng.chance(0.5)
    ? { kind: 'tcp', srcPort: 1000, dstPort: rng.pick([22, 80]), flags: rng.pick([TCP.SYN, TCP.ACK]) }
    : { kind: 'udp', srcPort: 1000, dstPort: rng.pick([53, 123]), payload: new Uint8Array(8) };
  const ip: FrameSpec['ip'] = six ? { version: 6, src: addr(), dst: addr(), hopLimit: rng.pick([30, 64]) } : { version: 4, src: addr(), dst: addr(), ttl: rng.pick([30, 64]) };
  const f = buildFrame({ ip, l4 });
  const r = rng.next();
  if (r < 0.05) return f.slice(0, 14 + 12 + rng.int(12)); // cut inside the addresses: ip.dst (or both) absent
  if (r < 0.08) return f.slice(0, 14 + 40 + rng.int(6)); // IPv6 cut inside the destination
  return f;
}

describe('lazy lookups', () => {
  const rng = new Rng(9_125);
  const frames = Array.from({ length: 2000 }, () => randomFrame(rng));
  const packets = frames.map((f) => refPacket(f));

  it.each([
    ['any test of looked-up fields', LOOKED_UP, 0.6],
    ['only literal comparisons of countries and AS numbers (value screens)', LITERAL, 0.45],
  ])('give the verdicts, blocking rules and per-rule hits of the reference evaluator, with fewer lookups than every address: %s', (_name, pool, ratio) => {
    let lazyLookups = 0;
    let everyLookups = 0;
    let dropped = 0;
    for (let b = 0; b < 60; b++) {
      const bundle = randomBundle(rng, pool);
      const lazy = new PacketPath(bundle, { table });
      const hits: number[] = bundle.rules.map(() => 0);
      for (const [i, f] of frames.entries()) {
        const x = lazy.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET);
        const want = reference(bundle, packets[i]!, hits);
        if (x !== (want !== VERDICT_PASS) || lazy.lastRule !== want) {
          expect({ frame: i, dropped: x, rule: lazy.lastRule }, bundle.rules.map((r) => r.rule.expression).join(' | ')).toEqual({ frame: i, dropped: want !== VERDICT_PASS, rule: want });
        }
        if (x) dropped++;
        everyLookups += everyAddressLookups(bundle, packets[i]!);
      }
      expect(Array.from(bundle.hitPackets)).toEqual(hits);
      lazyLookups += lazy.counters.lookups;
    }
    // The bundles match a fair share of the frames, and lazy lookups do fewer lookups.
    expect(dropped).toBeGreaterThan(60 * frames.length * 0.1);
    expect(lazyLookups).toBeLessThan(everyLookups * ratio);
  });

  it('look nothing up for rules that never get to an address field', () => {
    const bundle = bundleOf([
        { action: 'block', expression: 'tcp.dstport == 9999 and ip.src.country == "CN"' },
        { action: 'block', expression: 'ip.dst.asnum == 64512 and ip.proto == "icmp"' },
      ]);
    const path = new PacketPath(bundle, { table });
    for (const f of frames) path.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET);
    expect(path.counters.packets).toBe(frames.length);
    expect(path.counters.lookups).toBe(0);
  });

  it('answer list reads from the list screen for addresses in no list', () => {
    const bundle = bundleOf([{ action: 'block', expression: 'ip.src in $bad' }]);
    const path = new PacketPath(bundle, { table });
    // 16.x and 17.x /24s hold no list range: no lookup; 11.x is listed (lookup, dropped); 15.3.3.x may be (lookup: .4 is not, passed).
    const frame = (src: string) => buildFrame({ ip: { version: 4, src, dst: '10.0.0.1', ttl: 9 }, l4: { kind: 'udp', srcPort: 1, dstPort: 2, payload: new Uint8Array(4) } });
    for (const src of ['16.0.0.1', '17.9.9.9', '16.200.1.1']) expect(path.process(frame(src), 0, 46, 46, LINKTYPE.ETHERNET), src).toBe(false);
    expect(path.counters.lookups).toBe(0);
    // Both addresses of each frame are screened (the destination 10.0.0.1 is in no list either).
    expect(path.counters.screened).toBe(6);
    expect(path.process(frame('11.2.3.4'), 0, 46, 46, LINKTYPE.ETHERNET)).toBe(true);
    expect(path.process(frame('15.3.3.4'), 0, 46, 46, LINKTYPE.ETHERNET)).toBe(false);
    expect(path.counters.lookups).toBe(2);
  });

  it('answer country and AS number reads from the value screens for addresses that match no literal', () => {
    const bundle = bundleOf([
        { action: 'block', expression: 'ip.dst.asnum == 64512 and ip.proto == "udp"' },
        { action: 'block', expression: 'ip.src.country in {"KP" "SY"}' },
      ]);
    const path = new PacketPath(bundle, { table });
    const frame = (src: string, dst: string) => buildFrame({ ip: { version: 4, src, dst, ttl: 9 }, l4: { kind: 'udp', srcPort: 1, dstPort: 2, payload: new Uint8Array(4) } });
    // 16.x: country BY, AS 64516; 10.x: CN, 64510. Neither is compared with: no lookup.
    for (const [src, dst] of [['16.0.0.1', '10.9.9.9'], ['10.1.1.1', '16.200.1.1']]) {
      expect(path.process(frame(src!, dst!), 0, 46, 46, LINKTYPE.ETHERNET), `${src} -> ${dst}`).toBe(false);
    }
    expect(path.counters.lookups).toBe(0);
    expect(path.counters.screened).toBe(4);
    // 12.x is AS 64512, 14.x is SY: looked up, and blocked.
    expect(path.process(frame('16.0.0.1', '12.0.0.1'), 0, 46, 46, LINKTYPE.ETHERNET)).toBe(true);
    expect(path.process(frame('14.0.0.1', '16.0.0.1'), 0, 46, 46, LINKTYPE.ETHERNET)).toBe(true);
    expect(path.counters.lookups).toBe(2);
    // A rule that reads an AS number otherwise (ordering) turns the screen off for that address.
    const ordering = bundleOf([{ action: 'block', expression: 'ip.dst.asnum > 64515 and ip.proto == "udp"' }]);
    const plain = new PacketPath(ordering, { table });
    expect(plain.process(frame('10.0.0.1', '16.0.0.1'), 0, 46, 46, LINKTYPE.ETHERNET)).toBe(true);
    expect(plain.counters.lookups).toBe(1);
  });

  it('answer IPv6 addresses in GeoIP alias prefixes (::ffff:0:0/96, 6to4) with the embedded IPv4 address\'s country and AS number, value screens and all', () => {
    const aliased = geoByEightTable({ bad: ['10.0.0.0/8'] }, [{ prefix: [0, 0, 0xffff, 0], length: 96 }, { prefix: [0x20020000, 0, 0, 0], length: 16 }]);
    const rules = [
      { action: 'block', expression: 'ip.src.country in {"CN" "SY"} and tcp.dstport == 22' },
      { action: 'block', expression: 'ip.dst.asnum == 64512' },
      { action: 'log', expression: 'ip.src in $bad' },
    ];
    const bundle = bundleOf(rules, aliased);
    const lazy = new PacketPath(bundle, { table: aliased });
    const refLists = { bad: ['10.0.0.0/8'] };
    // 10.x is CN, 14.x SY, 12.x AS 64512; 2002:0e01:0203:: embeds 14.1.2.3 and 2002:0c00:0001:: 12.0.0.1.
    const addrs = ['::ffff:10.1.2.3', '::ffff:16.1.2.3', '2002:e01:203::1', '2002:1001:203::1', '2002:c00:1::9', '2001:db8::1', '2400::1'];
    let blocked = 0;
    for (const src of addrs) {
      for (const dst of addrs) {
        const f = buildFrame({ ip: { version: 6, src, dst, hopLimit: 9 }, l4: { kind: 'tcp', srcPort: 1, dstPort: 22, flags: TCP.SYN } });
        const x = lazy.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET);
        const p = refPacket(f, true);
        const want = rules.findIndex((r) => r.action === 'block' && refEval(parse(r.expression), p, refLists));
        expect({ src, dst, dropped: x, rule: lazy.lastRule }).toEqual({ src, dst, dropped: want >= 0, rule: want >= 0 ? want : VERDICT_PASS });
        if (x) blocked++;
      }
    }
    // Sources ::ffff:10.1.2.3 and 2002:e01:203::1 (7 destinations each), and destination 2002:c00:1::9 from the 5 other sources.
    expect(blocked).toBe(2 * 7 + 5);
  });

  it('allocate nothing: 2M frames through lazy lookups cause no garbage collection', async () => {
    const bundle = bundleOf(LOOKED_UP.map((expression) => ({ action: 'log', expression })));
    const path = new PacketPath(bundle, { table });
    const run = (): void => {
      for (const f of frames) path.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET);
    };
    for (let r = 0; r < 20; r++) run();
    const fewest = await fewestGcs(() => {
      for (let r = 0; r < 300; r++) run();
    });
    expect(path.counters.lookups).toBeGreaterThan(0);
    expect(fewest).toBe(0);
  });
});
