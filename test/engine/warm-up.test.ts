// Warm-up frames (engine/warm-up.ts) and PacketPath.warmUp(): a bundle's
// frames meet each rule's tests, `and`s and `not`s included, as frames of the
// packet program's kind; they are the same for the same rules; warming a path
// changes none of its counters, hits or logs, nor does warming it in slices
// with packets judged between them (the daemon's swap). (What warming
// saves, a first pass without deoptimisations, is measured by
// bench/pipeline.bench.ts in fresh processes.)

import { describe, expect, it } from 'vitest';
import { compileBundle, PacketPath, toRuleset, type Evaluator } from '../../src/engine/index.js';
import { fastFrame } from '../../src/packet/fast.js';
import { LINKTYPE } from '../../src/packet/index.js';
import { frameVariants } from '../support/frame-variants.js';
import { Rng } from '../support/diff-generator.js';

type RuleJson = { action: string; expression: string };

function compile(rules: RuleJson[]): Evaluator {
  return compileBundle({ account: toRuleset({ name: 'a', phase: 'network_transit', rules }) });
}

// Rules whose every test a random frame rarely meets: a port, then flags, lengths, TTLs, addresses.
const NARROW = [
  'tcp.dstport == 6644 and tcp.flags.syn and not tcp.flags.ack and ip.ttl < 3',
  'udp.dstport in {53 123 5353} and ip.len > 900',
  'tcp.flags & 0x29 and tcp.dstport == 407',
  'ip.src in {192.0.2.0/24 198.51.100.0/24} and tcp.dstport >= 61000',
  'ip.dst == 2001:db8::5 and udp.srcport != 53 and ip.ttl <= 1',
  'not tcp.flags.ack and not tcp.flags.syn and tcp.srcport == 1',
  'udp.srcport in {100..110} and not udp.dstport in {0..65000}',
  'tcp.dstport == 25 and (ip.ttl == 7 or ip.ttl == 9) and ip.len >= 1200',
];

describe('warm-up frames', () => {
  it('meet every test of each rule, `not`s included, as frames of the packet program', () => {
    for (const expression of NARROW) {
      const ev = compile([{ action: 'block', expression }]);
      const frames = ev.warmUpFrames;
      expect(frames.length, expression).toBeGreaterThan(0);
      const path = new PacketPath(ev, {});
      let met = 0;
      for (const f of frames) {
        expect(fastFrame(f, 0, f.length), `${expression}: a frame of the fast path`).toBeGreaterThanOrEqual(0);
        if (path.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET)) met++;
      }
      expect(met, `frames meeting "${expression}"`).toBeGreaterThan(0);
      // Not all: the other half probes the neighbours, where the tests fail.
      expect(met, expression).toBeLessThan(frames.length);
    }
  });

  it('are the same for the same rules', () => {
    const rules = NARROW.map((expression) => ({ action: 'block', expression }));
    const a = compile(rules).warmUpFrames;
    const b = compile(rules).warmUpFrames;
    expect(a.length).toBe(NARROW.length * 8);
    expect(a.map((f) => Buffer.from(f).toString('hex'))).toEqual(b.map((f) => Buffer.from(f).toString('hex')));
  });
});

describe('PacketPath.warmUp', () => {
  it('leaves counters, hits, logs and the last verdict as they were, and the path judges as an unwarmed one', () => {
    const rules = [
      { action: 'log', expression: 'tcp.dstport == 6644' },
      ...NARROW.map((expression) => ({ action: 'block', expression })),
    ];
    const rng = new Rng(5_150);
    const frames = frameVariants(rng.fork()).slice(0, 600);
    // With packet programs (the default) and without: every frame decoded into the context.
    for (const programs of [true, false]) {
      const ev = compile(rules);
      const twin = compile(rules);
      const warmed = new PacketPath(ev, { programs });
      const plain = new PacketPath(twin, { programs });
      const half = frames.length / 2;
      for (let i = 0; i < half; i++) {
        const f = frames[i]!;
        warmed.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET);
        plain.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET);
      }
      const before = { counters: Array.from(warmed.counters.v), hits: Array.from(ev.hitPackets), bytes: Array.from(ev.hitBytes), logged: ev.loggedCount, last: warmed.lastRule };
      warmed.warmUp();
      expect({ counters: Array.from(warmed.counters.v), hits: Array.from(ev.hitPackets), bytes: Array.from(ev.hitBytes), logged: ev.loggedCount, last: warmed.lastRule }).toEqual(before);
      for (let i = half; i < frames.length; i++) {
        const f = frames[i]!;
        expect(warmed.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET), `frame ${i}`).toBe(plain.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET));
        expect(warmed.lastRule).toBe(plain.lastRule);
      }
      expect(Array.from(warmed.counters.v)).toEqual(Array.from(plain.counters.v));
      expect(Array.from(ev.hitPackets)).toEqual(Array.from(twin.hitPackets));
      expect(warmed.counters.dropped, `programs: ${programs}`).toBeGreaterThan(0);
    }
  });

  it('in slices (as the daemon warms up between packets): every frame runs once, and packets judged between slices stay counted', () => {
    const rules = [
      { action: 'log', expression: 'tcp.dstport == 6644' },
      ...NARROW.map((expression) => ({ action: 'block', expression })),
    ];
    const frames = frameVariants(new Rng(77).fork()).slice(0, 200);
    const ev = compile(rules);
    const twin = compile(rules);
    const sliced = new PacketPath(ev, {});
    const plain = new PacketPath(twin, {});
    const total = ev.warmUpFrames.length;
    expect(total).toBe(72);
    // Count the frames each slice runs, through the path's own process().
    let processed = 0;
    const process = sliced.process.bind(sliced);
    sliced.process = (...args) => {
      processed++;
      return process(...args);
    };
    let next = 0;
    let slices = 0;
    let live = 0;
    while (next < total) {
      // A budget of 0 ms: a slice stops at the first time check, after 8 frames.
      const after = sliced.warmUpSlice(next, 0);
      expect(after - next).toBe(8);
      next = after;
      slices++;
      // Packets of the live traffic between two slices, judged and counted as usual.
      for (let k = 0; k < 10; k++, live++) {
        const f = frames[live]!;
        expect(process(f, 0, f.length, f.length, LINKTYPE.ETHERNET)).toBe(plain.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET));
      }
    }
    expect([slices, processed, sliced.warmUpSlice(total, 0)]).toEqual([9, 72, 72]);
    // What the slices ran left no trace; what ran between them did, as on a path never warmed.
    expect(Array.from(sliced.counters.v)).toEqual(Array.from(plain.counters.v));
    expect(Array.from(ev.hitPackets)).toEqual(Array.from(twin.hitPackets));
    expect(sliced.counters.packets).toBe(90);
  });
});
