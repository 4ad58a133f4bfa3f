// Test support for the tshark differential test: a seeded PRNG, a generator of
// varied packets (with the field values Moat's decoder would set for them), a
// random expression generator over the subset of the rules language that
// Wireshark can express, two printers (Cloudflare syntax and the equivalent
// Wireshark 4.0 display filter), a reference model of the semantics in
// the README (The rules language), and shrinking candidates for minimising a failure.
// The tree logic (evaluation, printing, translation, shrinking) is generic over
// the leaves, and replay-diff.ts reuses it with its GeoIP and list leaves.
//
// The Wireshark printer follows the translation table of
// shared/reference/expression-language.md §3.2. Every leaf is translated to a
// display filter that is true on exactly the packets where the Cloudflare leaf
// is true, absent fields included, so `not`, `and` and `or` translate directly.

import { buildFrame, formatIp, IPV4_OPTION, concatBytes, parseIp, protocolNumber, TCP, type FrameSpec, type L4Spec } from './packet-builder.js';

// ---------------------------------------------------------------------------
// PRNG

/** sfc32, seeded through splitmix32: small, fast, and identical on every platform. */
export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number) {
    let x = seed >>> 0;
    const splitmix = (): number => {
      x = (x + 0x9e3779b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = splitmix();
    this.b = splitmix();
    this.c = splitmix();
    this.d = splitmix();
    for (let i = 0; i < 12; i++) this.u32();
  }

  /** A uniform 32-bit unsigned integer. */
  u32(): number {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) >>> 0;
    this.c = ((this.c << 21) | (this.c >>> 11)) >>> 0;
    this.c = (this.c + t) >>> 0;
    return t;
  }

  /** A uniform float in [0, 1) with 53 bits. */
  float(): number {
    return (this.u32() * 2 ** 21 + (this.u32() >>> 11)) / 2 ** 53;
  }

  /** A uniform integer in [lo, hi] (inclusive; safe integers). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.float() * (hi - lo + 1));
  }

  /** True with probability p. */
  chance(p: number): boolean {
    return this.float() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from an empty list');
    return items[this.int(0, items.length - 1)]!;
  }

  /** Picks by weight from [item, weight] pairs. */
  weighted<T>(items: ReadonlyArray<readonly [T, number]>): T {
    const total = items.reduce((s, [, w]) => s + w, 0);
    let r = this.float() * total;
    for (const [item, w] of items) {
      r -= w;
      if (r < 0) return item;
    }
    return items[items.length - 1]![0];
  }

  /** A uniform bigint in [0, n) for n >= 1 (slightly biased for huge n; fine for tests). */
  bigBelow(n: bigint): bigint {
    let r = 0n;
    for (let bits = 0n; 1n << bits < n; bits += 32n) r = (r << 32n) | BigInt(this.u32());
    return n <= 1n ? 0n : r % n;
  }

  bytes(n: number): Uint8Array {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = this.u32() & 0xff;
    return out;
  }

  /** An independent generator derived from this one. */
  fork(): Rng {
    return new Rng(this.u32());
  }
}

// ---------------------------------------------------------------------------
// Fields and values

export const INT_FIELDS = [
  'ip.len',
  'ip.hdr_len',
  'ip.ttl',
  'tcp.srcport',
  'tcp.dstport',
  'tcp.flags',
  'udp.srcport',
  'udp.dstport',
  'icmp.type',
  'icmp.code',
] as const;
export const IP_FIELDS = ['ip.src', 'ip.dst'] as const;
export const BOOL_FIELDS = [
  'tcp.flags.fin',
  'tcp.flags.syn',
  'tcp.flags.reset',
  'tcp.flags.push',
  'tcp.flags.ack',
  'tcp.flags.urg',
  'tcp.flags.ecn',
  'tcp.flags.cwr',
] as const;

export type CfIntField = (typeof INT_FIELDS)[number];
export type CfIpField = (typeof IP_FIELDS)[number];
export type CfBoolField = (typeof BOOL_FIELDS)[number];

/** Bit of each boolean flag field in the TCP flags byte. */
export const FLAG_BITS: Readonly<Record<CfBoolField, number>> = {
  'tcp.flags.fin': TCP.FIN,
  'tcp.flags.syn': TCP.SYN,
  'tcp.flags.reset': TCP.RST,
  'tcp.flags.push': TCP.PSH,
  'tcp.flags.ack': TCP.ACK,
  'tcp.flags.urg': TCP.URG,
  'tcp.flags.ecn': TCP.ECE,
  'tcp.flags.cwr': TCP.CWR,
};

/** Largest value each int field takes on our packets (the Cloudflare-side domain). */
export const INT_FIELD_MAX: Readonly<Record<CfIntField, number>> = {
  'ip.len': 65535 + 40,
  'ip.hdr_len': 15,
  'ip.ttl': 255,
  'tcp.srcport': 65535,
  'tcp.dstport': 65535,
  'tcp.flags': 255,
  'udp.srcport': 65535,
  'udp.dstport': 65535,
  'icmp.type': 255,
  'icmp.code': 255,
};

export interface IpValue {
  family: 4 | 6;
  value: bigint;
}

/** The Magic Firewall field values of one packet; an absent key is an absent field. */
export type FieldValues = Partial<Record<CfIntField, number>> &
  Partial<Record<CfIpField, IpValue>> &
  Partial<Record<CfBoolField, boolean>> & { 'ip.proto'?: string };

export function ipFromText(text: string): IpValue {
  const bytes = parseIp(text);
  let v = 0n;
  for (const b of bytes) v = (v << 8n) | BigInt(b);
  return { family: bytes.length === 4 ? 4 : 6, value: v };
}

export function ipToText(ip: IpValue): string {
  const n = ip.family === 4 ? 4 : 16;
  const bytes = new Uint8Array(n);
  let v = ip.value;
  for (let i = n - 1; i >= 0; i--) {
    bytes[i] = Number(v & 0xffn);
    v >>= 8n;
  }
  return formatIp(bytes);
}

function ipBits(family: 4 | 6): number {
  return family === 4 ? 32 : 128;
}

function ipMax(family: 4 | 6): bigint {
  return (1n << BigInt(ipBits(family))) - 1n;
}

