// The decoder's fast path: untagged Ethernet carrying IPv4 without options or
// IPv6 without extension headers, not fragmented, whole in the capture, with a
// complete TCP or UDP header, for plans without raw bytes, protocol names or
// SIP. That is most of the traffic a gateway sees, and for it this writes
// exactly what the general decoder (decode.ts, ip.ts, transport.ts) writes, in
// one function with one check per condition; anything else returns false
// before writing and the general decoder takes the frame. One function costs
// less per packet than the layer decoders' calls and checks (measured:
// bench/pipeline.bench.ts, "without packet programs").

import type { ExecutionContext } from '../expr/index.js';
import * as LAYOUT from './layout.js';
import type { DecodePlan } from './plan.js';
import * as SLOTS from './slots.js';
import { setTcpFlags } from './transport.js';
import type { PacketInfo } from './view.js';
import * as VIEW from './view.js';
import { checkCopies, prefixed } from './literal.js';

// Literal copies of slots and constants (see literal.ts: V8 folds these, not imported bindings).
const IP_DST = 1;
const IP_HDR_LEN = 1;
const IP_LEN = 0;
const IP_PROTO_NUMBER = 15;
const IP_SRC = 0;
const IP_TTL = 2;
const TCP_DSTPORT = 7;
const TCP_SRCPORT = 6;
const UDP_DSTPORT = 10;
const UDP_SRCPORT = 9;
const ST_IP = 1;
checkCopies('packet/fast', SLOTS, { IP_DST, IP_HDR_LEN, IP_LEN, IP_PROTO_NUMBER, IP_SRC, IP_TTL, TCP_DSTPORT, TCP_SRCPORT, UDP_DSTPORT, UDP_SRCPORT });
checkCopies('packet/fast', VIEW, { ST_IP });
if (IP_DST !== IP_SRC + 1) throw new Error('packet/fast: ip.dst must follow ip.src');
// Header offsets (layout.ts).
const AT_ETH_HEADER = 14;
const AT_ETH_TYPE = 12;
const AT_IP4_DST = 16;
const AT_IP4_FLAGS_FRAGMENT = 6;
const AT_IP4_HEADER = 20;
const AT_IP4_PROTOCOL = 9;
const AT_IP4_SRC = 12;
const AT_IP4_TOTAL_LENGTH = 2;
const AT_IP4_TTL = 8;
const AT_IP4_VERSION_IHL = 0;
const AT_IP6_HEADER = 40;
const AT_IP6_HOP_LIMIT = 7;
const AT_IP6_NEXT_HEADER = 6;
const AT_IP6_PAYLOAD_LENGTH = 4;
const AT_IP6_SRC = 8;
const AT_IP6_VERSION = 0;
const AT_L4_AFTER_IP4 = 34;
const AT_L4_AFTER_IP6 = 54;
const AT_TCP_DATA_OFFSET = 12;
const AT_TCP_DSTPORT = 2;
const AT_TCP_FLAGS = 13;
const AT_TCP_HEADER = 20;
const AT_TCP_SRCPORT = 0;
const AT_UDP_DSTPORT = 2;
const AT_UDP_HEADER = 8;
const AT_UDP_SRCPORT = 0;
checkCopies('packet/fast', prefixed('AT_', LAYOUT), {
  AT_ETH_HEADER, AT_ETH_TYPE, AT_IP4_DST, AT_IP4_FLAGS_FRAGMENT, AT_IP4_HEADER, AT_IP4_PROTOCOL, AT_IP4_SRC, AT_IP4_TOTAL_LENGTH, AT_IP4_TTL,
  AT_IP4_VERSION_IHL, AT_IP6_HEADER, AT_IP6_HOP_LIMIT, AT_IP6_NEXT_HEADER, AT_IP6_PAYLOAD_LENGTH, AT_IP6_SRC, AT_IP6_VERSION, AT_L4_AFTER_IP4,
  AT_L4_AFTER_IP6, AT_TCP_DATA_OFFSET, AT_TCP_DSTPORT, AT_TCP_FLAGS, AT_TCP_HEADER, AT_TCP_SRCPORT, AT_UDP_DSTPORT, AT_UDP_HEADER, AT_UDP_SRCPORT,
});
if (LAYOUT.IP6_DST !== LAYOUT.IP6_SRC + 16) throw new Error('packet/fast: the IPv6 destination must follow the source');

/**
 * The fast path's frame test, shared by decodeFast() and the packet programs
 * the engine generates (engine/packet-program.ts): when buf[off, off + caplen) is an
 * Ethernet frame of the common kind (see the header), returns the offset of
 * its transport header from `off` (34 for IPv4, 54 for IPv6) plus its
 * protocol (6 or 17) times 256; otherwise -1. The IP header starts at off + 14.
 * One test for both, so that they cannot disagree on which frames they take.
 * It costs decodeFast() something against the same checks written inline
 * (measured: bench/pipeline.bench.ts, "without packet programs"), but with
 * packet programs (the default) decodeFast() sees only the frames of
 * bundles that have none.
 */
