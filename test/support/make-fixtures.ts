// Generates the capture fixtures in native-fixtures/ and their manifest.
//
//   npx tsc -p tsconfig.json && node dist/test/support/make-fixtures.js [outDir]
//
// Deterministic: the same bytes on every run (no clock, no randomness). Classic pcap
// files are written with Moat's pcap writer, pcapng files with the PcapngBuilder of
// frame-builder-extra.ts. The manifest records, per file and per packet, what a
// correct reader must report: the generator computes it from what it wrote (BigInt
// arithmetic for pcapng ticks, independent of the reader's own conversion).

import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LINKTYPE, PCAP_GLOBAL_HEADER_LENGTH, PCAP_RECORD_HEADER_LENGTH, buildPcap, type PcapWriterOptions } from '../../src/capture/index.js';
import {
  BSD_AF,
  dnsQuery,
  IPV6_OPTION,
  PcapngBuilder,
  fragmentIpv4,
  fragmentIpv6,
  loopFrame,
  nullFrame,
  sll2Frame,
  sllFrame,
  withIpv6Extensions,
  withVlanTags,
  type ExpectedPacket,
  type PcapngInterface,
} from './frame-builder-extra.js';
import { IPV4_OPTION, TCP, buildFrame, buildIpPacket, concatBytes, parseIpv6, type FrameSpec } from './packet-builder.js';

/** LINKTYPE_* numbers used by the fixtures. */
export const LT = Object.freeze({ NULL: 0, ETHERNET: LINKTYPE.ETHERNET, RAW: LINKTYPE.RAW, LOOP: 108, LINUX_SLL: LINKTYPE.LINUX_SLL, LINUX_SLL2: 276 });

/** One packet of the manifest. tsSec/tsNsec are -1 for a packet without timestamp (pcapng SPB). */
export interface ManifestRecord {
  what: string;
  offset: number;
  tsSec: number;
  tsNsec: number;
  caplen: number;
  origLen: number;
  linkType: number;
  interfaceId: number;
  section: number;
  /** SHA-256 of the captured bytes, hex. */
  sha256: string;
}

export interface ManifestSection {
  byteOrder: 'little' | 'big';
  interfaces: Array<{ linkType: number; snapLen: number; tsresol: string }>;
}

export interface ManifestFile {
  file: string;
  description: string;
  format: 'pcap' | 'pcapng';
  byteOrder: 'little' | 'big' | 'mixed';
  /** Classic pcap: 'us' or 'ns'. */
  resolution?: 'us' | 'ns';
  /** Classic pcap: the header's snaplen. */
  snapLen?: number;
  /** pcapng: every section. */
  sections?: ManifestSection[];
  linkTypes: number[];
  packets: number;
  records: ManifestRecord[];
}

export interface Manifest {
  generator: string;
  command: string;
  files: ManifestFile[];
}

/** A generated fixture: its bytes and its manifest entry. */
export interface Fixture {
  entry: ManifestFile;
  bytes: Buffer;
}

const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

// ---------------------------------------------------------------- packets

interface Labelled {
  what: string;
  data: Uint8Array;
}

const payload = (n: number, seed: number): Uint8Array => Uint8Array.from({ length: n }, (_, i) => (seed + i * 7) & 0xff);

