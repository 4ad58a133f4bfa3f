// Context slots of the network_transit fields, resolved once at load so the
// decoders write to fixed typed-array indexes.

import { TRANSIT_SCHEME as S } from './fields.js';

const slot = (name: string): number => S.field(name).slot;

export const IP_SRC = slot('ip.src');
export const IP_DST = slot('ip.dst');
export const IP_PROTO = slot('ip.proto');
export const IP_LEN = slot('ip.len');
export const IP_HDR_LEN = slot('ip.hdr_len');
export const IP_TTL = slot('ip.ttl');
export const IP_OPT_TYPE = slot('ip.opt.type');
export const IP_SRC_COUNTRY = slot('ip.src.country');
export const IP_DST_COUNTRY = slot('ip.dst.country');
export const IP_SRC_ASNUM = slot('ip.src.asnum');
export const IP_DST_ASNUM = slot('ip.dst.asnum');
export const TCP_SRCPORT = slot('tcp.srcport');
export const TCP_DSTPORT = slot('tcp.dstport');
export const TCP_FLAGS = slot('tcp.flags');
export const TCP_FLAG_FIN = slot('tcp.flags.fin');
export const TCP_FLAG_SYN = slot('tcp.flags.syn');
export const TCP_FLAG_RST = slot('tcp.flags.reset');
export const TCP_FLAG_PSH = slot('tcp.flags.push');
export const TCP_FLAG_ACK = slot('tcp.flags.ack');
export const TCP_FLAG_URG = slot('tcp.flags.urg');
export const TCP_FLAG_ECE = slot('tcp.flags.ecn');
export const TCP_FLAG_CWR = slot('tcp.flags.cwr');
export const UDP_SRCPORT = slot('udp.srcport');
export const UDP_DSTPORT = slot('udp.dstport');
export const ICMP_TYPE = slot('icmp.type');
export const ICMP_CODE = slot('icmp.code');
export const RAW_IP = slot('ip');
export const RAW_TCP = slot('tcp');
export const RAW_UDP = slot('udp');
export const RAW_ICMP = slot('icmp');
export const SIP = slot('sip');
export const COLO_NAME = slot('cf.colo.name');
export const COLO_REGION = slot('cf.colo.region');
export const IP_SRC_LISTS = slot('ip.src.lists');
export const IP_DST_LISTS = slot('ip.dst.lists');
export const IP_PROTO_NUMBER = slot('ip.proto.number');
export const IP_SRC_COUNTRY_KEY = slot('ip.src.country.key');
export const IP_DST_COUNTRY_KEY = slot('ip.dst.country.key');

// Lazy groups (Scheme.lazyGroups): what the packet path resolves on demand.
const group = (name: string): number => {
  const g = S.lazyGroups.indexOf(name);
  if (g < 0) throw new Error(`no lazy group ${name}`);
  return g;
};
export const LAZY_SRC_GEO = group('ip.src.geo');
export const LAZY_DST_GEO = group('ip.dst.geo');
export const LAZY_SRC_LISTS = group('ip.src.lists');
export const LAZY_DST_LISTS = group('ip.dst.lists');