/** IANA keywords the decoder uses for ip.proto; any other number is its decimal string. */
const PROTO_NAMES: ReadonlyMap<number, string> = new Map([
  [0, 'hopopt'],
  [1, 'icmp'],
  [2, 'igmp'],
  [4, 'ipv4'],
  [6, 'tcp'],
  [17, 'udp'],
  [41, 'ipv6'],
  [43, 'ipv6-route'],
  [44, 'ipv6-frag'],
  [47, 'gre'],
  [50, 'esp'],
  [51, 'ah'],
  [58, 'ipv6-icmp'],
  [59, 'ipv6-nonxt'],
  [60, 'ipv6-opts'],
  [132, 'sctp'],
]);

/** The ip.proto string for an IP protocol number, per the README (The rules language). */
export function protoName(n: number): string {
  return PROTO_NAMES.get(n) ?? String(n);
}

// ---------------------------------------------------------------------------
// Packets

/** One generated packet: its description, its Ethernet frame, and the fields Moat would see. */
export interface GeneratedPacket {
  spec: FrameSpec;
  frame: Uint8Array;
  fields: FieldValues;
}

/** An IP network: its first address and prefix length. */
export interface Net {
  family: 4 | 6;
  base: bigint;
  prefix: number;
}

/** The network of a CIDR text (host bits cleared). */
export function net(cidr: string): Net {
  const [addr, len] = cidr.split('/');
  const ip = ipFromText(addr!);
  const prefix = Number(len);
  const host = BigInt(ipBits(ip.family) - prefix);
  return { family: ip.family, base: (ip.value >> host) << host, prefix };
}

export function netContains(n: Net, v: IpValue): boolean {
  if (n.family !== v.family) return false;
  const host = BigInt(ipBits(n.family) - n.prefix);
  return v.value >> host === n.base >> host;
}

/** A random address of the network. */
export function inNet(rng: Rng, n: Net): IpValue {
  const host = BigInt(ipBits(n.family) - n.prefix);
  return { family: n.family, value: n.base + rng.bigBelow(1n << host) };
}

/** Address pools packets draw from; weights favour small pools so addresses repeat. */
export const V4_POOLS: ReadonlyArray<readonly [Net, number]> = [
  [net('10.0.0.0/28'), 4],
  [net('10.1.0.0/16'), 3],
  [net('192.168.1.0/24'), 3],
  [net('172.16.0.0/12'), 2],
  [net('203.0.113.0/24'), 2],
  [net('198.51.100.0/30'), 1],
  [net('8.8.8.0/29'), 1],
  [net('1.1.1.1/32'), 1],
  [net('127.0.0.0/8'), 0.5],
  [net('224.0.0.0/24'), 0.5],
  [net('0.0.0.0/32'), 0.2],
  [net('255.255.255.255/32'), 0.2],
];
export const V6_POOLS: ReadonlyArray<readonly [Net, number]> = [
  [net('2001:db8::/124'), 4],
  [net('2001:db8:1::/48'), 3],
  [net('fd00::/8'), 2],
  [net('fe80::/64'), 2],
  [net('2a00:1450::/32'), 1],
  [net('2606:4700::/32'), 1],
  [net('ff02::/112'), 0.5],
  [net('::1/128'), 0.3],
  [net('::/128'), 0.2],
  [net('ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128'), 0.2],
];

function randomAddress(rng: Rng, family: 4 | 6): IpValue {
  return inNet(rng, rng.weighted(family === 4 ? V4_POOLS : V6_POOLS));
}

/** Ports at boundaries, plus random ones. */
export const BOUNDARY_PORTS = [0, 1, 22, 53, 80, 443, 1023, 1024, 8000, 8080, 8081, 65535] as const;
/** TTL / hop-limit values at boundaries. */
export const BOUNDARY_TTLS = [1, 32, 54, 64, 128, 255] as const;

const { FIN, SYN, RST, PSH, ACK, URG, ECE, CWR } = TCP;
/** Flag sets real stacks and scanners send, including ECN negotiation and "xmas". */
const FLAG_SETS = [
  SYN, SYN | ACK, ACK, PSH | ACK, FIN | ACK, RST, RST | ACK, FIN | PSH | URG, SYN | ECE | CWR,
  SYN | ACK | ECE, ACK | ECE, CWR | ACK, CWR | PSH | ACK, URG | ACK, FIN, 0, 0xff, FIN | SYN,
] as const;

function port(rng: Rng): number {
  return rng.chance(0.6) ? rng.pick(BOUNDARY_PORTS) : rng.int(0, 65535);
}

function payload(rng: Rng, max: number): Uint8Array {
  return rng.bytes(rng.chance(0.05) ? rng.int(200, 1400) : rng.int(0, max));
}

function ipv4Options(rng: Rng): Uint8Array {
  if (rng.chance(0.1)) return IPV4_OPTION.recordRoute(9); // 39 bytes: IHL 15
  const parts: Uint8Array[] = [];
  let len = 0;
  const n = rng.int(1, 3);
  for (let i = 0; i < n; i++) {
    const opt = rng.weighted<() => Uint8Array>([
      [() => IPV4_OPTION.NOP, 2],
      [() => IPV4_OPTION.routerAlert(), 3],
      [() => IPV4_OPTION.recordRoute(rng.int(1, 3)), 2],
      [() => IPV4_OPTION.timestamp(rng.int(1, 3)), 2],
    ])();
    if (len + opt.length > 40) break;
    parts.push(opt);
    len += opt.length;
  }
  return concatBytes(...parts);
}

function tcpOptions(rng: Rng): Uint8Array {
  const parts: Uint8Array[] = [];
  if (rng.chance(0.6)) parts.push(Uint8Array.of(2, 4, 0x05, 0xb4)); // MSS 1460
  if (rng.chance(0.4)) parts.push(Uint8Array.of(1, 3, 3, rng.int(0, 14))); // NOP, window scale
  if (rng.chance(0.4)) parts.push(Uint8Array.of(4, 2)); // SACK permitted
  if (rng.chance(0.4)) parts.push(concatBytes(Uint8Array.of(1, 1, 8, 10), rng.bytes(8))); // NOP NOP timestamps
  return concatBytes(...parts);
}