const V4_TCP_8080: FrameSpec = { ip: { version: 4, src: '10.0.0.1', dst: '10.0.0.2', ttl: 64, id: 1 }, l4: { kind: 'tcp', srcPort: 40000, dstPort: 8080, flags: TCP.SYN, seq: 1000 } };
const V4_TCP_9999: FrameSpec = { ip: { version: 4, src: '10.0.0.1', dst: '10.0.0.2', ttl: 64, id: 2 }, l4: { kind: 'tcp', srcPort: 40001, dstPort: 9999, flags: TCP.SYN, seq: 2000 } };
const V4_UDP: FrameSpec = { ip: { version: 4, src: '10.0.0.1', dst: '10.0.0.53', ttl: 64, id: 3 }, l4: { kind: 'udp', srcPort: 33000, dstPort: 53, payload: dnsQuery('example.com', 0x1234) } };
const V4_ICMP: FrameSpec = { ip: { version: 4, src: '10.0.0.1', dst: '10.0.0.2', ttl: 64, id: 4 }, l4: { kind: 'icmp', type: 8, code: 0, body: concatBytes(Uint8Array.of(0x12, 0x34, 0, 1), payload(16, 2)) } };
const V4_OPTIONS: FrameSpec = {
  ip: { version: 4, src: '192.0.2.1', dst: '198.51.100.7', ttl: 3, id: 5, options: concatBytes(IPV4_OPTION.routerAlert(), IPV4_OPTION.recordRoute(2), IPV4_OPTION.NOP) },
  l4: { kind: 'tcp', srcPort: 1234, dstPort: 443, flags: TCP.ACK | TCP.PSH, seq: 1, ack: 2, payload: payload(10, 3) },
};
const V6_TCP_9999: FrameSpec = { ip: { version: 6, src: '2001:db8::1', dst: '2001:db8::2', hopLimit: 64 }, l4: { kind: 'tcp', srcPort: 40002, dstPort: 9999, flags: TCP.SYN, seq: 3000 } };
const V6_UDP: FrameSpec = { ip: { version: 6, src: '2001:db8::1', dst: '2001:db8::53', hopLimit: 64 }, l4: { kind: 'udp', srcPort: 33001, dstPort: 53, payload: dnsQuery('example.org', 0x4321) } };
const V6_ICMP: FrameSpec = { ip: { version: 6, src: 'fe80::1', dst: 'fe80::2', hopLimit: 255 }, l4: { kind: 'icmp', type: 128, code: 0, body: concatBytes(Uint8Array.of(0, 7, 0, 1), payload(8, 5)) } };

/** The Ethernet set: every IP flavour, plus 802.1Q and QinQ tags. */
function ethernetSet(): Labelled[] {
  return [
    { what: 'IPv4 TCP SYN to 8080', data: buildFrame(V4_TCP_8080) },
    { what: 'IPv4 TCP SYN to 9999', data: buildFrame(V4_TCP_9999) },
    { what: 'IPv4 UDP DNS query to 53', data: buildFrame(V4_UDP) },
    { what: 'IPv4 ICMP echo request', data: buildFrame(V4_ICMP) },
    { what: 'IPv4 with options (router alert, record route) TCP to 443', data: buildFrame(V4_OPTIONS) },
    { what: 'IPv6 TCP SYN to 9999', data: buildFrame(V6_TCP_9999) },
    { what: 'IPv6 UDP DNS query to 53', data: buildFrame(V6_UDP) },
    { what: 'ICMPv6 echo request', data: buildFrame(V6_ICMP) },
    { what: '802.1Q VLAN 100, IPv4 TCP SYN to 9999', data: withVlanTags(buildFrame(V4_TCP_9999), [{ tpid: 0x8100, vid: 100 }]) },
    {
      what: 'QinQ 0x88a8 VLAN 200 + 0x8100 VLAN 100, IPv4 TCP SYN to 9999',
      data: withVlanTags(buildFrame(V4_TCP_9999), [
        { tpid: 0x88a8, vid: 200 },
        { tpid: 0x8100, vid: 100, pcp: 5 },
      ]),
    },
    { what: '802.1Q VLAN 7, IPv6 UDP DNS query to 53', data: withVlanTags(buildFrame(V6_UDP), [{ tpid: 0x8100, vid: 7 }]) },
  ];
}

/** Wraps an IP packet into an Ethernet II frame with the default MACs. */
function ethernetAround(ip: Uint8Array): Uint8Array {
  const f = new Uint8Array(14 + ip.length);
  f.set([0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01], 0);
  f[12] = ip[0]! >> 4 === 6 ? 0x86 : 0x08;
  f[13] = ip[0]! >> 4 === 6 ? 0xdd : 0x00;
  f.set(ip, 14);
  return f;
}

