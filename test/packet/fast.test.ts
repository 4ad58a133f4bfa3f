// The decoder's fast path (packet/fast.ts) writes exactly what the general
// decoder writes, for every frame it takes, and leaves every other frame to it:
// decode() and decodeGeneral() are run side by side on generated frames and on
// damaged, tagged, fragmented and extended variants of them, and the whole
// context and PacketInfo are compared.

import { describe, expect, it } from 'vitest';
import type { ExecutionContext } from '../../src/expr/index.js';
import { decode, decodeGeneral, LINKTYPE, PacketInfo, planFor, TRANSIT_SCHEME, type DecodePlan } from '../../src/packet/index.js';
import { decodeFast } from '../../src/packet/fast.js';
import { Rng } from '../support/diff-generator.js';
import { frameVariants as frames } from '../support/frame-variants.js';

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