function icmpSpec(rng: Rng, family: 4 | 6): L4Spec {
  // Informational messages only: error messages quote a packet, which tshark dissects as more layers.
  const echoBody = (): Uint8Array => concatBytes(rng.bytes(4), rng.bytes(rng.int(0, 48)));
  const odd = (): number => (rng.chance(0.85) ? 0 : rng.pick([1, 7, 255, rng.int(0, 255)]));
  if (family === 4) {
    return rng.weighted<() => L4Spec>([
      [() => ({ kind: 'icmp', type: 8, code: odd(), body: echoBody() }), 5],
      [() => ({ kind: 'icmp', type: 0, code: odd(), body: echoBody() }), 4],
      [() => ({ kind: 'icmp', type: rng.pick([13, 14]), code: 0, body: rng.bytes(16) }), 1],
      [() => ({ kind: 'icmp', type: rng.pick([17, 18]), code: 0, body: rng.bytes(8) }), 1],
      [() => ({ kind: 'icmp', type: 10, code: 0, body: new Uint8Array(4) }), 1],
      [() => ({ kind: 'icmp', type: 9, code: 0, body: concatBytes(Uint8Array.of(1, 2, 0x07, 0x08), rng.bytes(8)) }), 1],
      [() => ({ kind: 'icmp', type: rng.pick([15, 16]), code: 0, body: rng.bytes(4) }), 0.5],
    ])();
  }
  return rng.weighted<() => L4Spec>([
    [() => ({ kind: 'icmp', type: 128, code: odd(), body: echoBody() }), 5],
    [() => ({ kind: 'icmp', type: 129, code: odd(), body: echoBody() }), 4],
    [() => ({ kind: 'icmp', type: 133, code: 0, body: new Uint8Array(4) }), 1],
    [() => ({ kind: 'icmp', type: 134, code: 0, body: concatBytes(Uint8Array.of(64, 0, 0x07, 0x08), new Uint8Array(8)) }), 1],
    [() => ({ kind: 'icmp', type: 135, code: 0, body: concatBytes(new Uint8Array(4), rng.bytes(16)) }), 1],
    [() => ({ kind: 'icmp', type: 136, code: 0, body: concatBytes(Uint8Array.of(0x60, 0, 0, 0), rng.bytes(16)) }), 1],
    [() => ({ kind: 'icmp', type: rng.pick([200, 201]), code: rng.int(0, 255), body: rng.bytes(8) }), 0.5],
  ])();
}

function l4Spec(rng: Rng, family: 4 | 6): L4Spec {
  const kind = rng.weighted([['tcp', 2], ['udp', 1], ['icmp', 1]] as const);
  if (kind === 'udp') return { kind, srcPort: port(rng), dstPort: port(rng), payload: payload(rng, 100) };
  if (kind === 'icmp') return icmpSpec(rng, family);
  const flags = rng.chance(0.85) ? rng.pick(FLAG_SETS) : rng.int(0, 255);
  return {
    kind,
    srcPort: port(rng),
    dstPort: port(rng),
    flags,
    seq: rng.u32(),
    ack: flags & ACK ? rng.u32() : 0,
    window: rng.int(0, 65535),
    urgent: flags & URG ? rng.int(0, 65535) : 0,
    options: rng.chance(0.3) ? tcpOptions(rng) : new Uint8Array(0),
    payload: payload(rng, 60),
  };
}

function ttl(rng: Rng): number {
  return rng.chance(0.9) ? rng.pick(BOUNDARY_TTLS) : rng.int(0, 255);
}

/**
 * The field values Moat's decoder sets for a frame spec (the README (The rules language), "Decisions for packets").
 * @param ipPacketLength bytes from the IP header to the end of the packet (IPv6: 40 + payload length)
 */
export function fieldsOfSpec(spec: FrameSpec, ipPacketLength: number): FieldValues {
  const f: FieldValues = {};
  const { ip, l4 } = spec;
  f['ip.src'] = ipFromText(ip.src);
  f['ip.dst'] = ipFromText(ip.dst);
  f['ip.proto'] = protoName(protocolNumber(l4, ip.version));
  f['ip.len'] = ipPacketLength;
  if (ip.version === 4) {
    f['ip.ttl'] = ip.ttl;
    f['ip.hdr_len'] = 5 + Math.ceil((ip.options?.length ?? 0) / 4); // options are padded to 32 bits
  } else {
    f['ip.ttl'] = ip.hopLimit;
  }
  if (l4.kind === 'tcp') {
    f['tcp.srcport'] = l4.srcPort;
    f['tcp.dstport'] = l4.dstPort;
    f['tcp.flags'] = l4.flags;
    for (const b of BOOL_FIELDS) f[b] = (l4.flags & FLAG_BITS[b]) !== 0;
  } else if (l4.kind === 'udp') {
    f['udp.srcport'] = l4.srcPort;
    f['udp.dstport'] = l4.dstPort;
  } else {
    f['icmp.type'] = l4.type;
    f['icmp.code'] = l4.code;
  }
  return f;
}

/**
 * Generates `count` packets: IPv4 about 70% and IPv6 30%; TCP 50%, UDP 25%, ICMP/ICMPv6 25%.
 * No tunnels, fragments, extension headers or ICMP errors (documented differences).
 */
export function generatePackets(rng: Rng, count: number): GeneratedPacket[] {
  const out: GeneratedPacket[] = [];
  for (let i = 0; i < count; i++) {
    const family: 4 | 6 = rng.chance(0.7) ? 4 : 6;
    const src = ipToText(randomAddress(rng, family));
    const dst = ipToText(randomAddress(rng, family));
    const l4 = l4Spec(rng, family);
    const spec: FrameSpec =
      family === 4
        ? {
            ip: {
              version: 4,
              src,
              dst,
              ttl: ttl(rng),
              tos: rng.chance(0.7) ? 0 : rng.int(0, 255),
              id: rng.int(0, 65535),
              dontFragment: rng.chance(0.5),
              options: rng.chance(0.15) ? ipv4Options(rng) : new Uint8Array(0),
            },
            l4,
          }
        : {
            ip: {
              version: 6,
              src,
              dst,
              hopLimit: ttl(rng),
              trafficClass: rng.chance(0.7) ? 0 : rng.int(0, 255),
              flowLabel: rng.chance(0.5) ? 0 : rng.int(0, 0xfffff),
            },
            l4,
          };
    const frame = buildFrame(spec);
    out.push({ spec, frame, fields: fieldsOfSpec(spec, frame.length - 14) });
  }
  return out;
}

// ---------------------------------------------------------------------------
// Expressions

export type CmpOp = 'eq' | 'ne' | 'lt' | 'le' | 'gt' | 'ge';
export const CMP_OPS: readonly CmpOp[] = ['eq', 'ne', 'lt', 'le', 'gt', 'ge'];

/** An inclusive integer range; a single value has lo === hi. */
export interface IntItem {
  lo: number;
  hi: number;
}