/** IPv6 packets with extension headers (and an IPv6 fragment train). */
function ipv6ExtensionSet(): Labelled[] {
  const tcp = buildIpPacket(V6_TCP_9999);
  const udp = buildIpPacket(V6_UDP);
  const icmp = buildIpPacket(V6_ICMP);
  const rh2 = concatBytes(new Uint8Array(4), parseIpv6('2001:db8::2')); // type 2: reserved + home address
  const ah = { kind: 'ah' as const, spi: 0x1000, seq: 1, icv: payload(12, 9) };
  const bigUdp = buildIpPacket({ ...V6_UDP, l4: { kind: 'udp', srcPort: 7000, dstPort: 7001, payload: payload(100, 6) } });
  const frags = fragmentIpv6(bigUdp, 64, 0xabcdef01);
  return [
    { what: 'IPv6 hop-by-hop (router alert) then TCP', data: ethernetAround(withIpv6Extensions(tcp, [{ kind: 'hop-by-hop', options: IPV6_OPTION.routerAlert() }])) },
    { what: 'IPv6 routing header type 2 (segments left 0) then TCP', data: ethernetAround(withIpv6Extensions(tcp, [{ kind: 'routing', routingType: 2, segmentsLeft: 0, data: rh2 }])) },
    { what: 'IPv6 destination options then UDP DNS query', data: ethernetAround(withIpv6Extensions(udp, [{ kind: 'destination', options: IPV6_OPTION.experimental(payload(3, 7)) }])) },
    { what: 'IPv6 atomic fragment header then UDP DNS query', data: ethernetAround(withIpv6Extensions(udp, [{ kind: 'fragment', offset: 0, more: false, id: 0x11223344 }])) },
    { what: 'IPv6 AH then TCP', data: ethernetAround(withIpv6Extensions(tcp, [ah])) },
    {
      what: 'IPv6 chain hop-by-hop, destination, routing, fragment, AH then ICMPv6',
      data: ethernetAround(
        withIpv6Extensions(icmp, [
          { kind: 'hop-by-hop', options: IPV6_OPTION.padN(4) },
          { kind: 'destination', options: IPV6_OPTION.padN(4) },
          { kind: 'routing', routingType: 2, segmentsLeft: 0, data: concatBytes(new Uint8Array(4), parseIpv6('fe80::2')) },
          { kind: 'fragment', offset: 0, more: false, id: 7 },
          ah,
        ]),
      ),
    },
    ...frags.map((f, i) => ({ what: `IPv6 UDP fragment ${i + 1} of ${frags.length} (${i === 0 ? 'first' : 'non-first'})`, data: ethernetAround(f) })),
  ];
}

/** An IPv4 UDP datagram in three fragments, then a TCP packet with the DF bit. */
function ipv4FragmentSet(): Labelled[] {
  const big = buildIpPacket({ ip: { version: 4, src: '10.1.0.1', dst: '10.1.0.2', ttl: 64, id: 0x4242 }, l4: { kind: 'udp', srcPort: 7000, dstPort: 7001, payload: payload(150, 8) } });
  const frags = fragmentIpv4(big, 64);
  return [
    ...frags.map((f, i) => ({ what: `IPv4 UDP fragment ${i + 1} of ${frags.length} (${i === 0 ? 'first, MF' : i === frags.length - 1 ? 'last' : 'non-first, MF'})`, data: ethernetAround(f) })),
    { what: 'IPv4 TCP with DF, not fragmented', data: buildFrame({ ...V4_TCP_8080, ip: { ...V4_TCP_8080.ip, dontFragment: true } as FrameSpec['ip'] }) },
  ];
}

function ipSet(): Labelled[] {
  return [
    { what: 'IPv4 TCP SYN to 9999', data: buildIpPacket(V4_TCP_9999) },
    { what: 'IPv4 UDP DNS query to 53', data: buildIpPacket(V4_UDP) },
    { what: 'IPv4 ICMP echo request', data: buildIpPacket(V4_ICMP) },
    { what: 'IPv6 TCP SYN to 9999', data: buildIpPacket(V6_TCP_9999) },
    { what: 'ICMPv6 echo request', data: buildIpPacket(V6_ICMP) },
  ];
}

// ---------------------------------------------------------------- timestamps

/** A deterministic, varied timestamp for packet i of a file. */
function timeOf(i: number, base = 1_700_000_000): { sec: number; nsec: number } {
  return { sec: base + i * 3 + (i % 2), nsec: (i * 987_654_321 + 123_456_789) % 1_000_000_000 };
}

// ---------------------------------------------------------------- classic pcap

interface ClassicPacket extends Labelled {
  sec: number;
  nsec: number;
  origLen?: number;
}

