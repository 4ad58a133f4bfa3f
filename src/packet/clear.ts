// Clearing what the last decode wrote: only the slots of the layers that packet
// had, rather than every slot of the context. On the packet path this replaces
// ExecutionContext.reset(): ~45 stores, where a TCP packet needs about 20
// (measured: bench/pipeline.bench.ts).

import type { ExecutionContext } from '../expr/index.js';
import * as CONSTANTS from './constants.js';
import * as SLOTS from './slots.js';
import type { PacketInfo } from './view.js';
import * as VIEW from './view.js';
import { checkCopies } from './literal.js';

// Literal copies of slots and constants (see literal.ts: V8 folds these, not imported bindings).
const PROTO_ICMP = 1;
const PROTO_ICMPV6 = 58;
const PROTO_TCP = 6;
const PROTO_UDP = 17;
const ICMP_CODE = 12;
const ICMP_TYPE = 11;
const IP_DST = 1;
const IP_HDR_LEN = 1;
const IP_LEN = 0;
const IP_OPT_TYPE = 3;
const IP_PROTO = 0;
const IP_PROTO_NUMBER = 15;
const IP_SRC = 0;
const IP_TTL = 2;
const RAW_ICMP = 6;
const RAW_IP = 3;
const RAW_TCP = 4;
const RAW_UDP = 5;
const SIP = 8;
const TCP_DSTPORT = 7;
const TCP_FLAG_ACK = 4;
const TCP_FLAG_CWR = 7;
const TCP_FLAG_ECE = 6;
const TCP_FLAG_FIN = 0;
const TCP_FLAG_PSH = 3;
const TCP_FLAG_RST = 2;
const TCP_FLAG_SYN = 1;
const TCP_FLAG_URG = 5;
const TCP_FLAGS = 8;
const TCP_SRCPORT = 6;
const UDP_DSTPORT = 10;
const UDP_SRCPORT = 9;
const ST_IP = 1;
checkCopies('packet/clear', CONSTANTS, { PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP });
checkCopies('packet/clear', SLOTS, { ICMP_CODE, ICMP_TYPE, IP_DST, IP_HDR_LEN, IP_LEN, IP_OPT_TYPE, IP_PROTO, IP_PROTO_NUMBER, IP_SRC, IP_TTL, RAW_ICMP, RAW_IP, RAW_TCP, RAW_UDP, SIP, TCP_DSTPORT, TCP_FLAG_ACK, TCP_FLAG_CWR, TCP_FLAG_ECE, TCP_FLAG_FIN, TCP_FLAG_PSH, TCP_FLAG_RST, TCP_FLAG_SYN, TCP_FLAG_URG, TCP_FLAGS, TCP_SRCPORT, UDP_DSTPORT, UDP_SRCPORT });
checkCopies('packet/clear', VIEW, { ST_IP });

/**
 * Marks absent every field decode() may have written for the packet `info`
 * describes (call it before info.reset()). Fields decode() never writes
 * (countries, AS numbers, list bits, colo) are the caller's to clear.
 */
export function clearDecoded(ctx: ExecutionContext, info: PacketInfo): void {
  if ((info.status & ST_IP) === 0) return;
  const ints = ctx.ints;
  const bb = ctx.bytesBuf;
  ints[IP_LEN] = NaN;
  ints[IP_HDR_LEN] = NaN;
  ints[IP_TTL] = NaN;
  ints[IP_OPT_TYPE] = NaN;
  ints[IP_PROTO_NUMBER] = NaN;
  ctx.ipFamily[IP_SRC] = 0;
  ctx.ipFamily[IP_DST] = 0;
  bb[IP_PROTO] = null;
  ctx.bytesText[IP_PROTO] = null;
  bb[RAW_IP] = null;
  // Every transport slot, whatever the protocol was: a dozen stores cost less
  // than a switch on the protocol, which mixed traffic mispredicts (measured:
  // bench/pipeline.bench.ts).
  ints[TCP_SRCPORT] = NaN;
  ints[TCP_DSTPORT] = NaN;
  ints[TCP_FLAGS] = NaN;
  const b = ctx.bools;
  b[TCP_FLAG_FIN] = 0;
  b[TCP_FLAG_SYN] = 0;
  b[TCP_FLAG_RST] = 0;
  b[TCP_FLAG_PSH] = 0;
  b[TCP_FLAG_ACK] = 0;
  b[TCP_FLAG_URG] = 0;
  b[TCP_FLAG_ECE] = 0;
  b[TCP_FLAG_CWR] = 0;
  bb[RAW_TCP] = null;
  ints[UDP_SRCPORT] = NaN;
  ints[UDP_DSTPORT] = NaN;
  b[SIP] = 0;
  bb[RAW_UDP] = null;
  ints[ICMP_TYPE] = NaN;
  ints[ICMP_CODE] = NaN;
  bb[RAW_ICMP] = null;
}