export type IpItem =
  | { kind: 'addr'; ip: IpValue }
  | { kind: 'cidr'; ip: IpValue; prefix: number }
  | { kind: 'range'; lo: IpValue; hi: IpValue };

/** How a string literal is spelled in Cloudflare syntax. */
export type StringSpelling = 'quoted' | 'raw' | 'raw0' | 'hexbytes' | 'xescape' | 'octescape';

/** A leaf of the language subset: one comparison, set membership or flag. */
export type Leaf =
  | { kind: 'int'; field: CfIntField; op: CmpOp; value: number }
  | { kind: 'intIn'; field: CfIntField; items: IntItem[] }
  | { kind: 'band'; field: CfIntField; mask: number }
  | { kind: 'ip'; field: CfIpField; op: CmpOp; value: IpValue }
  | { kind: 'ipIn'; field: CfIpField; items: IpItem[] }
  | { kind: 'bool'; field: CfBoolField }
  | { kind: 'proto'; op: CmpOp; value: string }
  | { kind: 'protoIn'; items: string[] };

/** `not` in an expression tree with leaves L. */
export interface Not<L> {
  kind: 'not';
  arg: Logic<L>;
}

/** `and`, `or` or `xor` in an expression tree with leaves L. */
export interface Nary<L> {
  kind: 'and' | 'or' | 'xor';
  args: Logic<L>[];
}

/**
 * An expression tree with leaves L. Both differential tests generate them (this
 * file with the language's leaves, replay-diff.ts adding GeoIP and list
 * leaves), so the logic is evaluated, printed, translated and shrunk here once.
 */
export type Logic<L> = L | Not<L> | Nary<L>;

/** What a leaf has in common: its kind, and the set items a shrink may drop. */
export interface LeafShape {
  kind: string;
  items?: readonly unknown[];
}

export type Expr = Logic<Leaf>;

export function isNot<L extends LeafShape>(e: Logic<L>): e is Not<L> {
  return e.kind === 'not';
}

export function isNary<L extends LeafShape>(e: Logic<L>): e is Nary<L> {
  return e.kind === 'and' || e.kind === 'or' || e.kind === 'xor';
}

/** True when some leaf of the tree satisfies `pred`. */
export function someLeaf<L extends LeafShape>(e: Logic<L>, pred: (leaf: L) => boolean): boolean {
  if (isNot(e)) return someLeaf(e.arg, pred);
  if (isNary(e)) return e.args.some((a) => someLeaf(a, pred));
  return pred(e);
}

/** Literal values worth drawing, per field: values present in the packets plus boundaries. */
export interface ValuePools {
  ints: Map<CfIntField, number[]>;
  ips: { 4: bigint[]; 6: bigint[] };
}

const INT_BOUNDARIES: Readonly<Record<CfIntField, readonly number[]>> = {
  'ip.len': [0, 1, 20, 28, 39, 40, 41, 48, 60, 65535],
  'ip.hdr_len': [0, 4, 5, 6, 7, 15, 16, 63, 64],
  'ip.ttl': [0, ...BOUNDARY_TTLS],
  'tcp.srcport': BOUNDARY_PORTS,
  'tcp.dstport': BOUNDARY_PORTS,
  'tcp.flags': [0, 1, 2, 0x10, 0x12, 0x18, 0x40, 0x80, 0xc2, 0xff],
  'udp.srcport': BOUNDARY_PORTS,
  'udp.dstport': BOUNDARY_PORTS,
  'icmp.type': [0, 8, 13, 128, 129, 133, 135, 136, 255],
  'icmp.code': [0, 1, 255],
};

export function buildPools(frames: readonly FieldValues[]): ValuePools {
  const ints = new Map<CfIntField, number[]>();
  for (const f of INT_FIELDS) {
    const seen = new Set<number>(INT_BOUNDARIES[f]);
    for (const fr of frames) if (fr[f] !== undefined) seen.add(fr[f]);
    ints.set(f, [...seen].sort((a, b) => a - b));
  }
  const v4 = new Set<bigint>();
  const v6 = new Set<bigint>();
  for (const fr of frames) {
    for (const k of IP_FIELDS) {
      const ip = fr[k];
      if (ip) (ip.family === 4 ? v4 : v6).add(ip.value);
    }
  }
  return { ints, ips: { 4: [...v4], 6: [...v6] } };
}

/** Options of the expression generator. */
export interface ExprGenOptions {
  /** Deepest logical nesting; a bare comparison has depth 1. Default 4. */
  maxDepth?: number;
}

/** Random expression generator over the subset shared by Moat and Wireshark. */
export class ExprGenerator {
  private readonly maxDepth: number;

  constructor(
    private readonly rng: Rng,
    private readonly pools: ValuePools,
    options: ExprGenOptions = {},
  ) {
    this.maxDepth = options.maxDepth ?? 4;
  }

  /** A random expression of depth 1..maxDepth. */
  next(): Expr {
    return this.expr(this.rng.int(1, this.maxDepth));
  }

  private expr(depth: number): Expr {
    if (depth <= 1 || this.rng.chance(0.15)) return this.leaf();
    const kind = this.rng.weighted([['and', 35], ['or', 30], ['xor', 13], ['not', 22]] as const);
    if (kind === 'not') return { kind, arg: this.expr(depth - 1) };
    const n = kind === 'xor' ? 2 : this.rng.weighted([[2, 6], [3, 3], [4, 1]] as const);
    const args: Expr[] = [];
    for (let i = 0; i < n; i++) args.push(this.expr(i === 0 ? depth - 1 : this.rng.int(1, depth - 1)));
    return { kind, args };
  }

