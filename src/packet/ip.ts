// IPv4 (RFC 791 §3.1) and IPv6 (RFC 8200 §3, §4) decoders. They write the IP
// fields into the context and hand the transport header to transport.ts. A
// non-first fragment has no transport header; a header cut by the capture
// leaves the fields it could not read absent and sets ST_TRUNCATED.

import type { ExecutionContext } from '../expr/index.js';
import * as CONSTANTS from './constants.js';
import * as LAYOUT from './layout.js';
import { setProto } from './proto-names.js';
import type { DecodePlan } from './plan.js';
import * as SLOTS from './slots.js';
import { decodeIcmp, decodeTcp, decodeUdp } from './transport.js';
import type { PacketInfo } from './view.js';
import * as VIEW from './view.js';
import { checkCopies, prefixed } from './literal.js';

// Literal copies of slots and constants (see literal.ts: V8 folds these, not imported bindings).
const PROTO_AH = 51;
const PROTO_DSTOPTS = 60;
const PROTO_FRAGMENT = 44;
const PROTO_HOPOPT = 0;
const PROTO_ICMP = 1;
const PROTO_ICMPV6 = 58;
const PROTO_ROUTING = 43;
const PROTO_TCP = 6;
const PROTO_UDP = 17;
const IP_DST = 1;
const IP_HDR_LEN = 1;
const IP_LEN = 0;
const IP_OPT_TYPE = 3;
const IP_PROTO_NUMBER = 15;
const IP_SRC = 0;
const IP_TTL = 2;
const RAW_IP = 3;
const ST_FRAGMENT = 8;
const ST_IP = 1;
const ST_MALFORMED = 4;
const ST_TRUNCATED = 2;
checkCopies('packet/ip', CONSTANTS, { PROTO_AH, PROTO_DSTOPTS, PROTO_FRAGMENT, PROTO_HOPOPT, PROTO_ICMP, PROTO_ICMPV6, PROTO_ROUTING, PROTO_TCP, PROTO_UDP });
checkCopies('packet/ip', SLOTS, { IP_DST, IP_HDR_LEN, IP_LEN, IP_OPT_TYPE, IP_PROTO_NUMBER, IP_SRC, IP_TTL, RAW_IP });
checkCopies('packet/ip', VIEW, { ST_FRAGMENT, ST_IP, ST_MALFORMED, ST_TRUNCATED });
// Header offsets (layout.ts).
const AT_EXT_LENGTH = 1;
const AT_EXT_MIN = 8;
const AT_EXT_NEXT_HEADER = 0;
const AT_FRAG_OFFSET = 2;
const AT_IP4_DST = 16;
const AT_IP4_FLAGS_FRAGMENT = 6;
const AT_IP4_HEADER = 20;
const AT_IP4_PROTOCOL = 9;
const AT_IP4_SRC = 12;
const AT_IP4_TOTAL_LENGTH = 2;
const AT_IP4_TTL = 8;
const AT_IP4_VERSION_IHL = 0;
const AT_IP6_DST = 24;
const AT_IP6_HEADER = 40;
const AT_IP6_HOP_LIMIT = 7;
const AT_IP6_NEXT_HEADER = 6;
const AT_IP6_PAYLOAD_LENGTH = 4;
const AT_IP6_SRC = 8;
const AT_IP6_VERSION = 0;
checkCopies('packet/ip', prefixed('AT_', LAYOUT), {
  AT_EXT_LENGTH, AT_EXT_MIN, AT_EXT_NEXT_HEADER, AT_FRAG_OFFSET, AT_IP4_DST, AT_IP4_FLAGS_FRAGMENT, AT_IP4_HEADER, AT_IP4_PROTOCOL, AT_IP4_SRC,
  AT_IP4_TOTAL_LENGTH, AT_IP4_TTL, AT_IP4_VERSION_IHL, AT_IP6_DST, AT_IP6_HEADER, AT_IP6_HOP_LIMIT, AT_IP6_NEXT_HEADER, AT_IP6_PAYLOAD_LENGTH,
  AT_IP6_SRC, AT_IP6_VERSION,
});