function classic(file: string, description: string, packets: ClassicPacket[], options: PcapWriterOptions): Fixture {
  const bytes = buildPcap(
    packets.map((p) => ({ data: p.data, seconds: p.sec, nanoseconds: p.nsec, originalLength: p.origLen ?? p.data.length })),
    options,
  );
  const snapLen = options.snapLen ?? 262_144;
  const ns = options.resolution === 'ns';
  const linkType = options.linkType ?? LT.ETHERNET;
  let offset = PCAP_GLOBAL_HEADER_LENGTH;
  const records: ManifestRecord[] = packets.map((p) => {
    const caplen = Math.min(p.data.length, snapLen);
    const r: ManifestRecord = {
      what: p.what,
      offset,
      tsSec: p.sec,
      tsNsec: ns ? p.nsec : Math.floor(p.nsec / 1000) * 1000,
      caplen,
      origLen: p.origLen ?? p.data.length,
      linkType,
      interfaceId: 0,
      section: 0,
      sha256: sha256(p.data.subarray(0, caplen)),
    };
    offset += PCAP_RECORD_HEADER_LENGTH + caplen;
    return r;
  });
  if (offset !== bytes.length) throw new Error(`${file}: expected ${offset} bytes, the writer produced ${bytes.length}`);
  return {
    bytes,
    entry: {
      file,
      description,
      format: 'pcap',
      byteOrder: options.bigEndian ? 'big' : 'little',
      resolution: ns ? 'ns' : 'us',
      snapLen,
      linkTypes: [linkType],
      packets: records.length,
      records,
    },
  };
}

const timed = (set: Labelled[], base?: number): ClassicPacket[] => set.map((p, i) => ({ ...p, ...timeOf(i, base) }));

// ---------------------------------------------------------------- pcapng

function tsresolText(tsresol: number | undefined): string {
  if (tsresol === undefined) return '10^-6 (default)';
  return tsresol & 0x80 ? `2^-${tsresol & 0x7f}` : `10^-${tsresol}`;
}

function pcapng(file: string, description: string, build: (b: PcapngBuilder, what: string[]) => void): Fixture {
  const b = new PcapngBuilder();
  const whats: string[] = [];
  build(b, whats);
  if (whats.length !== b.packets.length) throw new Error(`${file}: ${b.packets.length} packets but ${whats.length} labels`);
  const bytes = b.toBuffer();
  const sections: ManifestSection[] = b.sections.map((s) => ({
    byteOrder: s.bigEndian ? 'big' : 'little',
    interfaces: s.interfaces.map((i: PcapngInterface) => ({ linkType: i.linkType, snapLen: i.snapLen ?? 0, tsresol: tsresolText(i.tsresol) })),
  }));
  const orders = new Set(sections.map((s) => s.byteOrder));
  const linkTypes: number[] = [];
  for (const s of sections) for (const i of s.interfaces) if (!linkTypes.includes(i.linkType)) linkTypes.push(i.linkType);
  return {
    bytes,
    entry: {
      file,
      description,
      format: 'pcapng',
      byteOrder: orders.size > 1 ? 'mixed' : [...orders][0]!,
      sections,
      linkTypes,
      packets: b.packets.length,
      records: b.packets.map((p: ExpectedPacket, i) => ({
        what: whats[i]!,
        offset: p.offset,
        tsSec: p.tsSec,
        tsNsec: p.tsNsec,
        caplen: p.caplen,
        origLen: p.origLen,
        linkType: p.linkType,
        interfaceId: p.interfaceId,
        section: p.section,
        sha256: sha256(p.data),
      })),
    },
  };
}

const COMMENT = 1;

// ---------------------------------------------------------------- the fixture set

