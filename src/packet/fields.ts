// The network_transit field set (Cloudflare Magic Firewall's fields) as a scheme,
// with what each field means for a packet. The decoder fills these slots; the
// language checks rule expressions against them.

import { SchemeBuilder, shortBytesKey, type Scheme } from '../expr/index.js';
import { PROTO_NAMES } from './constants.js';

// `ip.proto`'s key is the protocol number: every value the decoder writes is
// PROTO_NAMES[n] for one n (the names are distinct), and any other text has no key.
const PROTO_NUMBER = new Map(PROTO_NAMES.map((n, i) => [n, i]));
function protoKey(buf: Uint8Array, start: number, end: number): number {
  if (end - start > 16) return -1;
  let s = '';
  for (let i = start; i < end; i++) s += String.fromCharCode(buf[i]!);
  return PROTO_NUMBER.get(s) ?? -1;
}

/** The scheme of the network_transit phase. */
export const TRANSIT_SCHEME: Scheme = new SchemeBuilder()
  .field('ip.src', 'ip', { description: 'Source address, IPv4 or IPv6' })
  .field('ip.dst', 'ip', { description: 'Destination address, IPv4 or IPv6' })
  .field('ip.proto', 'bytes', {
    key: { field: 'ip.proto.number', of: protoKey },
    description: 'Transport protocol as a lowercase IANA keyword ("tcp", "udp", "icmp", "ipv6-icmp", "gre", ...); IPv6: after extension headers; a number without a keyword is its decimal string',
  })
  .field('ip.len', 'int', { description: 'IPv4 total length; IPv6: 40 + payload length (the packet including its header)' })
  .field('ip.hdr_len', 'int', { description: 'IPv4 header length in 32-bit words (IHL, 5..15); absent on IPv6' })
  .field('ip.ttl', 'int', { description: 'IPv4 TTL or IPv6 hop limit' })
  .field('ip.opt.type', 'int', { description: 'Type byte of the first IPv4 option; absent when there is none' })
  // Countries, AS numbers and list bits come from the address table, looked up
  // on demand: one lazy group per address for GeoIP and one for lists (see
  // ExecutionContext.pending and engine/lazy-lookups.ts).
  .field('ip.src.country', 'bytes', { description: 'ISO 3166-1 alpha-2 country of the source (GeoIP)', key: { field: 'ip.src.country.key', of: shortBytesKey }, lazy: 'ip.src.geo' })
  .field('ip.dst.country', 'bytes', { description: 'ISO 3166-1 alpha-2 country of the destination (GeoIP)', key: { field: 'ip.dst.country.key', of: shortBytesKey }, lazy: 'ip.dst.geo' })
  .field('ip.geoip.country', 'bytes', {
    description: 'Deprecated: matches the source or the destination country',
    anyOf: ['ip.src.country', 'ip.dst.country'],
  })
  .field('ip.src.asnum', 'int', { description: 'AS number of the source (GeoIP ASN)', lazy: 'ip.src.geo' })
  .field('ip.dst.asnum', 'int', { description: 'AS number of the destination (GeoIP ASN)', lazy: 'ip.dst.geo' })
  .field('tcp.srcport', 'int', { description: 'TCP source port' })
  .field('tcp.dstport', 'int', { description: 'TCP destination port' })
  .field('tcp.flags', 'int', { description: 'TCP flags byte (CWR ECE URG ACK PSH RST SYN FIN)' })
  .field('tcp.flags.fin', 'bool', { description: 'TCP FIN' })
  .field('tcp.flags.syn', 'bool', { description: 'TCP SYN' })
  .field('tcp.flags.reset', 'bool', { description: 'TCP RST' })
  .field('tcp.flags.push', 'bool', { description: 'TCP PSH' })
  .field('tcp.flags.ack', 'bool', { description: 'TCP ACK' })
  .field('tcp.flags.urg', 'bool', { description: 'TCP URG' })
  .field('tcp.flags.ecn', 'bool', { description: 'TCP ECN-Echo (ECE, 0x40)' })
  .field('tcp.flags.cwr', 'bool', { description: 'TCP CWR' })
  .field('udp.srcport', 'int', { description: 'UDP source port' })
  .field('udp.dstport', 'int', { description: 'UDP destination port' })
  .field('icmp.type', 'int', { description: 'ICMP or ICMPv6 type' })
  .field('icmp.code', 'int', { description: 'ICMP or ICMPv6 code' })
  .field('ip', 'bytes', { raw: true, description: 'Raw bytes from the IP header to the end of the packet (for bit_slice)' })
  .field('tcp', 'bytes', { raw: true, description: 'Raw bytes from the TCP header on' })
  .field('udp', 'bytes', { raw: true, description: 'Raw bytes from the UDP header on' })
  .field('icmp', 'bytes', { raw: true, description: 'Raw bytes from the ICMP/ICMPv6 header on' })
  .field('sip', 'bool', { description: 'The UDP payload is a valid SIP message' })
  .field('cf.colo.name', 'bytes', { description: 'Name of the site running Moat (configured), e.g. "sfo06"' })
  .field('cf.colo.region', 'bytes', { description: 'Region of the site running Moat (configured), e.g. "WNAM"' })
  // Internal: list membership of each address as bits, filled by the engine's
  // address lookup so that `ip.src in $list` is one AND per rule.
  .field('ip.src.lists', 'int', { hidden: true, description: 'Bit i: ip.src is in list i (internal)', lazy: 'ip.src.lists' })
  .field('ip.dst.lists', 'int', { hidden: true, description: 'Bit i: ip.dst is in list i (internal)', lazy: 'ip.dst.lists' })
  // Internal: integer keys of bytes fields (see FieldKey), so that rules compare
  // them as numbers and the packet path writes numbers, not byte views.
  .field('ip.proto.number', 'int', { hidden: true, description: 'Protocol number of ip.proto (internal)' })
  .field('ip.src.country.key', 'int', { hidden: true, description: 'ip.src.country as a number: shortBytesKey (internal)', lazy: 'ip.src.geo' })
  .field('ip.dst.country.key', 'int', { hidden: true, description: 'ip.dst.country as a number: shortBytesKey (internal)', lazy: 'ip.dst.geo' })
  .build();