export function fastFrame(buf: Uint8Array, off: number, caplen: number): number {
  // The smallest frame taken: Ethernet + IPv4 + UDP.
  if (caplen < AT_L4_AFTER_IP4 + AT_UDP_HEADER) return -1;
  const p = off + AT_ETH_HEADER;
  const end = off + caplen;
  const et = (buf[off + AT_ETH_TYPE]! << 8) | buf[off + AT_ETH_TYPE + 1]!;
  let l3End: number;
  let l4: number;
  let proto: number;
  if (et === 0x0800) {
    // Version 4, IHL 5 (no options); total length covers the header and lies
    // within the capture; fragment offset 0 and MF clear (DF may be set).
    if (buf[p + AT_IP4_VERSION_IHL] !== 0x45) return -1;
    const total = (buf[p + AT_IP4_TOTAL_LENGTH]! << 8) | buf[p + AT_IP4_TOTAL_LENGTH + 1]!;
    if (total < AT_IP4_HEADER || p + total > end) return -1;
    if ((((buf[p + AT_IP4_FLAGS_FRAGMENT]! << 8) | buf[p + AT_IP4_FLAGS_FRAGMENT + 1]!) & 0x3fff) !== 0) return -1;
    proto = buf[p + AT_IP4_PROTOCOL]!;
    l3End = p + total;
    l4 = AT_L4_AFTER_IP4;
  } else if (et === 0x86dd) {
    // Version 6, a payload length that is not 0 (jumbogram, TSO) and lies
    // within the capture, and TCP or UDP right after the fixed header.
    if (buf[p + AT_IP6_VERSION]! >>> 4 !== 6) return -1;
    const plen = (buf[p + AT_IP6_PAYLOAD_LENGTH]! << 8) | buf[p + AT_IP6_PAYLOAD_LENGTH + 1]!;
    if (plen === 0 || p + AT_IP6_HEADER + plen > end) return -1;
    proto = buf[p + AT_IP6_NEXT_HEADER]!;
    l3End = p + AT_IP6_HEADER + plen;
    l4 = AT_L4_AFTER_IP6;
  } else {
    return -1;
  }
  if (proto === 6) {
    // A whole TCP header with a valid data offset (else the general decoder flags it).
    if (l3End - off - l4 < AT_TCP_HEADER || buf[off + l4 + AT_TCP_DATA_OFFSET]! >>> 4 < 5) return -1;
  } else if (proto === 17) {
    if (l3End - off - l4 < AT_UDP_HEADER) return -1;
  } else {
    return -1;
  }
  return l4 | (proto << 8);
}

/**
 * Decodes the Ethernet frame buf[off, off + caplen) when it is of the common
 * kind (see the header) and `plan.fast`; returns false, having written
 * nothing, otherwise. The caller resets `ctx` and `info` first, as for decode().
 */
export function decodeFast(buf: Uint8Array, off: number, caplen: number, ctx: ExecutionContext, info: PacketInfo, plan: DecodePlan): boolean {
  const fr = fastFrame(buf, off, caplen);
  if (fr < 0) return false;
  const p = off + AT_ETH_HEADER;
  const l4 = off + (fr & 255);
  const proto = fr >>> 8;
  const v4 = (fr & 255) === AT_L4_AFTER_IP4;
  // Accepted: from here on, the same writes as the general decoder.
  const ints = ctx.ints;
  info.status = ST_IP;
  info.etherType = v4 ? 0x0800 : 0x86dd;
  info.l3Offset = p;
  info.protocol = proto;
  info.l4Offset = l4;
  ints[IP_PROTO_NUMBER] = proto;
  const fam = ctx.ipFamily;
  if (v4) {
    const total = (buf[p + AT_IP4_TOTAL_LENGTH]! << 8) | buf[p + AT_IP4_TOTAL_LENGTH + 1]!;
    info.l3End = p + total;
    info.ipVersion = 4;
    ints[IP_HDR_LEN] = 5;
    ints[IP_LEN] = total;
    ints[IP_TTL] = buf[p + AT_IP4_TTL]!;
    fam[IP_SRC] = 4;
    fam[IP_DST] = 4;
    const a4 = ctx.ip4;
    const s = p + AT_IP4_SRC;
    const d = p + AT_IP4_DST;
    a4[IP_SRC] = ((buf[s]! << 24) | (buf[s + 1]! << 16) | (buf[s + 2]! << 8) | buf[s + 3]!) >>> 0;
    a4[IP_DST] = ((buf[d]! << 24) | (buf[d + 1]! << 16) | (buf[d + 2]! << 8) | buf[d + 3]!) >>> 0;
  } else {
    const total = AT_IP6_HEADER + ((buf[p + AT_IP6_PAYLOAD_LENGTH]! << 8) | buf[p + AT_IP6_PAYLOAD_LENGTH + 1]!);
    info.l3End = p + total;
    info.ipVersion = 6;
    ints[IP_LEN] = total;
    ints[IP_TTL] = buf[p + AT_IP6_HOP_LIMIT]!;
    fam[IP_SRC] = 6;
    fam[IP_DST] = 6;
    const a6 = ctx.ip6;
    // Source then destination, in the frame as in the context (both checked above).
    for (let k = 0; k < 8; k++) {
      const o = p + AT_IP6_SRC + k * 4;
      a6[IP_SRC * 4 + k] = ((buf[o]! << 24) | (buf[o + 1]! << 16) | (buf[o + 2]! << 8) | buf[o + 3]!) >>> 0;
    }
  }
  if (proto === 6) {
    if (plan.tcp) {
      ints[TCP_SRCPORT] = (buf[l4 + AT_TCP_SRCPORT]! << 8) | buf[l4 + AT_TCP_SRCPORT + 1]!;
      ints[TCP_DSTPORT] = (buf[l4 + AT_TCP_DSTPORT]! << 8) | buf[l4 + AT_TCP_DSTPORT + 1]!;
      setTcpFlags(ctx, buf[l4 + AT_TCP_FLAGS]!);
    }
  } else if (plan.udp) {
    ints[UDP_SRCPORT] = (buf[l4 + AT_UDP_SRCPORT]! << 8) | buf[l4 + AT_UDP_SRCPORT + 1]!;
    ints[UDP_DSTPORT] = (buf[l4 + AT_UDP_DSTPORT]! << 8) | buf[l4 + AT_UDP_DSTPORT + 1]!;
  }
  return true;
}