  leaf(): Leaf {
    const r = this.rng;
    const kind = r.weighted([
      ['int', 30],
      ['intIn', 14],
      ['band', 8],
      ['ip', 12],
      ['ipIn', 12],
      ['bool', 12],
      ['proto', 8],
      ['protoIn', 3],
    ] as const);
    switch (kind) {
      case 'int': {
        const field = r.pick(INT_FIELDS);
        return { kind, field, op: this.cmpOp(), value: this.intValue(field) };
      }
      case 'intIn': {
        const field = r.pick(INT_FIELDS);
        const n = r.chance(0.02) ? 0 : r.int(1, 5);
        const items: IntItem[] = [];
        for (let i = 0; i < n; i++) {
          const a = this.intValue(field);
          if (r.chance(0.6)) items.push({ lo: a, hi: a });
          else {
            const b = r.chance(0.5) ? this.intValue(field) : a + r.int(0, r.pick([1, 10, 100, 1000]));
            items.push({ lo: Math.min(a, b), hi: Math.max(a, b) });
          }
        }
        return { kind, field, items };
      }
      case 'band': {
        const field = r.pick(INT_FIELDS);
        const max = INT_FIELD_MAX[field];
        const bits = Math.ceil(Math.log2(max + 1));
        const mask = r.weighted<() => number>([
          [() => 2 ** r.int(0, bits - 1), 5],
          [() => r.int(1, max), 3],
          [() => r.pick([-1, -2, 2 ** bits, 2 ** 40 + 3]), 0.5],
        ])();
        return { kind, field, mask };
      }
      case 'ip': {
        const field = r.pick(IP_FIELDS);
        return { kind, field, op: this.cmpOp(), value: this.ipValue(r.chance(0.65) ? 4 : 6) };
      }
      case 'ipIn': {
        const field = r.pick(IP_FIELDS);
        const n = r.chance(0.02) ? 0 : r.int(1, 4);
        const items: IpItem[] = [];
        for (let i = 0; i < n; i++) items.push(this.ipItem(r.chance(0.65) ? 4 : 6));
        return { kind, field, items };
      }
      case 'bool':
        return { kind, field: r.pick(BOOL_FIELDS) };
      case 'proto':
        return { kind, op: r.chance(0.9) ? r.pick(['eq', 'eq', 'ne'] as const) : this.cmpOp(), value: this.protoValue() };
      case 'protoIn': {
        const n = r.int(1, 3);
        const items: string[] = [];
        for (let i = 0; i < n; i++) items.push(this.protoValue());
        return { kind, items };
      }
    }
  }

  private cmpOp(): CmpOp {
    return this.rng.weighted([['eq', 30], ['ne', 15], ['lt', 10], ['le', 10], ['gt', 10], ['ge', 10]] as const);
  }

  private intValue(field: CfIntField): number {
    const r = this.rng;
    const max = INT_FIELD_MAX[field];
    return r.weighted<() => number>([
      [() => r.pick(this.pools.ints.get(field)!), 75],
      [() => r.int(0, max), 20],
      [() => r.pick([-1, -40, -(2 ** 40), max + 1, 65536, 2 ** 32, 2 ** 40]), 4],
    ])();
  }

  private ipValue(family: 4 | 6): IpValue {
    const seen = this.pools.ips[family];
    if (seen.length > 0 && this.rng.chance(0.7)) return { family, value: this.rng.pick(seen) };
    return randomAddress(this.rng, family);
  }

  private ipItem(family: 4 | 6): IpItem {
    const r = this.rng;
    const kind = r.weighted([['addr', 3], ['cidr', 4], ['range', 3]] as const);
    const a = this.ipValue(family);
    if (kind === 'addr') return { kind, ip: a };
    const bits = ipBits(family);
    if (kind === 'cidr') {
      const prefix = r.chance(0.6)
        ? r.pick(family === 4 ? [0, 8, 12, 16, 20, 24, 26, 28, 30, 31, 32] : [0, 8, 16, 32, 48, 64, 96, 112, 120, 124, 126, 127, 128])
        : r.int(0, bits);
      const host = BigInt(bits - prefix);
      return { kind, ip: { family, value: (a.value >> host) << host }, prefix };
    }
    let b: IpValue;
    if (r.chance(0.4)) b = this.ipValue(family);
    else {
      const delta = r.bigBelow(1n << BigInt(r.pick([1, 4, 8, 16, family === 4 ? 24 : 80])));
      const v = a.value + delta;
      b = { family, value: v > ipMax(family) ? ipMax(family) : v };
    }
    return a.value <= b.value ? { kind, lo: a, hi: b } : { kind, lo: b, hi: a };
  }

  private protoValue(): string {
    return this.rng.weighted([
      ['tcp', 5],
      ['udp', 4],
      ['icmp', 4],
      ['ipv6-icmp', 3],
      ['gre', 1],
      ['esp', 1],
      ['sctp', 1],
      ['TCP', 0.5],
    ] as const);
  }
}

// ---------------------------------------------------------------------------
// Reference model (README, "The rules language", "Semantics")

export function cmp<T extends number | bigint | string>(a: T, op: CmpOp, b: T): boolean {
  switch (op) {
    case 'eq':
      return a === b;
    case 'ne':
      return a !== b;
    case 'lt':
      return a < b;
    case 'le':
      return a <= b;
    case 'gt':
      return a > b;
    case 'ge':
      return a >= b;
  }
}

function ipItemContains(item: IpItem, v: IpValue): boolean {
  switch (item.kind) {
    case 'addr':
      return item.ip.family === v.family && item.ip.value === v.value;
    case 'cidr': {
      if (item.ip.family !== v.family) return false;
      const host = BigInt(ipBits(v.family) - item.prefix);
      return v.value >> host === item.ip.value >> host;
    }
    case 'range':
      return item.lo.family === v.family && item.lo.value <= v.value && v.value <= item.hi.value;
  }
}

/** Evaluates the logic of a tree with the contract's semantics; `leaf(l, arg)` evaluates its leaves. */
export function evaluateLogic<L extends LeafShape, A>(e: Logic<L>, leaf: (l: L, arg: A) => boolean, arg: A): boolean {
  if (isNot(e)) return !evaluateLogic(e.arg, leaf, arg);
  if (!isNary(e)) return leaf(e, arg);
  switch (e.kind) {
    case 'and':
      return e.args.every((a) => evaluateLogic(a, leaf, arg));
    case 'or':
      return e.args.some((a) => evaluateLogic(a, leaf, arg));
    case 'xor':
      return e.args.reduce((acc, a) => acc !== evaluateLogic(a, leaf, arg), false);
  }
}

/** Evaluates an expression on one packet's fields with the contract's semantics. */
export function evaluate(e: Expr, f: FieldValues): boolean {
  return evaluateLogic(e, evaluateLeaf, f);
}

function evaluateLeaf(e: Leaf, f: FieldValues): boolean {
  switch (e.kind) {
    case 'int': {
      const v = f[e.field];
      return v !== undefined && cmp(v, e.op, e.value);
    }
    case 'intIn': {
      const v = f[e.field];
      return v !== undefined && e.items.some((it) => it.lo <= v && v <= it.hi);
    }
    case 'band': {
      const v = f[e.field];
      return v !== undefined && (BigInt(v) & BigInt.asUintN(64, BigInt(e.mask))) !== 0n;
    }
    case 'ip': {
      const v = f[e.field];
      if (v === undefined) return false;
      if (v.family !== e.value.family) return e.op === 'ne';
      return cmp(v.value, e.op, e.value.value);
    }
    case 'ipIn': {
      const v = f[e.field];
      return v !== undefined && e.items.some((it) => ipItemContains(it, v));
    }
    case 'bool':
      return f[e.field] === true;
    case 'proto': {
      const v = f['ip.proto'];
      return v !== undefined && cmp(v, e.op, e.value);
    }
    case 'protoIn': {
      const v = f['ip.proto'];
      return v !== undefined && e.items.includes(v);
    }
  }
}

