// Frames for the tests of the decoder's fast path and of packet programs:
// generated IPv4/IPv6 TCP/UDP/ICMP frames (diff-generator.ts), and variants of
// them that the fast path must refuse or take with care: VLAN tags,
// fragments, IPv6 extension headers, link-layer padding, cuts anywhere,
// shortened IP lengths and changed header bytes.

import { generatePackets, type Rng } from './diff-generator.js';
import { fragmentIpv4, fragmentIpv6, withIpv6Extensions, withVlanTags } from './frame-builder-extra.js';

/** Generated frames and variants of them of every kind the fast path must take or refuse. */
export function frameVariants(rng: Rng): Uint8Array[] {
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