/** Builds every fixture in memory, deterministically. */
export function buildFixtures(): Fixture[] {
  const eth = ethernetSet();
  const out: Fixture[] = [];

  // Classic pcap: the Ethernet set in both resolutions and byte orders.
  const ethUs = timed(eth);
  ethUs.push({ what: 'IPv4 TCP SYN to 8080, timestamp after 2038 (unsigned seconds)', data: buildFrame(V4_TCP_8080), sec: 2_500_000_000, nsec: 999_999_000 });
  out.push(classic('pcap-us-le.pcap', 'Classic pcap, microseconds, little-endian (what tcpdump -w writes on x86); Ethernet with IPv4/IPv6 TCP/UDP/ICMP/ICMPv6, IPv4 options, 802.1Q and QinQ', ethUs, {}));
  out.push(classic('pcap-us-be.pcap', 'Classic pcap, microseconds, big-endian; the Ethernet set', timed(eth, 1_600_000_000), { bigEndian: true }));
  out.push(classic('pcap-ns-le.pcap', 'Classic pcap, nanoseconds (magic a1b23c4d), little-endian; the Ethernet set', timed(eth, 1_650_000_000), { resolution: 'ns' }));
  out.push(classic('pcap-ns-be.pcap', 'Classic pcap, nanoseconds, big-endian; the Ethernet set', timed(eth, 1_750_000_000), { resolution: 'ns', bigEndian: true }));

  out.push(classic('ipv6-ext.pcap', 'Classic pcap, ns, Ethernet: IPv6 extension headers (hop-by-hop, routing, destination options, fragment, AH, a chain of all) and an IPv6 UDP fragment train', timed(ipv6ExtensionSet()), { resolution: 'ns' }));
  out.push(classic('ipv4-frag.pcap', 'Classic pcap, us, Ethernet: an IPv4 UDP datagram in 3 fragments (first with MF, middle, last) and a DF TCP packet', timed(ipv4FragmentSet()), {}));

  // Other link types.
  const ips = ipSet();
  out.push(classic('raw.pcap', 'Classic pcap, us, LINKTYPE_RAW (101): bare IPv4 and IPv6 packets (what tcpdump writes on a tun device)', timed(ips), { linkType: LT.RAW }));
  out.push(
    classic(
      'sll.pcap',
      'Classic pcap, us, LINKTYPE_LINUX_SLL (113): Linux cooked v1 headers, incoming and outgoing',
      timed(ips.map((p, i) => ({ what: `SLL ${i % 2 ? 'outgoing' : 'to us'}, ${p.what}`, data: sllFrame(p.data, { packetType: i % 2 ? 4 : 0 }) }))),
      { linkType: LT.LINUX_SLL },
    ),
  );
  out.push(
    classic(
      'sll2.pcap',
      'Classic pcap, ns, LINKTYPE_LINUX_SLL2 (276): Linux cooked v2 headers (what tcpdump -i any --nano writes)',
      timed(ips.map((p, i) => ({ what: `SLL2 ifindex ${i + 1}, ${p.what}`, data: sll2Frame(p.data, { ifindex: i + 1, packetType: i % 2 ? 4 : 0 }) }))),
      { linkType: LT.LINUX_SLL2, resolution: 'ns' },
    ),
  );
  const v4 = ips.filter((p) => p.data[0]! >> 4 === 4);
  const v6 = ips.filter((p) => p.data[0]! >> 4 === 6);
  out.push(
    classic(
      'null-le.pcap',
      'Classic pcap, us, little-endian, LINKTYPE_NULL (0): BSD loopback, AF in little-endian host order (AF_INET 2, AF_INET6 30 as on macOS)',
      timed([...v4.map((p) => ({ what: `NULL AF 2, ${p.what}`, data: nullFrame(p.data, BSD_AF.INET, true) })), ...v6.map((p) => ({ what: `NULL AF 30, ${p.what}`, data: nullFrame(p.data, BSD_AF.INET6_DARWIN, true) }))]),
      { linkType: LT.NULL },
    ),
  );
  out.push(
    classic(
      'null-be.pcap',
      'Classic pcap, us, big-endian, LINKTYPE_NULL (0): AF in big-endian host order (AF_INET 2, AF_INET6 24 as on NetBSD/OpenBSD)',
      timed([...v4.map((p) => ({ what: `NULL AF 2 (BE), ${p.what}`, data: nullFrame(p.data, BSD_AF.INET, false) })), ...v6.map((p) => ({ what: `NULL AF 24 (BE), ${p.what}`, data: nullFrame(p.data, BSD_AF.INET6_BSD, false) }))]),
      { linkType: LT.NULL, bigEndian: true },
    ),
  );
  out.push(
    classic(
      'loop.pcap',
      'Classic pcap, us, LINKTYPE_LOOP (108): OpenBSD loopback, AF in network byte order (2 and 24)',
      timed([...v4.map((p) => ({ what: `LOOP AF 2, ${p.what}`, data: loopFrame(p.data, BSD_AF.INET) })), ...v6.map((p) => ({ what: `LOOP AF 24, ${p.what}`, data: loopFrame(p.data, BSD_AF.INET6_BSD) }))]),
      { linkType: LT.LOOP },
    ),
  );
  const long = buildFrame({ ...V4_UDP, l4: { kind: 'udp', srcPort: 7000, dstPort: 7001, payload: payload(400, 10) } });
  out.push(
    classic(
      'snaplen-truncated.pcap',
      'Classic pcap, us, Ethernet, snaplen 64: frames longer than 64 bytes are stored cut (caplen 64 < origLen)',
      timed([
        { what: 'IPv4 UDP 7000 to 7001, 442 bytes on the wire, 64 stored', data: long },
        { what: 'IPv4 TCP SYN, 54 bytes, stored whole', data: buildFrame(V4_TCP_8080) },
        { what: 'IPv6 TCP SYN, 74 bytes on the wire, 64 stored', data: buildFrame(V6_TCP_9999) },
        { what: 'QinQ IPv4 TCP, 62 bytes, stored whole', data: eth[9]!.data },
      ]),
      { snapLen: 64 },
    ),
  );

  // pcapng.
  out.push(
    pcapng(
      'pcapng-interfaces.pcapng',
      'pcapng, little-endian, one section, four interfaces: Ethernet (default us), RAW (if_tsresol 10^-9), LINUX_SLL (2^-20), Ethernet (2^-30); NRB, ISB, custom blocks and EPB options skipped',
      (b, what) => {
        b.section({ options: [PcapngBuilder.text(4, 'moat make-fixtures')] });
        const eth0 = b.addInterface({ linkType: LT.ETHERNET, snapLen: 262_144, name: 'eth0' });
        const tun0 = b.addInterface({ linkType: LT.RAW, snapLen: 65_535, tsresol: 9, name: 'tun0' });
        const any = b.addInterface({ linkType: LT.LINUX_SLL, snapLen: 262_144, tsresol: 0x80 | 20, name: 'any' });
        const eth1 = b.addInterface({ linkType: LT.ETHERNET, snapLen: 0, tsresol: 0x80 | 30, name: 'eth1' });
        b.nameResolution([{ ipv4: Uint8Array.of(10, 0, 0, 2), names: ['server.example'] }]);
        let i = 0;
        const t = (): { seconds: number; nanoseconds: number } => {
          const x = timeOf(i++);
          return { seconds: x.sec, nanoseconds: x.nsec };
        };
        b.enhancedPacket(eth0, eth[0]!.data, t());
        what.push(`eth0: ${eth[0]!.what}`);
        b.enhancedPacket(tun0, ips[0]!.data, t(), { options: [PcapngBuilder.text(COMMENT, 'a comment option'), { code: 2, value: Uint8Array.of(1, 0, 0, 0) }] });
        what.push(`tun0: ${ips[0]!.what} (EPB with comment and flags options)`);
        b.enhancedPacket(any, sllFrame(ips[3]!.data), t());
        what.push(`any: SLL, ${ips[3]!.what}`);
        b.custom(32473, payload(10, 11));
        b.enhancedPacket(eth1, eth[9]!.data, t());
        what.push(`eth1: ${eth[9]!.what}`);
        b.custom(32473, payload(5, 12), true);
        b.enhancedPacket(tun0, ips[4]!.data, { ticks: 1_700_000_123_999_999_999n });
        what.push(`tun0: ${ips[4]!.what} (ticks given in ns)`);
        b.enhancedPacket(any, sllFrame(ips[1]!.data, { packetType: 4 }), { ticks: (1_700_000_200n << 20n) + 1_048_575n });
        what.push(`any: SLL outgoing, ${ips[1]!.what} (last tick of a second at 2^-20)`);
        b.enhancedPacket(eth1, eth[5]!.data, { ticks: (1_700_000_300n << 30n) + 1n });
        what.push(`eth1: ${eth[5]!.what} (first tick after a second at 2^-30)`);
        b.interfaceStatistics(eth0, { seconds: 1_700_000_400 }, 1, 0);
        b.enhancedPacket(eth0, eth[8]!.data, t());
        what.push(`eth0: ${eth[8]!.what}`);
      },
    ),
  );
  out.push(
    pcapng('pcapng-spb-pb.pcapng', 'pcapng, little-endian: Simple Packet Blocks (no timestamp) and obsolete Packet Blocks (type 2) mixed with EPBs on one Ethernet interface', (b, what) => {
      b.section();
      b.addInterface({ linkType: LT.ETHERNET, snapLen: 0 });
      b.enhancedPacket(0, eth[0]!.data, { seconds: 1_700_000_000, nanoseconds: 1000 });
      what.push(`EPB: ${eth[0]!.what}`);
      b.simplePacket(eth[2]!.data);
      what.push(`SPB: ${eth[2]!.what}`);
      b.obsoletePacket(0, eth[5]!.data, { seconds: 1_700_000_001, nanoseconds: 2000 }, { drops: 3 });
      what.push(`PB: ${eth[5]!.what}`);
      b.simplePacket(eth[7]!.data);
      what.push(`SPB: ${eth[7]!.what}`);
      b.enhancedPacket(0, eth[3]!.data, { seconds: 1_700_000_002, nanoseconds: 3000 });
      what.push(`EPB: ${eth[3]!.what}`);
    }),
  );
  out.push(
    pcapng('pcapng-two-sections.pcapng', 'pcapng with two sections: a little-endian one (Ethernet, us) then a big-endian one (RAW at 10^-9, LINUX_SLL2 at 2^-24); interface numbers restart in the second section', (b, what) => {
      b.section();
      b.addInterface({ linkType: LT.ETHERNET, snapLen: 262_144 });
      for (let i = 0; i < 3; i++) {
        const x = timeOf(i);
        b.enhancedPacket(0, eth[i]!.data, { seconds: x.sec, nanoseconds: x.nsec });
        what.push(`section 0, if 0: ${eth[i]!.what}`);
      }
      b.section({ bigEndian: true });
      b.addInterface({ linkType: LT.RAW, snapLen: 65_535, tsresol: 9 });
      b.addInterface({ linkType: LT.LINUX_SLL2, snapLen: 262_144, tsresol: 0x80 | 24 });
      b.nameResolution([{ ipv4: Uint8Array.of(10, 0, 0, 1), names: ['client.example'] }]);
      for (let i = 0; i < 4; i++) {
        const x = timeOf(10 + i);
        const id = i % 2;
        const data = id === 0 ? ips[i]!.data : sll2Frame(ips[i]!.data, { ifindex: 3 });
        b.enhancedPacket(id, data, { seconds: x.sec, nanoseconds: x.nsec });
        what.push(`section 1 (big-endian), if ${id}: ${id === 0 ? '' : 'SLL2, '}${ips[i]!.what}`);
      }
      b.interfaceStatistics(1, { seconds: 1_700_000_100 }, 4, 0);
    }),
  );
  out.push(
    pcapng('pcapng-be.pcapng', 'pcapng, big-endian, one section: Ethernet at 10^-9 with EPB options, an ISB and a custom block', (b, what) => {
      b.section({ bigEndian: true, options: [PcapngBuilder.text(3, 'moat')] });
      b.addInterface({ linkType: LT.ETHERNET, snapLen: 262_144, tsresol: 9, name: 'veth0' });
      eth.forEach((p, i) => {
        const x = timeOf(i, 1_720_000_000);
        b.enhancedPacket(0, p.data, { seconds: x.sec, nanoseconds: x.nsec }, i % 3 === 0 ? { options: [PcapngBuilder.text(COMMENT, `packet ${i}`)] } : {});
        what.push(p.what);
        if (i === 4) b.custom(32473, payload(7, 13));
      });
      b.interfaceStatistics(0, { seconds: 1_720_000_100 }, eth.length, 0);
    }),
  );
  out.push(
    pcapng('pcapng-snaplen.pcapng', 'pcapng, little-endian, Ethernet with snaplen 64: EPBs and an SPB stored cut at 64 bytes', (b, what) => {
      b.section();
      b.addInterface({ linkType: LT.ETHERNET, snapLen: 64 });
      b.enhancedPacket(0, long, { seconds: 1_700_000_000, nanoseconds: 500_000_000 });
      what.push('EPB IPv4 UDP 7000 to 7001, 442 bytes on the wire, 64 stored');
      b.simplePacket(buildFrame(V6_TCP_9999));
      what.push('SPB IPv6 TCP SYN, 74 bytes on the wire, 64 stored');
      b.enhancedPacket(0, eth[0]!.data, { seconds: 1_700_000_001, nanoseconds: 0 });
      what.push(`EPB ${eth[0]!.what}, stored whole`);
    }),
  );
  return out;
}

