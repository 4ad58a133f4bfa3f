// Frame decoding: link-layer dispatch by LINKTYPE, then IPv4 or IPv6. This is
// the entry point of the packet path: decode(frame) fills an execution context
// (reset first) and a PacketInfo, allocating nothing and throwing nothing.

import type { ExecutionContext } from '../expr/index.js';
import { LINKTYPE } from './constants.js';
import * as CONSTANTS from './constants.js';
import { decodeFast } from './fast.js';
import { decodeIpv4, decodeIpv6 } from './ip.js';
import type { DecodePlan } from './plan.js';
import type { PacketInfo } from './view.js';
import * as VIEW from './view.js';
import { checkCopies } from './literal.js';

// Literal copies of slots and constants (see literal.ts: V8 folds these, not imported bindings).
const ETHERTYPE_IPV4 = 2048;
const ETHERTYPE_IPV6 = 34525;
const ETHERTYPE_QINQ = 34984;
const ETHERTYPE_QINQ_OLD = 37120;
const ETHERTYPE_VLAN = 33024;
const ST_TRUNCATED = 2;
const ST_UNSUPPORTED_LINK = 16;
checkCopies('packet/decode', CONSTANTS, { ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_QINQ, ETHERTYPE_QINQ_OLD, ETHERTYPE_VLAN });
checkCopies('packet/decode', VIEW, { ST_TRUNCATED, ST_UNSUPPORTED_LINK });
// LINKTYPE values as literals too: the switch below compares literal cases.
const LT_ETHERNET = 1;
const LT_IPV4 = 228;
const LT_IPV6 = 229;
const LT_LINUX_SLL = 113;
const LT_LINUX_SLL2 = 276;
const LT_LOOP = 108;
const LT_NULL = 0;
const LT_RAW = 101;
const LT_RAW_OLD_12 = 12;
const LT_RAW_OLD_14 = 14;
checkCopies('packet/decode', Object.fromEntries(Object.entries(LINKTYPE).map(([k, v]) => ['LT_' + k, v])), { LT_ETHERNET, LT_IPV4, LT_IPV6, LT_LINUX_SLL, LT_LINUX_SLL2, LT_LOOP, LT_NULL, LT_RAW, LT_RAW_OLD_12, LT_RAW_OLD_14 });

/** The link types `decode` accepts. */
export const SUPPORTED_LINKTYPES: readonly number[] = Object.values(LINKTYPE);

// BSD AF_INET6 differs by system: 24 (NetBSD/OpenBSD), 28 (FreeBSD), 30 (macOS); Linux uses 10.
function afToEtherType(af: number): number {
  if (af === 2) return ETHERTYPE_IPV4;
  if (af === 10 || af === 24 || af === 28 || af === 30) return ETHERTYPE_IPV6;
  return 0;
}

/**
 * Decodes the frame buf[off, off + caplen) captured with `linkType`. The caller
 * resets `ctx` and `info` before (so that unused slots stay absent).
 */
export function decode(
  buf: Uint8Array, off: number, caplen: number, linkType: number, ctx: ExecutionContext, info: PacketInfo, plan: DecodePlan,
): void {
  if (linkType === LT_ETHERNET && plan.fast && decodeFast(buf, off, caplen, ctx, info, plan)) return;
  decodeGeneral(buf, off, caplen, linkType, ctx, info, plan);
}

/** decode() without the fast path (fast.ts): every frame through the layer decoders. */
export function decodeGeneral(
  buf: Uint8Array, off: number, caplen: number, linkType: number, ctx: ExecutionContext, info: PacketInfo, plan: DecodePlan,
): void {
  const end = off + caplen;
  let p = off;
  let et = 0;
  switch (linkType) {
    case LT_ETHERNET:
      if (caplen < 14) {
        info.status |= ST_TRUNCATED;
        return;
      }
      et = (buf[off + 12]! << 8) | buf[off + 13]!;
      p = off + 14;
      break;
    case LT_LINUX_SLL:
      if (caplen < 16) {
        info.status |= ST_TRUNCATED;
        return;
      }
      et = (buf[off + 14]! << 8) | buf[off + 15]!;
      p = off + 16;
      break;
    case LT_LINUX_SLL2:
      if (caplen < 20) {
        info.status |= ST_TRUNCATED;
        return;
      }
      et = (buf[off]! << 8) | buf[off + 1]!;
      p = off + 20;
      break;
    case LT_NULL:
    case LT_LOOP: {
      if (caplen < 4) {
        info.status |= ST_TRUNCATED;
        return;
      }
      const be = ((buf[off]! << 24) | (buf[off + 1]! << 16) | (buf[off + 2]! << 8) | buf[off + 3]!) >>> 0;
      const le = ((buf[off + 3]! << 24) | (buf[off + 2]! << 16) | (buf[off + 1]! << 8) | buf[off]!) >>> 0;
      // LOOP is network order; NULL is the capturing host's order, which the value itself tells.
      et = afToEtherType(linkType === LT_LOOP || be < 256 ? be : le);
      p = off + 4;
      break;
    }
    case LT_RAW:
    case LT_RAW_OLD_12:
    case LT_RAW_OLD_14: {
      if (caplen < 1) {
        info.status |= ST_TRUNCATED;
        return;
      }
      const v = buf[off]! >>> 4;
      et = v === 4 ? ETHERTYPE_IPV4 : v === 6 ? ETHERTYPE_IPV6 : 0;
      break;
    }
    case LT_IPV4:
      et = ETHERTYPE_IPV4;
      break;
    case LT_IPV6:
      et = ETHERTYPE_IPV6;
      break;
    default:
      info.status |= ST_UNSUPPORTED_LINK;
      return;
  }
  // 802.1Q / 802.1ad tags (any depth: each costs 4 bytes, so the loop is bounded by the frame).
  while (et === ETHERTYPE_VLAN || et === ETHERTYPE_QINQ || et === ETHERTYPE_QINQ_OLD) {
    if (p + 4 > end) {
      info.status |= ST_TRUNCATED;
      info.etherType = 0;
      return;
    }
    et = (buf[p + 2]! << 8) | buf[p + 3]!;
    p += 4;
    info.vlanTags++;
  }
  info.etherType = et;
  if (et === ETHERTYPE_IPV4) decodeIpv4(buf, p, end, ctx, info, plan);
  else if (et === ETHERTYPE_IPV6) decodeIpv6(buf, p, end, ctx, info, plan);
}