/** Most extension headers followed before giving up (a chain longer than this is malformed). */
const MAX_EXT_HEADERS = 16;

function u32(buf: Uint8Array, o: number): number {
  return ((buf[o]! << 24) | (buf[o + 1]! << 16) | (buf[o + 2]! << 8) | buf[o + 3]!) >>> 0;
}

/** Decodes an IPv4 header at `off`; `end` is the end of the captured bytes. */
export function decodeIpv4(buf: Uint8Array, off: number, end: number, ctx: ExecutionContext, info: PacketInfo, plan: DecodePlan): void {
  const n = end - off;
  info.status |= ST_IP;
  info.ipVersion = 4;
  info.l3Offset = off;
  info.l3End = end;
  if (n < 1) {
    info.status |= ST_TRUNCATED;
    return;
  }
  const ihl = buf[off + AT_IP4_VERSION_IHL]! & 15;
  if (buf[off + AT_IP4_VERSION_IHL]! >>> 4 !== 4) {
    info.status |= ST_MALFORMED;
    return;
  }
  const ints = ctx.ints;
  ints[IP_HDR_LEN] = ihl;
  if (ihl < 5) info.status |= ST_MALFORMED;
  if (n >= AT_IP4_TOTAL_LENGTH + 2) {
    const total = (buf[off + AT_IP4_TOTAL_LENGTH]! << 8) | buf[off + AT_IP4_TOTAL_LENGTH + 1]!;
    // A zero total length is what TSO-offloaded captures show: take the captured length.
    if (total === 0) {
      ints[IP_LEN] = n;
    } else {
      ints[IP_LEN] = total;
      if (total < ihl * 4) info.status |= ST_MALFORMED;
      else if (off + total < end) info.l3End = off + total; // drop link-layer padding
      else if (off + total > end) info.status |= ST_TRUNCATED;
    }
  }
  if (n > AT_IP4_TTL) ints[IP_TTL] = buf[off + AT_IP4_TTL]!;
  if (n > AT_IP4_PROTOCOL) {
    const proto = buf[off + AT_IP4_PROTOCOL]!;
    info.protocol = proto;
    ints[IP_PROTO_NUMBER] = proto;
    if (plan.protoBytes) setProto(ctx, proto);
  }
  if (n >= AT_IP4_SRC + 4) ctx.setIp4(IP_SRC, u32(buf, off + AT_IP4_SRC));
  if (n >= AT_IP4_DST + 4) ctx.setIp4(IP_DST, u32(buf, off + AT_IP4_DST));
  else {
    info.status |= ST_TRUNCATED;
    return;
  }
  const hlen = ihl * 4;
  // The first option follows the fixed header.
  if (ihl > 5 && n > AT_IP4_HEADER) ints[IP_OPT_TYPE] = buf[off + AT_IP4_HEADER]!;
  if (plan.raw) ctx.setBytes(RAW_IP, buf, off, info.l3End);
  if (hlen > n) {
    info.status |= ST_TRUNCATED;
    return;
  }
  if (ihl < 5 || (info.status & ST_MALFORMED) !== 0) return;
  // RFC 791: fragment offset in 8-byte units, low 13 bits of bytes 6-7.
  if ((((buf[off + AT_IP4_FLAGS_FRAGMENT]! << 8) | buf[off + AT_IP4_FLAGS_FRAGMENT + 1]!) & 0x1fff) !== 0) {
    info.status |= ST_FRAGMENT;
    return;
  }
  transport(buf, off + hlen, info.l3End, ctx, info, plan, PROTO_ICMP);
}

