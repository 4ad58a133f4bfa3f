// Test support: builds Ethernet frames carrying IPv4 (with or without options)
// or IPv6, with a TCP, UDP, ICMP or ICMPv6 payload. Lengths and checksums
// (IPv4 header, TCP/UDP/ICMPv6 with their pseudo-headers, ICMP) are computed, so
// Wireshark dissects the frames as well-formed packets. No IPv6 extension
// headers, no fragments: the frames are what a differential test can rely on.

/** An IP address as bytes (4 or 16). */
export type IpBytes = Uint8Array;

/** Parses dotted-quad IPv4 text. Throws on anything else. */
export function parseIpv4(text: string): IpBytes {
  const parts = text.split('.');
  if (parts.length !== 4) throw new Error(`bad IPv4 address ${JSON.stringify(text)}`);
  const out = new Uint8Array(4);
  parts.forEach((p, i) => {
    if (!/^\d{1,3}$/.test(p) || Number(p) > 255) throw new Error(`bad IPv4 address ${JSON.stringify(text)}`);
    out[i] = Number(p);
  });
  return out;
}

/** Parses IPv6 text (with `::` compression and an optional dotted-quad tail). */
export function parseIpv6(text: string): IpBytes {
  const bad = (): never => {
    throw new Error(`bad IPv6 address ${JSON.stringify(text)}`);
  };
  let src = text;
  const tail: number[] = [];
  const lastColon = src.lastIndexOf(':');
  if (src.includes('.', lastColon)) {
    const v4 = parseIpv4(src.slice(lastColon + 1));
    tail.push((v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!);
    const prefix = src.slice(0, lastColon + 1);
    src = prefix.endsWith('::') ? prefix : prefix.slice(0, -1);
  }
  const halves = src.split('::');
  if (halves.length > 2) bad();
  const parse = (s: string): number[] =>
    s === ''
      ? []
      : s.split(':').map((g) => {
          if (!/^[0-9a-fA-F]{1,4}$/.test(g)) bad();
          return parseInt(g, 16);
        });
  const head = parse(halves[0]!);
  const rest = halves.length === 2 ? parse(halves[1]!) : [];
  const groups = head.length + rest.length + tail.length;
  let words: number[];
  if (halves.length === 2) {
    if (groups > 7) bad();
    words = [...head, ...new Array<number>(8 - groups).fill(0), ...rest, ...tail];
  } else {
    if (groups !== 8) bad();
    words = [...head, ...tail];
  }
  const out = new Uint8Array(16);
  words.forEach((w, i) => {
    out[2 * i] = w >> 8;
    out[2 * i + 1] = w & 0xff;
  });
  return out;
}

/** Parses IPv4 or IPv6 text. */
export function parseIp(text: string): IpBytes {
  return text.includes(':') ? parseIpv6(text) : parseIpv4(text);
}

/** Formats 4 or 16 bytes as IPv4 dotted quad or RFC 5952 IPv6 text. */
export function formatIp(bytes: IpBytes): string {
  if (bytes.length === 4) return Array.from(bytes).join('.');
  if (bytes.length !== 16) throw new Error(`an IP address has 4 or 16 bytes, not ${bytes.length}`);
  const words: number[] = [];
  for (let i = 0; i < 16; i += 2) words.push((bytes[i]! << 8) | bytes[i + 1]!);
  // Longest run of two or more zero words is compressed; the first one wins a tie.
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (words[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (ws: number[]): string => ws.map((w) => w.toString(16)).join(':');
  if (bestStart < 0) return hex(words);
  return `${hex(words.slice(0, bestStart))}::${hex(words.slice(bestStart + bestLen))}`;
}

/** A MAC address as text `aa:bb:cc:dd:ee:ff` or 6 bytes. */
export type Mac = string | Uint8Array;

function macBytes(mac: Mac): Uint8Array {
  if (typeof mac !== 'string') return mac;
  const parts = mac.split(':');
  if (parts.length !== 6 || parts.some((p) => !/^[0-9a-fA-F]{2}$/.test(p))) throw new Error(`bad MAC ${mac}`);
  return Uint8Array.from(parts.map((p) => parseInt(p, 16)));
}

/** TCP flag bits of the 8-bit flags byte (CWR..FIN). */
export const TCP = Object.freeze({ FIN: 0x01, SYN: 0x02, RST: 0x04, PSH: 0x08, ACK: 0x10, URG: 0x20, ECE: 0x40, CWR: 0x80 });

/** IP protocol numbers used by the builders. */
export const IPPROTO = Object.freeze({ ICMP: 1, TCP: 6, UDP: 17, ICMPV6: 58 });

export interface TcpSpec {
  kind: 'tcp';
  srcPort: number;
  dstPort: number;
  /** The flags byte, CWR (0x80) to FIN (0x01). The NS bit is always 0. */
  flags: number;
  seq?: number;
  ack?: number;
  window?: number;
  urgent?: number;
  /** TCP options, padded with NOPs to a multiple of 4 bytes (at most 40). */
  options?: Uint8Array;
  payload?: Uint8Array;
}

export interface UdpSpec {
  kind: 'udp';
  srcPort: number;
  dstPort: number;
  payload?: Uint8Array;
}

export interface IcmpSpec {
  /** ICMP over IPv4 or ICMPv6 over IPv6: the IP version decides which checksum applies. */
  kind: 'icmp';
  type: number;
  code: number;
  /** Message body after the 4-byte type/code/checksum header (identifier, sequence, data...). */
  body?: Uint8Array;
}

export type L4Spec = TcpSpec | UdpSpec | IcmpSpec;

export interface Ipv4Spec {
  version: 4;
  src: string;
  dst: string;
  ttl: number;
  tos?: number;
  id?: number;
  dontFragment?: boolean;
  /** Raw option bytes; padded with EOL (0) to a multiple of 4 bytes, at most 40. */
  options?: Uint8Array;
  /** Overrides the protocol number taken from the L4 spec. */
  protocol?: number;
}

export interface Ipv6Spec {
  version: 6;
  src: string;
  dst: string;
  hopLimit: number;
  trafficClass?: number;
  flowLabel?: number;
  /** Overrides the next-header number taken from the L4 spec. */
  nextHeader?: number;
}

export interface FrameSpec {
  ethSrc?: Mac;
  ethDst?: Mac;
  ip: Ipv4Spec | Ipv6Spec;
  l4: L4Spec;
}

/** The IP protocol number of an L4 spec on an IP version. */
export function protocolNumber(l4: L4Spec, version: 4 | 6): number {
  switch (l4.kind) {
    case 'tcp':
      return IPPROTO.TCP;
    case 'udp':
      return IPPROTO.UDP;
    case 'icmp':
      return version === 4 ? IPPROTO.ICMP : IPPROTO.ICMPV6;
  }
}

/** Sums 16-bit big-endian words of `data` into `acc` (one's-complement, unfolded). */
function sum16(data: Uint8Array, acc = 0): number {
  let s = acc;
  const n = data.length & ~1;
  for (let i = 0; i < n; i += 2) s += (data[i]! << 8) | data[i + 1]!;
  if (data.length & 1) s += data[data.length - 1]! << 8;
  return s;
}

function fold(sum: number): number {
  let s = sum;
  while (s > 0xffff) s = (s & 0xffff) + Math.floor(s / 0x10000);
  return ~s & 0xffff;
}

/** The Internet checksum (RFC 1071) of `data`. */
export function internetChecksum(data: Uint8Array): number {
  return fold(sum16(data));
}

function pseudoHeaderSum(src: IpBytes, dst: IpBytes, protocol: number, length: number): number {
  let s = sum16(src) + sum16(dst);
  if (src.length === 4) s += protocol + length;
  else s += Math.floor(length / 0x10000) + (length & 0xffff) + protocol;
  return s;
}

function padTo4(bytes: Uint8Array, fill: number, max: number, what: string): Uint8Array {
  const len = (bytes.length + 3) & ~3;
  if (len > max) throw new Error(`${what} are ${bytes.length} bytes, at most ${max} fit`);
  const out = new Uint8Array(len).fill(fill);
  out.set(bytes);
  return out;
}

function checkU(n: number, bits: number, what: string): void {
  if (!Number.isInteger(n) || n < 0 || n >= 2 ** bits) throw new Error(`${what} ${n} does not fit in ${bits} bits`);
}

/** Encodes the L4 segment, checksum included. */
function buildL4(l4: L4Spec, src: IpBytes, dst: IpBytes, version: 4 | 6): Uint8Array {
  const protocol = protocolNumber(l4, version);
  let seg: Uint8Array;
  let checksumAt: number;
  if (l4.kind === 'tcp') {
    checkU(l4.srcPort, 16, 'TCP source port');
    checkU(l4.dstPort, 16, 'TCP destination port');
    checkU(l4.flags, 8, 'TCP flags');
    const options = padTo4(l4.options ?? new Uint8Array(0), 1, 40, 'TCP options');
    const payload = l4.payload ?? new Uint8Array(0);
    const hdr = 20 + options.length;
    seg = new Uint8Array(hdr + payload.length);
    const v = new DataView(seg.buffer);
    v.setUint16(0, l4.srcPort);
    v.setUint16(2, l4.dstPort);
    v.setUint32(4, (l4.seq ?? 0) >>> 0);
    v.setUint32(8, (l4.ack ?? 0) >>> 0);
    seg[12] = (hdr / 4) << 4;
    seg[13] = l4.flags;
    v.setUint16(14, l4.window ?? 65535);
    v.setUint16(18, l4.urgent ?? 0);
    seg.set(options, 20);
    seg.set(payload, hdr);
    checksumAt = 16;
  } else if (l4.kind === 'udp') {
    checkU(l4.srcPort, 16, 'UDP source port');
    checkU(l4.dstPort, 16, 'UDP destination port');
    const payload = l4.payload ?? new Uint8Array(0);
    seg = new Uint8Array(8 + payload.length);
    const v = new DataView(seg.buffer);
    v.setUint16(0, l4.srcPort);
    v.setUint16(2, l4.dstPort);
    v.setUint16(4, seg.length);
    seg.set(payload, 8);
    checksumAt = 6;
  } else {
    checkU(l4.type, 8, 'ICMP type');
    checkU(l4.code, 8, 'ICMP code');
    const body = l4.body ?? new Uint8Array(4);
    seg = new Uint8Array(4 + body.length);
    seg[0] = l4.type;
    seg[1] = l4.code;
    seg.set(body, 4);
    checksumAt = 2;
  }
  const usesPseudo = l4.kind !== 'icmp' || version === 6;
  const sum = usesPseudo ? sum16(seg, pseudoHeaderSum(src, dst, protocol, seg.length)) : sum16(seg);
  let checksum = fold(sum);
  if (l4.kind === 'udp' && checksum === 0) checksum = 0xffff;
  seg[checksumAt] = checksum >> 8;
  seg[checksumAt + 1] = checksum & 0xff;
  return seg;
}

/** Builds the IP packet (header plus L4 segment) of a frame spec. */
export function buildIpPacket(spec: FrameSpec): Uint8Array {
  const { ip, l4 } = spec;
  if (ip.version === 4) {
    const src = parseIpv4(ip.src);
    const dst = parseIpv4(ip.dst);
    checkU(ip.ttl, 8, 'IPv4 TTL');
    const seg = buildL4(l4, src, dst, 4);
    const options = padTo4(ip.options ?? new Uint8Array(0), 0, 40, 'IPv4 options');
    const hdr = 20 + options.length;
    const total = hdr + seg.length;
    checkU(total, 16, 'IPv4 total length');
    const pkt = new Uint8Array(total);
    const v = new DataView(pkt.buffer);
    pkt[0] = 0x40 | (hdr / 4);
    pkt[1] = ip.tos ?? 0;
    v.setUint16(2, total);
    v.setUint16(4, ip.id ?? 0);
    v.setUint16(6, ip.dontFragment ? 0x4000 : 0);
    pkt[8] = ip.ttl;
    pkt[9] = ip.protocol ?? protocolNumber(l4, 4);
    pkt.set(src, 12);
    pkt.set(dst, 16);
    pkt.set(options, 20);
    v.setUint16(10, internetChecksum(pkt.subarray(0, hdr)));
    pkt.set(seg, hdr);
    return pkt;
  }
  const src = parseIpv6(ip.src);
  const dst = parseIpv6(ip.dst);
  checkU(ip.hopLimit, 8, 'IPv6 hop limit');
  const seg = buildL4(l4, src, dst, 6);
  checkU(seg.length, 16, 'IPv6 payload length');
  const pkt = new Uint8Array(40 + seg.length);
  const v = new DataView(pkt.buffer);
  const tc = ip.trafficClass ?? 0;
  const fl = ip.flowLabel ?? 0;
  checkU(tc, 8, 'IPv6 traffic class');
  checkU(fl, 20, 'IPv6 flow label');
  v.setUint32(0, ((6 << 28) | (tc << 20) | fl) >>> 0);
  v.setUint16(4, seg.length);
  pkt[6] = ip.nextHeader ?? protocolNumber(l4, 6);
  pkt[7] = ip.hopLimit;
  pkt.set(src, 8);
  pkt.set(dst, 24);
  pkt.set(seg, 40);
  return pkt;
}

const DEFAULT_SRC_MAC = Uint8Array.of(0x02, 0x00, 0x00, 0x00, 0x00, 0x01);
const DEFAULT_DST_MAC = Uint8Array.of(0x02, 0x00, 0x00, 0x00, 0x00, 0x02);

/** Builds an Ethernet II frame (no FCS) around the IP packet of a spec. */
export function buildFrame(spec: FrameSpec): Uint8Array {
  const pkt = buildIpPacket(spec);
  const frame = new Uint8Array(14 + pkt.length);
  frame.set(macBytes(spec.ethDst ?? DEFAULT_DST_MAC), 0);
  frame.set(macBytes(spec.ethSrc ?? DEFAULT_SRC_MAC), 6);
  const etherType = spec.ip.version === 4 ? 0x0800 : 0x86dd;
  frame[12] = etherType >> 8;
  frame[13] = etherType & 0xff;
  frame.set(pkt, 14);
  return frame;
}

/** IPv4 option encoders (RFC 791, RFC 2113). */
export const IPV4_OPTION = Object.freeze({
  EOL: Uint8Array.of(0),
  NOP: Uint8Array.of(1),
  /** Router Alert (type 148), value 0. */
  routerAlert: (): Uint8Array => Uint8Array.of(148, 4, 0, 0),
  /** Record Route (type 7) with room for `slots` addresses, none recorded yet. */
  recordRoute: (slots: number): Uint8Array => {
    const o = new Uint8Array(3 + 4 * slots);
    o[0] = 7;
    o[1] = o.length;
    o[2] = 4;
    return o;
  },
  /** Timestamp (type 68), timestamps only, room for `slots` entries, none recorded yet. */
  timestamp: (slots: number): Uint8Array => {
    const o = new Uint8Array(4 + 4 * slots);
    o[0] = 68;
    o[1] = o.length;
    o[2] = 5;
    o[3] = 0;
    return o;
  },
});

/** Concatenates byte arrays. */
export function concatBytes(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
