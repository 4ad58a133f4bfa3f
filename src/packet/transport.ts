// Transport decoders: TCP (RFC 9293 §3.1), UDP (RFC 768), ICMP (RFC 792) and
// ICMPv6 (RFC 4443 §2.1). Each reads what the capture holds: a field whose
// bytes are missing stays absent and the packet is flagged truncated.

import type { ExecutionContext } from '../expr/index.js';
import * as LAYOUT from './layout.js';
import type { DecodePlan } from './plan.js';
import { isSip } from './sip.js';
import * as SLOTS from './slots.js';
import type { PacketInfo } from './view.js';
import * as VIEW from './view.js';
import { checkCopies, prefixed } from './literal.js';

// Literal copies of slots and constants (see literal.ts: V8 folds these, not imported bindings).
const ICMP_CODE = 12;
const ICMP_TYPE = 11;
const RAW_ICMP = 6;
const RAW_TCP = 4;
const RAW_UDP = 5;
const SIP = 8;
const TCP_DSTPORT = 7;
const TCP_FLAGS = 8;
const TCP_FLAG_ACK = 4;
const TCP_FLAG_CWR = 7;
const TCP_FLAG_ECE = 6;
const TCP_FLAG_FIN = 0;
const TCP_FLAG_PSH = 3;
const TCP_FLAG_RST = 2;
const TCP_FLAG_SYN = 1;
const TCP_FLAG_URG = 5;
const TCP_SRCPORT = 6;
const UDP_DSTPORT = 10;
const UDP_SRCPORT = 9;
const ST_MALFORMED = 4;
const ST_TRUNCATED = 2;
checkCopies('packet/transport', SLOTS, { ICMP_CODE, ICMP_TYPE, RAW_ICMP, RAW_TCP, RAW_UDP, SIP, TCP_DSTPORT, TCP_FLAGS, TCP_FLAG_ACK, TCP_FLAG_CWR, TCP_FLAG_ECE, TCP_FLAG_FIN, TCP_FLAG_PSH, TCP_FLAG_RST, TCP_FLAG_SYN, TCP_FLAG_URG, TCP_SRCPORT, UDP_DSTPORT, UDP_SRCPORT });
checkCopies('packet/transport', VIEW, { ST_MALFORMED, ST_TRUNCATED });
// Header offsets (layout.ts).
const AT_ICMP_CODE = 1;
const AT_ICMP_HEADER = 4;
const AT_ICMP_TYPE = 0;
const AT_TCP_DATA_OFFSET = 12;
const AT_TCP_DSTPORT = 2;
const AT_TCP_FLAGS = 13;
const AT_TCP_HEADER = 20;
const AT_TCP_SRCPORT = 0;
const AT_UDP_DSTPORT = 2;
const AT_UDP_HEADER = 8;
const AT_UDP_SRCPORT = 0;
checkCopies('packet/transport', prefixed('AT_', LAYOUT), { AT_ICMP_CODE, AT_ICMP_HEADER, AT_ICMP_TYPE, AT_TCP_DATA_OFFSET, AT_TCP_DSTPORT, AT_TCP_FLAGS, AT_TCP_HEADER, AT_TCP_SRCPORT, AT_UDP_DSTPORT, AT_UDP_HEADER, AT_UDP_SRCPORT });

/** Decodes a TCP header at `off` (datagram ends at `end`). */
export function decodeTcp(buf: Uint8Array, off: number, end: number, ctx: ExecutionContext, info: PacketInfo, plan: DecodePlan): void {
  const n = end - off;
  if (plan.raw && n > 0) ctx.setBytes(RAW_TCP, buf, off, end);
  if (n < AT_TCP_HEADER) info.status |= ST_TRUNCATED;
  if (n >= AT_TCP_DSTPORT + 2) {
    const ints = ctx.ints;
    ints[TCP_SRCPORT] = (buf[off + AT_TCP_SRCPORT]! << 8) | buf[off + AT_TCP_SRCPORT + 1]!;
    ints[TCP_DSTPORT] = (buf[off + AT_TCP_DSTPORT]! << 8) | buf[off + AT_TCP_DSTPORT + 1]!;
  }
  if (n > AT_TCP_FLAGS) {
    // RFC 9293 §3.1: data offset below 5 words is invalid; the fixed fields are still read.
    if (buf[off + AT_TCP_DATA_OFFSET]! >>> 4 < 5) info.status |= ST_MALFORMED;
    setTcpFlags(ctx, buf[off + AT_TCP_FLAGS]!);
  }
}

/** Writes tcp.flags = `f` and the eight flag fields. */
export function setTcpFlags(ctx: ExecutionContext, f: number): void {
  ctx.ints[TCP_FLAGS] = f;
  const b = ctx.bools;
  b[TCP_FLAG_FIN] = f & 1;
  b[TCP_FLAG_SYN] = (f >>> 1) & 1;
  b[TCP_FLAG_RST] = (f >>> 2) & 1;
  b[TCP_FLAG_PSH] = (f >>> 3) & 1;
  b[TCP_FLAG_ACK] = (f >>> 4) & 1;
  b[TCP_FLAG_URG] = (f >>> 5) & 1;
  b[TCP_FLAG_ECE] = (f >>> 6) & 1;
  b[TCP_FLAG_CWR] = f >>> 7;
}

/** Decodes a UDP header at `off`. */
export function decodeUdp(buf: Uint8Array, off: number, end: number, ctx: ExecutionContext, info: PacketInfo, plan: DecodePlan): void {
  const n = end - off;
  if (plan.raw && n > 0) ctx.setBytes(RAW_UDP, buf, off, end);
  if (n < AT_UDP_HEADER) info.status |= ST_TRUNCATED;
  if (n >= AT_UDP_DSTPORT + 2) {
    ctx.ints[UDP_SRCPORT] = (buf[off + AT_UDP_SRCPORT]! << 8) | buf[off + AT_UDP_SRCPORT + 1]!;
    ctx.ints[UDP_DSTPORT] = (buf[off + AT_UDP_DSTPORT]! << 8) | buf[off + AT_UDP_DSTPORT + 1]!;
  }
  if (plan.sip && n >= AT_UDP_HEADER) ctx.bools[SIP] = isSip(buf, off + AT_UDP_HEADER, end) ? 1 : 0;
}

/** Decodes an ICMP or ICMPv6 header at `off`. */
export function decodeIcmp(buf: Uint8Array, off: number, end: number, ctx: ExecutionContext, info: PacketInfo, plan: DecodePlan): void {
  const n = end - off;
  if (plan.raw && n > 0) ctx.setBytes(RAW_ICMP, buf, off, end);
  if (n < AT_ICMP_HEADER) info.status |= ST_TRUNCATED;
  if (n > AT_ICMP_TYPE) ctx.ints[ICMP_TYPE] = buf[off + AT_ICMP_TYPE]!;
  if (n > AT_ICMP_CODE) ctx.ints[ICMP_CODE] = buf[off + AT_ICMP_CODE]!;
}