/** Decodes an IPv6 header and its extension headers at `off`. */
export function decodeIpv6(buf: Uint8Array, off: number, end: number, ctx: ExecutionContext, info: PacketInfo, plan: DecodePlan): void {
  const n = end - off;
  info.status |= ST_IP;
  info.ipVersion = 6;
  info.l3Offset = off;
  info.l3End = end;
  if (n < 1) {
    info.status |= ST_TRUNCATED;
    return;
  }
  if (buf[off + AT_IP6_VERSION]! >>> 4 !== 6) {
    info.status |= ST_MALFORMED;
    return;
  }
  const ints = ctx.ints;
  if (n >= AT_IP6_PAYLOAD_LENGTH + 2) {
    const plen = (buf[off + AT_IP6_PAYLOAD_LENGTH]! << 8) | buf[off + AT_IP6_PAYLOAD_LENGTH + 1]!;
    // Payload length 0 is a jumbogram or a TSO capture: take the captured length.
    if (plen === 0) ints[IP_LEN] = n;
    else {
      ints[IP_LEN] = AT_IP6_HEADER + plen;
      if (off + AT_IP6_HEADER + plen < end) info.l3End = off + AT_IP6_HEADER + plen;
      else if (off + AT_IP6_HEADER + plen > end) info.status |= ST_TRUNCATED;
    }
  }
  if (n > AT_IP6_HOP_LIMIT) ints[IP_TTL] = buf[off + AT_IP6_HOP_LIMIT]!;
  const s = off + AT_IP6_SRC;
  if (n >= AT_IP6_SRC + 16) ctx.setIp6(IP_SRC, u32(buf, s), u32(buf, s + 4), u32(buf, s + 8), u32(buf, s + 12));
  if (n < AT_IP6_HEADER) {
    info.status |= ST_TRUNCATED;
    return;
  }
  const d = off + AT_IP6_DST;
  ctx.setIp6(IP_DST, u32(buf, d), u32(buf, d + 4), u32(buf, d + 8), u32(buf, d + 12));
  if (plan.raw) ctx.setBytes(RAW_IP, buf, off, info.l3End);
  const l3End = info.l3End;
  let nh = buf[off + AT_IP6_NEXT_HEADER]!;
  let p = off + AT_IP6_HEADER;
  // Walk the extension headers to the upper-layer protocol (RFC 8200 §4).
  for (let k = 0; ; k++) {
    if (nh !== PROTO_HOPOPT && nh !== PROTO_ROUTING && nh !== PROTO_DSTOPTS && nh !== PROTO_FRAGMENT && nh !== PROTO_AH) break;
    if (k === MAX_EXT_HEADERS) {
      info.status |= ST_MALFORMED;
      return;
    }
    if (p + AT_EXT_MIN > l3End) {
      info.status |= ST_TRUNCATED;
      return;
    }
    const next = buf[p + AT_EXT_NEXT_HEADER]!;
    if (nh === PROTO_FRAGMENT) {
      // Fragment header (8 bytes): offset in the top 13 bits of bytes 2-3.
      if ((((buf[p + AT_FRAG_OFFSET]! << 8) | buf[p + AT_FRAG_OFFSET + 1]!) >>> 3) !== 0) info.status |= ST_FRAGMENT;
      p += AT_EXT_MIN;
    } else if (nh === PROTO_AH) {
      p += (buf[p + AT_EXT_LENGTH]! + 2) * 4; // RFC 4302 §2.2: length in 4-byte words, minus 2
    } else {
      p += (buf[p + AT_EXT_LENGTH]! + 1) * 8; // RFC 8200 §4: length in 8-byte units, not counting the first 8
    }
    nh = next;
  }
  if (p > l3End) {
    info.status |= ST_TRUNCATED;
    return;
  }
  info.protocol = nh;
  ctx.ints[IP_PROTO_NUMBER] = nh;
  if (plan.protoBytes) setProto(ctx, nh);
  if ((info.status & ST_FRAGMENT) !== 0) return;
  transport(buf, p, l3End, ctx, info, plan, PROTO_ICMPV6);
}

function transport(
  buf: Uint8Array, p: number, end: number, ctx: ExecutionContext, info: PacketInfo, plan: DecodePlan, icmpProto: number,
): void {
  const proto = info.protocol;
  info.l4Offset = p;
  if (proto === PROTO_TCP) {
    if (plan.tcp || plan.raw) decodeTcp(buf, p, end, ctx, info, plan);
  } else if (proto === PROTO_UDP) {
    if (plan.udp || plan.raw) decodeUdp(buf, p, end, ctx, info, plan);
  } else if (proto === icmpProto) {
    if (plan.icmp || plan.raw) decodeIcmp(buf, p, end, ctx, info, plan);
  }
}
