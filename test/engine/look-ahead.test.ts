// PacketPath.lookAhead (addresses looked up for a batch of frames before
// process() sees them) and PcapReader.ahead (where the next buffered packets
// are): the verdicts, matched rules and enriched fields are those of a path
// that does not look ahead, whatever the batch holds (the frames that follow,
// other frames, VLAN-tagged, IPv6, truncated or non-IP ones). Look-ahead
// serves eager lookups (PacketPathOptions.lookups), which these paths use.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openPcapFile, PcapReader } from '../../src/capture/index.js';
import { compileBundle, LOOK_AHEAD, PacketPath, tableLists, toRuleset } from '../../src/engine/index.js';
import { FIELD_SLOTS as F, LINKTYPE } from '../../src/packet/index.js';
import { buildFrame, TCP, type FrameSpec } from '../support/packet-builder.js';
import { fewestGcs } from '../support/gc.js';
import { geoByEightTable } from '../support/geo-by-eight.js';
import { Rng } from '../support/random.js';

// Countries and AS numbers by /8 (see geoByEightTable), two lists.
const table = geoByEightTable({
  bad: ['11.0.0.0/9', '12.1.2.0/24', '2001:db8::/48'],
  office: ['13.0.0.0/10', '14.5.0.0/16'],
});

const RULES = [
  'ip.src in $bad and tcp.dstport == 22',
  'ip.dst in $office',
  'ip.src.country in {"CN" "KP"} and udp.dstport == 53',
  'ip.dst.asnum == 64515',
  'ip.geoip.country == "SY" and ip.proto == "tcp"',
];

function evaluator() {
  return compileBundle({
    account: toRuleset({ name: 'a', phase: 'network_transit', rules: RULES.map((expression) => ({ action: 'block', expression })) }),
    lists: tableLists(table),
  });
}

function randomFrame(rng: Rng): Uint8Array {
  const six = rng.chance(0.2);
  const addr = () => (six ? rng.pick(['2001:db8::1', '2001:db9::2', '2001:db8:1::3']) : `${8 + rng.int(14)}.${rng.int(8)}.${rng.int(4)}.${rng.int(256)}`);
  const l4: FrameSpec['l4'] = rng.chance(0.5)
    ? { kind: 'tcp', srcPort: 1000, dstPort: rng.pick([22, 80]), flags: TCP.SYN }
    : { kind: 'udp', srcPort: 1000, dstPort: rng.pick([53, 123]), payload: new Uint8Array(8) };
  const ip: FrameSpec['ip'] = six ? { version: 6, src: addr(), dst: addr(), hopLimit: 64 } : { version: 4, src: addr(), dst: addr(), ttl: 64 };
  let f = buildFrame({ ip, l4 });
  const r = rng.next();
  if (r < 0.1) {
    // An 802.1Q tag: the look-ahead's fast path does not read it, process() does.
    const g = new Uint8Array(f.length + 4);
    g.set(f.subarray(0, 12), 0);
    g.set([0x81, 0x00, 0x00, 0x07], 12);
    g.set(f.subarray(12), 16);
    f = g;
  } else if (r < 0.15) {
    f = f.slice(0, 14 + rng.int(30)); // truncated inside the IP header
  } else if (r < 0.18) {
    f[12] = 0x08;
    f[13] = 0x06; // ARP
  }
  return f;
}

interface Seen { dropped: boolean; rule: number; enriched: number[] }

const ENRICHED = [F.IP_SRC_COUNTRY_KEY, F.IP_DST_COUNTRY_KEY, F.IP_SRC_ASNUM, F.IP_DST_ASNUM, F.IP_SRC_LISTS, F.IP_DST_LISTS];

function seen(path: PacketPath, dropped: boolean): Seen {
  return { dropped, rule: path.lastRule, enriched: ENRICHED.map((s) => path.ctx.ints[s]!) };
}