// ---------------------------------------------------------------------------
// Cloudflare printer

export const PREC = { or: 1, xor: 2, and: 3, not: 4, leaf: 5 } as const;

function precOf<L extends LeafShape>(e: Logic<L>): number {
  return isNot(e) || isNary(e) ? PREC[e.kind] : PREC.leaf;
}

export const CF_OP_SPELLINGS: Readonly<Record<CmpOp, readonly [string, string]>> = {
  eq: ['==', 'eq'],
  ne: ['!=', 'ne'],
  lt: ['<', 'lt'],
  le: ['<=', 'le'],
  gt: ['>', 'gt'],
  ge: ['>=', 'ge'],
};

/**
 * Prints the logic of a tree in Cloudflare syntax with random but valid
 * spellings, parenthesising a node at random with `parenChance`; subclasses
 * print the leaves.
 */
export abstract class LogicPrinter<L extends LeafShape> {
  protected constructor(
    protected readonly rng: Rng,
    private readonly parenChance: number,
  ) {}

  print(e: Logic<L>): string {
    return this.node(e, 0);
  }

  protected abstract leaf(e: L): string;

  private node(e: Logic<L>, minPrec: number): string {
    const text = this.bare(e);
    return precOf(e) < minPrec || this.rng.chance(this.parenChance) ? `(${text})` : text;
  }

  private bare(e: Logic<L>): string {
    const r = this.rng;
    if (isNary(e)) {
      const spell = { and: ['and', '&&'], or: ['or', '||'], xor: ['xor', '^^'] }[e.kind];
      // Children of equal precedence print without parentheses: the chain is flattened, same meaning.
      return e.args.map((a) => this.node(a, PREC[e.kind])).reduce((acc, s) => `${acc} ${r.pick(spell)} ${s}`);
    }
    if (isNot(e)) {
      const spell = r.pick(['not ', '!', '! ']);
      return spell + this.node(e.arg, PREC.not);
    }
    return this.leaf(e);
  }
}

/** Prints expressions in Cloudflare syntax with random but valid spellings. */
export class CfPrinter extends LogicPrinter<Leaf> {
  constructor(rng: Rng) {
    super(rng, 0.05);
  }

  protected leaf(e: Leaf): string {
    const r = this.rng;
    switch (e.kind) {
      case 'int':
        return `${e.field}${this.op(e.op)}${this.int(e.value)}`;
      case 'intIn':
        return `${e.field} in ${this.set(e.items.map((it) => (it.lo === it.hi ? this.int(it.lo) : `${this.int(it.lo)}..${this.int(it.hi)}`)))}`;
      case 'band':
        return `${e.field}${r.chance(0.7) ? this.spaced('&') : ' bitwise_and '}${this.int(e.mask)}`;
      case 'ip':
        return `${e.field}${this.op(e.op)}${ipToText(e.value)}`;
      case 'ipIn':
        return `${e.field} in ${this.set(e.items.map(cfIpItem))}`;
      case 'bool':
        return e.field;
      case 'proto':
        return `ip.proto${this.op(e.op)}${this.str(e.value)}`;
      case 'protoIn':
        return `ip.proto in ${this.set(e.items.map((s) => this.str(s)))}`;
    }
  }

  private spaced(sym: string): string {
    return this.rng.chance(0.8) ? ` ${sym} ` : sym;
  }

  private op(op: CmpOp): string {
    const [sym, word] = CF_OP_SPELLINGS[op];
    return this.rng.chance(0.6) ? this.spaced(sym) : ` ${word} `;
  }

  private set(items: string[]): string {
    const r = this.rng;
    const sep = (): string => r.weighted([[' ', 10], ['  ', 1], ['\n', 1]] as const);
    const pad = r.chance(0.3) ? ' ' : '';
    return `{${pad}${items.reduce((acc, s, i) => (i === 0 ? s : acc + sep() + s), '')}${pad}}`;
  }

  /** Decimal, hex (0x) or octal (leading 0); negative values in decimal. */
  int(v: number): string {
    if (v <= 0) return String(v);
    return this.rng.weighted<() => string>([
      [() => String(v), 6],
      [() => `0x${v.toString(16)}`, 3],
      [() => `0${v.toString(8)}`, 1.5],
    ])();
  }

  str(s: string): string {
    const r = this.rng;
    const spelling = r.weighted<StringSpelling>([
      ['quoted', 10],
      ['raw', 1],
      ['raw0', 1],
      ['hexbytes', 1],
      ['xescape', 1],
      ['octescape', 1],
    ]);
    const bytes = Array.from(new TextEncoder().encode(s));
    const i = r.int(0, bytes.length - 1);
    switch (spelling) {
      case 'quoted':
        return JSON.stringify(s);
      case 'raw':
        return `r#"${s}"#`;
      case 'raw0':
        return `r"${s}"`;
      case 'hexbytes':
        return bytes.map((b) => b.toString(16).padStart(2, '0')).join(':');
      case 'xescape':
        return `"${s.slice(0, i)}\\x${bytes[i]!.toString(16).padStart(2, '0')}${s.slice(i + 1)}"`;
      case 'octescape':
        return `"${s.slice(0, i)}\\${bytes[i]!.toString(8).padStart(3, '0')}${s.slice(i + 1)}"`;
    }
  }
}

function cfIpItem(it: IpItem): string {
  switch (it.kind) {
    case 'addr':
      return ipToText(it.ip);
    case 'cidr':
      return `${ipToText(it.ip)}/${it.prefix}`;
    case 'range':
      return `${ipToText(it.lo)}..${ipToText(it.hi)}`;
  }
}

// ---------------------------------------------------------------------------
// Wireshark printer

/** A translated node: a constant, or display-filter text (parenthesised unless atomic). */
export type Ws = boolean | string;

