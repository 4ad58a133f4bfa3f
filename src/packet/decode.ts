// Frame decoding: link-layer dispatch by LINKTYPE, then IPv4 or IPv6. This is
// the entry point of the packet path: decode(frame) fills an execution context
// (reset first) and a PacketInfo, allocating nothing and throwing nothing.

import type { ExecutionContext } from '../expr/index.js';
import { LINKTYPE } from './constants.js';
import * as CONSTANTS from './constants.js';
import { decodeFast } from './fast.js';
import { decodeIpv4, decodeIpv6 } from './ip.js';
import * as LAYOUT from './layout.js';
import type { DecodePlan } from './plan.js';
import type { PacketInfo } from './view.js';
import * as VIEW from './view.js';
import { checkCopies, prefixed } from './literal.js';

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
checkCopies('packet/decode', prefixed('LT_', LINKTYPE), { LT_ETHERNET, LT_IPV4, LT_IPV6, LT_LINUX_SLL, LT_LINUX_SLL2, LT_LOOP, LT_NULL, LT_RAW, LT_RAW_OLD_12, LT_RAW_OLD_14 });
// Header offsets (layout.ts).
const AT_ETH_HEADER = 14;
const AT_ETH_TYPE = 12;
const AT_LOOP_FAMILY = 0;
const AT_LOOP_HEADER = 4;
const AT_SLL2_HEADER = 20;
const AT_SLL2_PROTOCOL = 0;
const AT_SLL_HEADER = 16;
const AT_SLL_PROTOCOL = 14;
const AT_TAG_TYPE = 2;
const AT_VLAN_HEADER = 4;
checkCopies('packet/decode', prefixed('AT_', LAYOUT), { AT_ETH_HEADER, AT_ETH_TYPE, AT_LOOP_FAMILY, AT_LOOP_HEADER, AT_SLL2_HEADER, AT_SLL2_PROTOCOL, AT_SLL_HEADER, AT_SLL_PROTOCOL, AT_TAG_TYPE, AT_VLAN_HEADER });

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
      if (caplen < AT_ETH_HEADER) {
        info.status |= ST_TRUNCATED;
        return;
      }
      et = (buf[off + AT_ETH_TYPE]! << 8) | buf[off + AT_ETH_TYPE + 1]!;
      p = off + AT_ETH_HEADER;
      break;
    case LT_LINUX_SLL:
      if (caplen < AT_SLL_HEADER) {
        info.status |= ST_TRUNCATED;
        return;
      }
      et = (buf[off + AT_SLL_PROTOCOL]! << 8) | buf[off + AT_SLL_PROTOCOL + 1]!;
      p = off + AT_SLL_HEADER;
      break;
    case LT_LINUX_SLL2:
      if (caplen < AT_SLL2_HEADER) {
        info.status |= ST_TRUNCATED;
        return;
      }
      et = (buf[off + AT_SLL2_PROTOCOL]! << 8) | buf[off + AT_SLL2_PROTOCOL + 1]!;
      p = off + AT_SLL2_HEADER;
      break;
    case LT_NULL:
    case LT_LOOP: {
      if (caplen < AT_LOOP_HEADER) {
        info.status |= ST_TRUNCATED;
        return;
      }
      const o = off + AT_LOOP_FAMILY;
      const be = ((buf[o]! << 24) | (buf[o + 1]! << 16) | (buf[o + 2]! << 8) | buf[o + 3]!) >>> 0;
      const le = ((buf[o + 3]! << 24) | (buf[o + 2]! << 16) | (buf[o + 1]! << 8) | buf[o]!) >>> 0;
      // LOOP is network order; NULL is the capturing host's order, which the value itself tells.
      et = afToEtherType(linkType === LT_LOOP || be < 256 ? be : le);
      p = off + AT_LOOP_HEADER;
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
    if (p + AT_VLAN_HEADER > end) {
      info.status |= ST_TRUNCATED;
      info.etherType = 0;
      return;
    }
    et = (buf[p + AT_TAG_TYPE]! << 8) | buf[p + AT_TAG_TYPE + 1]!;
    p += AT_VLAN_HEADER;
    info.vlanTags++;
  }
  info.etherType = et;
  if (et === ETHERTYPE_IPV4) decodeIpv4(buf, p, end, ctx, info, plan);
  else if (et === ETHERTYPE_IPV6) decodeIpv6(buf, p, end, ctx, info, plan);
}