// ---------------------------------------------------------------- output

const COMMAND = 'npx tsc -p tsconfig.json && node dist/test/support/make-fixtures.js';

/** The manifest of a fixture set. */
export function manifestOf(fixtures: Fixture[]): Manifest {
  return { generator: 'test/support/make-fixtures.ts', command: COMMAND, files: fixtures.map((f) => f.entry) };
}

const LINK_NAMES: Record<number, string> = { 0: 'NULL', 1: 'ETHERNET', 101: 'RAW', 108: 'LOOP', 113: 'LINUX_SLL', 276: 'LINUX_SLL2' };

function readme(fixtures: Fixture[]): string {
  const rows = fixtures.map((f) => {
    const e = f.entry;
    const links = e.linkTypes.map((l) => `${LINK_NAMES[l] ?? '?'} (${l})`).join(', ');
    return `| \`${e.file}\` | ${e.format} | ${e.byteOrder} | ${links} | ${e.packets} | ${e.description} |`;
  });
  return `# Capture fixtures

Small capture files for the offline reader (\`src/capture/pcap-reader.ts\`) and its
tests (\`test/capture/pcap-reader.test.ts\`). **Generated — do not edit by hand.**

* Generator: \`test/support/make-fixtures.ts\` (deterministic: no clock, no randomness;
  classic pcap written with Moat's pcap writer, pcapng with the \`PcapngBuilder\` of
  \`test/support/frame-builder-extra.ts\`; frames from \`test/support/packet-builder.ts\`).
* Command (from the repository root): \`${COMMAND}\`
* \`manifest.json\` lists, per file: format, byte order, link types, sections and
  interfaces (pcapng), packet count, and per packet the expected timestamp (\`tsSec\`,
  \`tsNsec\`; -1/-1 for a Simple Packet Block, which has none), \`caplen\`, \`origLen\`,
  \`linkType\`, \`interfaceId\`, \`section\`, the record's byte \`offset\` and the SHA-256
  of the captured bytes. The generator computes it from what it wrote (pcapng tick
  conversion in BigInt, truncating like Wireshark).
* Every file is read by \`capinfos\` and \`tshark -r\` (Wireshark 4.0.17) with the packet
  count listed here; the reader test checks, per packet, that Moat's reader and
  \`tshark -T fields -e frame.time_epoch -e frame.len -e frame.cap_len\` agree to the
  nanosecond. Note that tshark 4.0 also lists every pcapng Custom Block as a record of
  its own (no encapsulation type, dissected as \`data\`), so \`tshark -r\` prints 10
  lines for \`pcapng-interfaces.pcapng\` (8 packets, 2 custom blocks) and 12 for
  \`pcapng-be.pcapng\` (11 packets, 1 custom block); \`capinfos -c\` counts packets only.
  tshark prints no time for a Simple Packet Block (it has none).
* Damaged files for the error tests are generated by the test itself in a temporary
  directory; none are kept here.

| file | format | byte order | link types | packets | what it is |
|---|---|---|---|---|---|
${rows.join('\n')}
`;
}

/** Writes every fixture, manifest.json and README.md into `dir`. */
export function writeFixtures(dir: string): Fixture[] {
  const fixtures = buildFixtures();
  mkdirSync(dir, { recursive: true });
  for (const f of fixtures) writeFileSync(join(dir, f.entry.file), f.bytes);
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(manifestOf(fixtures), null, 2) + '\n');
  writeFileSync(join(dir, 'README.md'), readme(fixtures));
  return fixtures;
}

/** The repository root: the nearest ancestor of this module holding package.json. */
function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error('cannot find the repository root (no package.json above this script)');
    dir = up;
  }
  return dir;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const dir = resolve(process.argv[2] ?? join(repoRoot(), 'native-fixtures'));
  const fixtures = writeFixtures(dir);
  for (const f of fixtures) console.log(`${f.entry.file.padEnd(28)} ${String(f.entry.packets).padStart(3)} packets  ${f.bytes.length} bytes`);
  console.log(`wrote ${fixtures.length} files, manifest.json and README.md to ${dir}`);
}