export function wsOr(parts: readonly Ws[]): Ws {
  if (parts.some((p) => p === true)) return true;
  const texts = parts.filter((p): p is string => typeof p === 'string');
  if (texts.length === 0) return false;
  return texts.length === 1 ? texts[0]! : `(${texts.join(' or ')})`;
}

export function wsAnd(parts: readonly Ws[]): Ws {
  if (parts.some((p) => p === false)) return false;
  const texts = parts.filter((p): p is string => typeof p === 'string');
  if (texts.length === 0) return true;
  return texts.length === 1 ? texts[0]! : `(${texts.join(' and ')})`;
}

export function wsNot(p: Ws): Ws {
  return typeof p === 'boolean' ? !p : `!(${p})`;
}

export const WS_OPS: Readonly<Record<CmpOp, string>> = { eq: '==', ne: '!=', lt: '<', le: '<=', gt: '>', ge: '>=' };

/**
 * Where a Cloudflare int field lives in Wireshark: `ws = cf * scale + offset`, and
 * Wireshark rejects literals outside 0..max.
 */
interface WsIntTarget {
  field: string;
  scale: number;
  offset: number;
  max: number;
}

const WS_INT_TARGETS: Readonly<Record<CfIntField, readonly WsIntTarget[]>> = {
  // IPv6: our ip.len is 40 + payload length.
  'ip.len': [
    { field: 'ip.len', scale: 1, offset: 0, max: 0xffff },
    { field: 'ipv6.plen', scale: 1, offset: -40, max: 0xffff },
  ],
  // Ours is in 32-bit words, Wireshark's in bytes; absent on IPv6 in both.
  'ip.hdr_len': [{ field: 'ip.hdr_len', scale: 4, offset: 0, max: 0xff }],
  'ip.ttl': [
    { field: 'ip.ttl', scale: 1, offset: 0, max: 0xff },
    { field: 'ipv6.hlim', scale: 1, offset: 0, max: 0xff },
  ],
  'tcp.srcport': [{ field: 'tcp.srcport', scale: 1, offset: 0, max: 0xffff }],
  'tcp.dstport': [{ field: 'tcp.dstport', scale: 1, offset: 0, max: 0xffff }],
  // Wireshark's field is 12 bits; our packets never set NS, so the 8-bit byte is the whole value.
  'tcp.flags': [{ field: 'tcp.flags', scale: 1, offset: 0, max: 0xff }],
  'udp.srcport': [{ field: 'udp.srcport', scale: 1, offset: 0, max: 0xffff }],
  'udp.dstport': [{ field: 'udp.dstport', scale: 1, offset: 0, max: 0xffff }],
  'icmp.type': [
    { field: 'icmp.type', scale: 1, offset: 0, max: 0xff },
    { field: 'icmpv6.type', scale: 1, offset: 0, max: 0xff },
  ],
  'icmp.code': [
    { field: 'icmp.code', scale: 1, offset: 0, max: 0xff },
    { field: 'icmpv6.code', scale: 1, offset: 0, max: 0xff },
  ],
};

export const WS_BOOL: Readonly<Record<CfBoolField, string>> = {
  'tcp.flags.fin': 'tcp.flags.fin',
  'tcp.flags.syn': 'tcp.flags.syn',
  'tcp.flags.reset': 'tcp.flags.reset',
  'tcp.flags.push': 'tcp.flags.push',
  'tcp.flags.ack': 'tcp.flags.ack',
  'tcp.flags.urg': 'tcp.flags.urg',
  'tcp.flags.ecn': 'tcp.flags.ece',
  'tcp.flags.cwr': 'tcp.flags.cwr',
};

/** `field op w` for a field whose values are 0..max: outside that range, decided statically (Wireshark rejects such literals). */
export function wsCmp(field: string, op: CmpOp, w: number, max: number): Ws {
  if (w < 0) return op === 'eq' || op === 'lt' || op === 'le' ? false : field;
  if (w > max) return op === 'eq' || op === 'gt' || op === 'ge' ? false : field;
  return `(${field} ${WS_OPS[op]} ${w})`;
}

function wsIntCmp(t: WsIntTarget, op: CmpOp, v: number): Ws {
  return wsCmp(t.field, op, v * t.scale + t.offset, t.max);
}

/** Integer items as Wireshark set text: clamped to 0..max and sorted; '' when none is left. */
export function wsIntSetText(items: readonly IntItem[], max: number): string {
  return items
    .map((it) => ({ lo: Math.max(0, it.lo), hi: Math.min(max, it.hi) }))
    .filter((it) => it.lo <= it.hi)
    .sort((a, b) => a.lo - b.lo)
    .map((it) => (it.lo === it.hi ? String(it.lo) : `${it.lo}..${it.hi}`))
    .join(', ');
}

/** `field in {items}`, clamped to 0..max, or false when no item is left. */
function wsIntSet(field: string, items: readonly IntItem[], max: number): Ws {
  const text = wsIntSetText(items, max);
  return text === '' ? false : `(${field} in {${text}})`;
}

function wsIntIn(t: WsIntTarget, items: readonly IntItem[]): Ws {
  return wsIntSet(
    t.field,
    items.map((it) => ({ lo: it.lo * t.scale + t.offset, hi: it.hi * t.scale + t.offset })),
    t.max,
  );
}

function wsBand(t: WsIntTarget, mask: number): Ws {
  const k = BigInt.asUintN(64, BigInt(mask));
  if (t.offset === 0) {
    // ws = cf * scale with scale a power of two: (cf & k) != 0  <=>  (ws & k*scale) != 0.
    const m = (k * BigInt(t.scale)) & BigInt(t.max);
    return m === 0n ? false : `(${t.field} & ${m})`;
  }
  // ipv6.plen + 40 stays below 2^16 on our packets, so only the low 16 bits of the mask matter.
  const m = k & 0xffffn;
  return m === 0n ? false : `({${t.field} + ${-t.offset}} & ${m})`;
}

function wsIpFields(field: CfIpField): { 4: string; 6: string } {
  return field === 'ip.src' ? { 4: 'ip.src', 6: 'ipv6.src' } : { 4: 'ip.dst', 6: 'ipv6.dst' };
}

function wsIpItem(it: IpItem): string {
  return cfIpItem(it);
}

function ipItemFamily(it: IpItem): 4 | 6 {
  return it.kind === 'range' ? it.lo.family : it.ip.family;
}

