// IPv4 (RFC 791 §3.1) and IPv6 (RFC 8200 §3, §4) decoders. They write the IP
// fields into the context and hand the transport header to transport.ts. A
// non-first fragment has no transport header; a header cut by the capture
// leaves the fields it could not read absent and sets ST_TRUNCATED.

import type { ExecutionContext } from '../expr/index.js';
import * as CONSTANTS from './constants.js';
import { setProto } from './proto-names.js';
import type { DecodePlan } from './plan.js';
import * as SLOTS from './slots.js';
import { decodeIcmp, decodeTcp, decodeUdp } from './transport.js';
import type { PacketInfo } from './view.js';
import * as VIEW from './view.js';
import { checkCopies } from './literal.js';

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
  const ihl = buf[off]! & 15;
  if (buf[off]! >>> 4 !== 4) {
    info.status |= ST_MALFORMED;
    return;
  }
  const ints = ctx.ints;
  ints[IP_HDR_LEN] = ihl;
  if (ihl < 5) info.status |= ST_MALFORMED;
  if (n >= 4) {
    const total = (buf[off + 2]! << 8) | buf[off + 3]!;
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
  if (n >= 9) ints[IP_TTL] = buf[off + 8]!;
  if (n >= 10) {
    const proto = buf[off + 9]!;
    info.protocol = proto;
    ints[IP_PROTO_NUMBER] = proto;
    if (plan.protoBytes) setProto(ctx, proto);
  }
  if (n >= 16) ctx.setIp4(IP_SRC, u32(buf, off + 12));
  if (n >= 20) ctx.setIp4(IP_DST, u32(buf, off + 16));
  else {
    info.status |= ST_TRUNCATED;
    return;
  }
  const hlen = ihl * 4;
  if (ihl > 5 && n > 20) ints[IP_OPT_TYPE] = buf[off + 20]!;
  if (plan.raw) ctx.setBytes(RAW_IP, buf, off, info.l3End);
  if (hlen > n) {
    info.status |= ST_TRUNCATED;
    return;
  }
  if (ihl < 5 || (info.status & ST_MALFORMED) !== 0) return;
  // RFC 791: fragment offset in 8-byte units, low 13 bits of bytes 6-7.
  if ((((buf[off + 6]! << 8) | buf[off + 7]!) & 0x1fff) !== 0) {
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
  if (buf[off]! >>> 4 !== 6) {
    info.status |= ST_MALFORMED;
    return;
  }
  const ints = ctx.ints;
  if (n >= 6) {
    const plen = (buf[off + 4]! << 8) | buf[off + 5]!;
    // Payload length 0 is a jumbogram or a TSO capture: take the captured length.
    if (plen === 0) ints[IP_LEN] = n;
    else {
      ints[IP_LEN] = 40 + plen;
      if (off + 40 + plen < end) info.l3End = off + 40 + plen;
      else if (off + 40 + plen > end) info.status |= ST_TRUNCATED;
    }
  }
  if (n >= 8) ints[IP_TTL] = buf[off + 7]!;
  if (n >= 24) ctx.setIp6(IP_SRC, u32(buf, off + 8), u32(buf, off + 12), u32(buf, off + 16), u32(buf, off + 20));
  if (n < 40) {
    info.status |= ST_TRUNCATED;
    return;
  }
  ctx.setIp6(IP_DST, u32(buf, off + 24), u32(buf, off + 28), u32(buf, off + 32), u32(buf, off + 36));
  if (plan.raw) ctx.setBytes(RAW_IP, buf, off, info.l3End);
  const l3End = info.l3End;
  let nh = buf[off + 6]!;
  let p = off + 40;
  // Walk the extension headers to the upper-layer protocol (RFC 8200 §4).
  for (let k = 0; ; k++) {
    if (nh !== PROTO_HOPOPT && nh !== PROTO_ROUTING && nh !== PROTO_DSTOPTS && nh !== PROTO_FRAGMENT && nh !== PROTO_AH) break;
    if (k === MAX_EXT_HEADERS) {
      info.status |= ST_MALFORMED;
      return;
    }
    if (p + 8 > l3End) {
      info.status |= ST_TRUNCATED;
      return;
    }
    const next = buf[p]!;
    if (nh === PROTO_FRAGMENT) {
      // Fragment header: offset in the top 13 bits of bytes 2-3.
      if ((((buf[p + 2]! << 8) | buf[p + 3]!) >>> 3) !== 0) info.status |= ST_FRAGMENT;
      p += 8;
    } else if (nh === PROTO_AH) {
      p += (buf[p + 1]! + 2) * 4; // RFC 4302 §2.2: length in 4-byte words, minus 2
    } else {
      p += (buf[p + 1]! + 1) * 8;
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
