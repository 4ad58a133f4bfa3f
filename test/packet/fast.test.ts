// The decoder's fast path (packet/fast.ts) writes exactly what the general
// decoder writes, for every frame it takes, and leaves every other frame to it:
// decode() and decodeGeneral() are run side by side on generated frames and on
// damaged, tagged, fragmented and extended variants of them, and the whole
// context and PacketInfo are compared.

import { describe, expect, it } from 'vitest';
import type { ExecutionContext } from '../../src/expr/index.js';
import { decode, decodeGeneral, LINKTYPE, PacketInfo, planFor, TRANSIT_SCHEME, type DecodePlan } from '../../src/packet/index.js';
import { decodeFast } from '../../src/packet/fast.js';
import { generatePackets, Rng } from '../support/diff-generator.js';
import { fragmentIpv4, fragmentIpv6, withIpv6Extensions, withVlanTags } from '../support/frame-builder-extra.js';

/** Everything decoding may write, as plain data (NaN kept as the string 'NaN' so that toEqual compares it). */
function state(ctx: ExecutionContext, info: PacketInfo) {
  return {
    ints: Array.from(ctx.ints, (v) => (Number.isNaN(v) ? 'NaN' : v)),
    bools: Array.from(ctx.bools),
    family: Array.from(ctx.ipFamily),
    ip4: Array.from(ctx.ip4),
    ip6: Array.from(ctx.ip6),
    bytes: ctx.bytesBuf.map((b, i) => (b === null ? null : [ctx.bytesStart[i], ctx.bytesEnd[i]])),
    text: [...ctx.bytesText],
    info: { ...info },
  };
}

// Frames of every kind the fast path must take or refuse.
function frames(rng: Rng): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const p of generatePackets(rng, 1500)) {
    const f = p.frame;
    out.push(f);
    const ip = f.subarray(14);
    const v6 = f[12] === 0x86;
    switch (rng.int(0, 10)) {
      case 0:
        out.push(withVlanTags(f, [{ tpid: 0x8100, vid: 7 }]));
        break;
      case 1:
        // Fragments: the first keeps the transport header, the others have none.
        for (const frag of v6 ? fragmentIpv6(ip, 16, 9) : fragmentIpv4(ip, 16)) out.push(ethernet(f, frag));
        break;
      case 2:
        if (v6) out.push(ethernet(f, withIpv6Extensions(ip, [{ kind: 'hop-by-hop', options: new Uint8Array(6) }])));
        break;
      case 3: {
        // Link-layer padding after the IP packet (short frames are padded to 60 bytes).
        const g = new Uint8Array(f.length + 1 + rng.int(0, 20));
        g.set(f);
        out.push(g);
        break;
      }
      case 4:
        // Cut short anywhere.
        out.push(f.slice(0, rng.int(0, f.length - 1)));
        break;
      case 5: {
        // An IP length that ends the packet inside or just past its transport header.
        const g = f.slice();
        const hdr = v6 ? 40 : (g[14]! & 15) * 4;
        const len = hdr + rng.int(0, 24);
        if (v6) g.set([(len - 40) >> 8, (len - 40) & 255], 18);
        else g.set([len >> 8, len & 255], 16);
        out.push(g);
        break;
      }
      default: {
        // A byte of the IP or transport header changed (lengths, IHL, flags, data offset, next header).
        const g = f.slice();
        const at = 14 + rng.int(0, Math.min(g.length - 15, v6 ? 60 : 40));
        g[at] = rng.int(0, 255);
        out.push(g);
      }
    }
  }
  return out;
}

function ethernet(template: Uint8Array, ipPacket: Uint8Array): Uint8Array {
  const g = new Uint8Array(14 + ipPacket.length);
  g.set(template.subarray(0, 14));
  g.set(ipPacket, 14);
  return g;
}

const PLANS: ReadonlyArray<[string, DecodePlan]> = [
  ['ports and flags', planFor(['tcp.dstport', 'tcp.flags.syn', 'udp.srcport', 'ip.src'])],
  ['TCP only', planFor(['tcp.flags', 'ip.ttl'])],
  ['addresses only', planFor(['ip.src', 'ip.len'])],
];

describe('the decoder fast path', () => {
  const all = frames(new Rng(7_301));

  for (const [name, plan] of PLANS) {
    it(`writes what the general decoder writes, frame by frame (plan: ${name})`, () => {
      expect(plan.fast).toBe(true);
      const a = TRANSIT_SCHEME.newContext();
      const b = TRANSIT_SCHEME.newContext();
      const ia = new PacketInfo();
      const ib = new PacketInfo();
      let fast = 0;
      for (const [i, f] of all.entries()) {
        // Inside a larger buffer, at an offset, as frames sit in a capture buffer.
        const buf = new Uint8Array(f.length + 9);
        buf.set(f, 3);
        a.reset();
        ia.reset();
        b.reset();
        ib.reset();
        decode(buf, 3, f.length, LINKTYPE.ETHERNET, a, ia, plan);
        decodeGeneral(buf, 3, f.length, LINKTYPE.ETHERNET, b, ib, plan);
        expect(state(a, ia), `frame ${i}`).toEqual(state(b, ib));
        const c = TRANSIT_SCHEME.newContext();
        if (decodeFast(buf, 3, f.length, c, new PacketInfo(), plan)) fast++;
      }
      // Both outcomes are exercised: most clean frames are taken, the variants often refused.
      expect(fast).toBeGreaterThan(all.length * 0.3);
      expect(fast).toBeLessThan(all.length * 0.9);
    });
  }

  it('is not used for plans that read raw bytes, SIP or protocol names', () => {
    for (const fields of [['tcp', 'ip.src'], ['ip'], ['sip'], ['ip.proto']]) expect(planFor(fields).fast, fields.join()).toBe(false);
  });

  it('refuses, having written nothing, every frame it does not take', () => {
    const plan = PLANS[0]![1];
    const fresh = state(TRANSIT_SCHEME.newContext(), new PacketInfo());
    let refused = 0;
    for (const f of all) {
      const c = TRANSIT_SCHEME.newContext();
      const info = new PacketInfo();
      if (decodeFast(f, 0, f.length, c, info, plan)) continue;
      refused++;
      expect(state(c, info)).toEqual(fresh);
    }
    expect(refused).toBeGreaterThan(100);
  });
});