/** Numbers 0..255 whose ip.proto name satisfies `pred`, as Wireshark set items. */
function protoNumbers(pred: (name: string) => boolean): IntItem[] {
  const items: IntItem[] = [];
  for (let n = 0; n <= 255; n++) {
    if (!pred(protoName(n))) continue;
    const last = items[items.length - 1];
    if (last && last.hi === n - 1) last.hi = n;
    else items.push({ lo: n, hi: n });
  }
  return items;
}

function wsProto(pred: (name: string) => boolean): Ws {
  const items = protoNumbers(pred);
  if (items.length === 1 && items[0]!.lo === 0 && items[0]!.hi === 255) return wsOr(['ip.proto', 'ipv6.nxt']);
  if (items.length === 1 && items[0]!.lo === items[0]!.hi) {
    const n = items[0]!.lo;
    return wsOr([`(ip.proto == ${n})`, `(ipv6.nxt == ${n})`]);
  }
  return wsOr([wsIntSet('ip.proto', items, 255), wsIntSet('ipv6.nxt', items, 255)]);
}

/** Translates the logic of a tree into a display filter; `leaf` translates its leaves. */
export function translateLogic<L extends LeafShape>(e: Logic<L>, leaf: (l: L) => Ws): Ws {
  if (isNot(e)) return wsNot(translateLogic(e.arg, leaf));
  if (!isNary(e)) return leaf(e);
  const parts = e.args.map((a) => translateLogic(a, leaf));
  switch (e.kind) {
    case 'and':
      return wsAnd(parts);
    case 'or':
      return wsOr(parts);
    case 'xor':
      // Wireshark 4.0 has no xor: a ^^ b  =>  (a and !b) or (!a and b), folded left.
      return parts.reduce((a, b) => wsOr([wsAnd([a, wsNot(b)]), wsAnd([wsNot(a), b])]));
  }
}

function translateLeaf(e: Leaf): Ws {
  switch (e.kind) {
    case 'int':
      return wsOr(WS_INT_TARGETS[e.field].map((t) => wsIntCmp(t, e.op, e.value)));
    case 'intIn':
      return wsOr(WS_INT_TARGETS[e.field].map((t) => wsIntIn(t, e.items)));
    case 'band':
      return wsOr(WS_INT_TARGETS[e.field].map((t) => wsBand(t, e.mask)));
    case 'ip': {
      const f = wsIpFields(e.field);
      const fam = e.value.family;
      const same = `(${f[fam]} ${WS_OPS[e.op]} ${ipToText(e.value)})`;
      // IPv4 and IPv6 never compare equal or ordered; `!=` across families is true.
      return e.op === 'ne' ? wsOr([same, f[fam === 4 ? 6 : 4]]) : same;
    }
    case 'ipIn': {
      const f = wsIpFields(e.field);
      const parts: Ws[] = [];
      for (const fam of [4, 6] as const) {
        const items = e.items.filter((it) => ipItemFamily(it) === fam);
        if (items.length > 0) parts.push(`(${f[fam]} in {${items.map(wsIpItem).join(', ')}})`);
      }
      return wsOr(parts);
    }
    case 'bool':
      // A bare boolean in Wireshark is an existence test: compare the value.
      return `(${WS_BOOL[e.field]} == 1)`;
    case 'proto': {
      const { op, value } = e;
      return wsProto((name) => cmp(name, op, value));
    }
    case 'protoIn': {
      const items = e.items;
      return wsProto((name) => items.includes(name));
    }
  }
}

/** The equivalent Wireshark 4.0 display filter, fully parenthesised. */
export function printWireshark(e: Expr): string {
  const ws = translateLogic(e, translateLeaf);
  if (ws === true) return 'frame';
  if (ws === false) return '!frame';
  return ws;
}

// ---------------------------------------------------------------------------
// Generated cases

/** One differential case: the expression and its two spellings. */
export interface DiffCase {
  index: number;
  expr: Expr;
  cf: string;
  ws: string;
  /** Frames (1-based) where the reference model says the expression is true. */
  modelFrames: number[];
}

export interface CaseGenResult {
  cases: DiffCase[];
  attempts: number;
  droppedTrivial: number;
}

/**
 * Generates `wanted` cases whose model result is neither 0% nor 100% of `frames`,
 * giving up after `budget` attempts.
 */
export function generateCases(rng: Rng, frames: readonly FieldValues[], wanted: number, budget = wanted * 20): CaseGenResult {
  const gen = new ExprGenerator(rng.fork(), buildPools(frames));
  const printer = new CfPrinter(rng.fork());
  const cases: DiffCase[] = [];
  let attempts = 0;
  let droppedTrivial = 0;
  while (cases.length < wanted && attempts < budget) {
    attempts++;
    const expr = gen.next();
    const modelFrames: number[] = [];
    frames.forEach((f, i) => {
      if (evaluate(expr, f)) modelFrames.push(i + 1);
    });
    if (modelFrames.length === 0 || modelFrames.length === frames.length) {
      droppedTrivial++;
      continue;
    }
    cases.push({ index: cases.length, expr, cf: printer.print(expr), ws: printWireshark(expr), modelFrames });
  }
  return { cases, attempts, droppedTrivial };
}

// ---------------------------------------------------------------------------
// Shrinking

/**
 * Smaller trees to try when minimising a failing one, smallest changes last:
 * a child for its parent, one argument fewer, a child shrunk, one set item fewer.
 */
export function shrinkCandidates<L extends LeafShape>(e: Logic<L>): Logic<L>[] {
  const out: Logic<L>[] = [];
  if (isNot(e)) {
    out.push(e.arg);
    for (const c of shrinkCandidates(e.arg)) out.push({ kind: 'not', arg: c });
  } else if (isNary(e)) {
    out.push(...e.args);
    if (e.args.length > 2) {
      e.args.forEach((_, i) => out.push({ kind: e.kind, args: e.args.filter((__, j) => j !== i) }));
    }
    e.args.forEach((a, i) => {
      for (const c of shrinkCandidates(a)) out.push({ kind: e.kind, args: e.args.map((x, j) => (j === i ? c : x)) });
    });
  } else {
    const items = e.items;
    if (items !== undefined && items.length > 1) items.forEach((_, i) => out.push({ ...e, items: items.filter((__, j) => j !== i) }));
  }
  return out;
}

/** Size of a tree (a set leaf counts its items), for reporting shrink progress. */
export function exprSize<L extends LeafShape>(e: Logic<L>): number {
  if (isNot(e)) return 1 + exprSize(e.arg);
  if (isNary(e)) return 1 + e.args.reduce((s, a) => s + exprSize(a), 0);
  return 1 + (e.items?.length ?? 0);
}