describe('PacketPath.lookAhead', () => {
  const rng = new Rng(4_011);
  const frames = Array.from({ length: 3000 }, () => randomFrame(rng));
  // All frames in one buffer, as a capture reader holds them.
  const offsets = new Int32Array(frames.length);
  const caplens = new Int32Array(frames.length);
  let size = 0;
  for (const [i, f] of frames.entries()) {
    offsets[i] = size;
    caplens[i] = f.length;
    size += f.length;
  }
  const buf = new Uint8Array(size);
  for (const [i, f] of frames.entries()) buf.set(f, offsets[i]);

  const plain = new PacketPath(evaluator(), { table, lookups: 'eager' });
  const reference = frames.map((f) => seen(plain, plain.process(f, 0, f.length, f.length, LINKTYPE.ETHERNET)));

  it('gives the verdicts, rules and enriched fields of a path without it, in batches of every size', () => {
    const path = new PacketPath(evaluator(), { table, lookups: 'eager' });
    let i = 0;
    let blocked = 0;
    while (i < frames.length) {
      const n = 1 + rng.int(LOOK_AHEAD + 8); // past LOOK_AHEAD, the rest is processed without a look-ahead
      path.lookAhead(buf, offsets.subarray(i), caplens.subarray(i), n, LINKTYPE.ETHERNET);
      for (let k = 0; k < n && i < frames.length; k++, i++) {
        const got = seen(path, path.process(buf, offsets[i]!, caplens[i]!, caplens[i]!, LINKTYPE.ETHERNET));
        expect(got, `frame ${i}`).toEqual(reference[i]);
        if (got.dropped) blocked++;
      }
    }
    // The rules match a fair share of the frames, through every enriched field.
    expect(blocked).toBeGreaterThan(300);
    expect(new Set(reference.map((r) => r.rule))).toEqual(new Set([-1, 0, 1, 2, 3, 4]));
  });

  it('never uses a look-ahead of other frames', () => {
    const path = new PacketPath(evaluator(), { table, lookups: 'eager' });
    const shuffled = Int32Array.from(offsets);
    const shuffledLens = Int32Array.from(caplens);
    for (let i = shuffled.length - 1; i > 0; i--) {
      const j = rng.int(i + 1);
      [shuffled[i], shuffled[j]] = [shuffled[j]!, shuffled[i]!];
      [shuffledLens[i], shuffledLens[j]] = [shuffledLens[j]!, shuffledLens[i]!];
    }
    for (let i = 0; i < frames.length; i++) {
      if (i % LOOK_AHEAD === 0) path.lookAhead(buf, shuffled.subarray(i), shuffledLens.subarray(i), LOOK_AHEAD, LINKTYPE.ETHERNET);
      expect(seen(path, path.process(buf, offsets[i]!, caplens[i]!, caplens[i]!, LINKTYPE.ETHERNET)), `frame ${i}`).toEqual(reference[i]);
    }
  });

  it('allocates nothing: lookAhead and process over 4.5M frames cause no garbage collection', async () => {
    const path = new PacketPath(evaluator(), { table, lookups: 'eager' });
    const frameCount = frames.length;
    // lookAhead reads its batch from offsets[0..): a batch per position, prepared once.
    const batches = Array.from({ length: Math.ceil(frameCount / LOOK_AHEAD) }, (_, b) => [offsets.slice(b * LOOK_AHEAD, (b + 1) * LOOK_AHEAD), caplens.slice(b * LOOK_AHEAD, (b + 1) * LOOK_AHEAD)] as const);
    const run = (): void => {
      for (let b = 0; b < batches.length; b++) {
        const [offs, lens] = batches[b]!;
        path.lookAhead(buf, offs, lens, offs.length, LINKTYPE.ETHERNET);
        for (let k = 0; k < offs.length; k++) path.process(buf, offs[k]!, lens[k]!, lens[k]!, LINKTYPE.ETHERNET);
      }
    };
    for (let r = 0; r < 20; r++) run(); // warm up and optimise
    // Fewest GCs of 3 rounds of 500 runs (other work in the process can cause one GC in a round).
    const fewest = await fewestGcs(() => {
      for (let r = 0; r < 500; r++) run();
    });
    expect(path.counters.packets).toBe(frameCount * (20 + 1500));
    expect(fewest).toBe(0);
  });

  it('lookAheadFrom asks the reader once per batch, and never when the rules need no lookup', () => {
    let asked = 0;
    const reader = {
      data: buf, offset: 0, caplen: caplens[0]!, linkType: LINKTYPE.ETHERNET,
      ahead: (offs: Int32Array, lens: Int32Array, at: number) => {
        asked++;
        offs.fill(0, at);
        lens.fill(caplens[0]!, at);
        return offs.length - at;
      },
    };
    const path = new PacketPath(evaluator(), { table, lookups: 'eager' });
    for (let i = 0; i < LOOK_AHEAD * 10; i++) {
      path.lookAheadFrom(reader);
      path.process(buf, 0, caplens[0]!, caplens[0]!, LINKTYPE.ETHERNET);
    }
    expect(asked).toBe(10);
    // Port rules only: no address is looked up, so there is nothing to look ahead for.
    const ports = compileBundle({ account: toRuleset({ name: 'a', phase: 'network_transit', rules: [{ action: 'block', expression: 'tcp.dstport == 22' }] }) });
    const noLookups = new PacketPath(ports, { table, lookups: 'eager' });
    asked = 0;
    for (let i = 0; i < LOOK_AHEAD * 10; i++) {
      noLookups.lookAheadFrom(reader);
      noLookups.process(buf, 0, caplens[0]!, caplens[0]!, LINKTYPE.ETHERNET);
    }
    expect(asked).toBe(0);
  });

  describe('over a capture (PcapReader.ahead, lookAheadFrom)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'moat-look-ahead-'));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'frames.pcap');
    // A small read buffer: batches end at buffer boundaries, and records straddle them.
    const w = openPcapFile(file);
    for (const f of frames) w.writePacket(f, 1_700_000_000);
    w.close();

    it('ahead() tells where the packets next() returns are, without advancing', () => {
      const r = PcapReader.open(file, { bufferSize: 4096 });
      const offs = new Int32Array(LOOK_AHEAD);
      const lens = new Int32Array(LOOK_AHEAD);
      let i = 0;
      let told = 0;
      while (r.next()) {
        const n = r.ahead(offs, lens, 0);
        told += n;
        // The next n packets are where ahead() said, and are the frames that follow.
        for (let k = 0; k < n; k++) {
          const f = frames[i + 1 + k]!;
          expect(lens[k]).toBe(f.length);
          expect(r.data.subarray(offs[k]!, offs[k]! + lens[k]!).equals(f), `frame ${i + 1 + k}`).toBe(true);
        }
        expect(r.data.subarray(r.offset, r.offset + r.caplen).equals(frames[i]!), `frame ${i}`).toBe(true);
        i++;
      }
      r.close();
      expect(i).toBe(frames.length);
      expect(told).toBeGreaterThan(frames.length * 10);
    });

    it('a replay loop with lookAheadFrom gives the same answers', () => {
      const path = new PacketPath(evaluator(), { table, lookups: 'eager' });
      const r = PcapReader.open(file, { bufferSize: 4096 });
      let i = 0;
      while (r.next()) {
        path.lookAheadFrom(r);
        expect(seen(path, path.process(r.data, r.offset, r.caplen, r.origLen, r.linkType)), `frame ${i}`).toEqual(reference[i]);
        i++;
      }
      r.close();
      expect(i).toBe(frames.length);
      expect(path.counters.dropped).toBe(plain.counters.dropped);
    });
  });
});
