// Test support for the `moat replay` differential test (test/engine/replay-differential.test.ts):
//
// - a capture generator: the packets of diff-generator.ts with addresses drawn
//   from pools that cover the networks of the test GeoIP databases and of two
//   test IP lists, wrapped as 802.1Q / QinQ frames, cut into IPv4 and IPv6
//   fragments (first and non-first), or quoted inside ICMP and ICMPv6 errors;
//   each frame comes with the field values Moat documents for it;
// - rule expressions: the expressions of diff-generator.ts plus leaves on
//   ip.src.country, ip.dst.country, ip.geoip.country, ip.src.asnum,
//   ip.dst.asnum and `ip.src/ip.dst in $list`, printed in Cloudflare syntax and
//   translated into Wireshark 4.0 display filters that hold on the outermost
//   headers only;
// - a reference model of README "The rules language" for these expressions,
//   with its own GeoIP lookup over the CSV sources of the test databases;
// - the tshark profile (VLAN, QinQ, IPv6 fragment header enabled; GeoIP on or off).
//
// Translation rules beyond shared/reference/expression-language.md §3.2 (each
// checked against tshark 4.0.17):
// - ICMP errors: tshark dissects the quoted IP header and its TCP/UDP header as
//   a second layer. IP-level fields (addresses, ttl, len, hdr_len, proto and
//   the GeoIP fields) take the layer operator `#1` (outermost ip/ipv6 layer).
//   The layer operator does not help for tcp.*/udp.*: the quoted TCP header is
//   the first tcp layer of the frame. Moat exposes no transport fields in an
//   ICMP error, so every tcp/udp leaf gets the frame guard `!icmp and !icmpv6`.
// - Fragments: reassembly is off; tshark dissects the transport header of a
//   first fragment (ports from 4 bytes, tcp.flags from 14 bytes, as Moat) and
//   shows a non-first one as data (no transport fields, as Moat).
// - IPv6 fragments: ipv6.nxt is 44 (the fragment header), whose next header is
//   `ipv6.fraghdr.nxt`; Moat's ip.proto is the protocol after the extension
//   headers. The `ipv6.fraghdr` protocol must stay enabled in the profile.
// - VLAN: the `vlan` (802.1Q, and 0x9100) and `ieee8021ad` (0x88a8) protocols
//   must stay enabled, or tshark sees no IP in tagged frames.
// - GeoIP: `ip.geoip.src_country_iso` / `ipv6.geoip.src_country_iso` (and dst),
//   `ip.geoip.country_iso` (either end: any-equal for ==, all-not-equal with an
//   implicit "exists" for !=, exactly Moat's ip.geoip.country), and
//   `*.geoip.src_asnum` / `dst_asnum`; literals are clamped to uint32.
// - Lists: the entries are inlined as `ip.src#1 in {...}` / `ipv6.src#1 in {...}`
//   by family (Moat matches lists by family, as `in {...}`).

import { writeFileSync } from 'node:fs';
import { writeFile, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  CF_OP_SPELLINGS,
  CfPrinter,
  ExprGenerator,
  LogicPrinter,
  Rng,
  buildPools,
  evaluate,
  evaluateLogic,
  fieldsOfSpec,
  generatePackets,
  inNet,
  ipFromText,
  net,
  netContains,
  ipToText,
  cmp,
  printWireshark,
  protoName,
  someLeaf,
  translateLogic,
  wsCmp,
  wsIntSetText,
  WS_OPS,
  wsOr,
  type CmpOp,
  type FieldValues,
  type IntItem,
  type IpValue,
  type Leaf,
  type Net,
  type Logic,
  type Ws,
} from './diff-generator.js';
import { fragmentIpv4, fragmentIpv6, withVlanTags, type VlanTag } from './frame-builder-extra.js';
import { readCsv } from './make-mmdb.js';
import { buildIpPacket, concatBytes, type FrameSpec, type L4Spec } from './packet-builder.js';
import { tsharkPreferences, type Tshark } from './tshark.js';

// ---------------------------------------------------------------------------
// Addresses

/** Where an address of a pool comes from: a network, or an IPv4 pool embedded in IPv6. */
type PoolEntry = { kind: 'net'; net: Net } | { kind: 'mapped' | 'compat' | '6to4' };

/**
 * IPv4 pools: every network of the test databases (country.csv, asn.csv), the
 * networks of the two test lists (half in, half out), private and special ranges.
 */
const V4_POOLS: ReadonlyArray<readonly [string, number]> = [
  ['8.8.8.0/24', 2], // US, AS15169
  ['1.1.1.0/24', 1], // AU, AS13335
  ['5.9.0.0/16', 2], // DE, AS24940; half in $cf.malware (5.9.128.0/17)
  ['9.9.9.0/24', 1], // CH, no AS
  ['81.2.69.0/24', 2], // GB, AS20712; half in $cf.malware (81.2.69.128/25)
  ['133.0.0.0/8', 1], // JP, no AS
  ['192.0.2.0/24', 2], // FR / NL, AS64496
  ['198.51.100.0/24', 1.5], // CA, AS64511
  ['198.51.100.0/29', 1], // ... 198.51.100.7 is in $office_blocklist
  ['203.0.113.0/24', 3], // JP, BR (/26), AS65536, AS65551 (/25); .100-.160 in $office_blocklist
  ['198.18.0.0/15', 1], // AS4200000001, no country
  ['10.20.0.0/15', 2], // half in $office_blocklist (10.20.0.0/16)
  ['10.66.0.0/23', 1], // half in $cf.malware (10.66.0.0/24)
  ['10.0.0.0/28', 2],
  ['192.168.1.0/24', 2],
  ['172.16.0.0/12', 1],
  ['100.64.0.0/10', 0.5],
  ['224.0.0.0/24', 0.3],
  ['0.0.0.0/32', 0.1],
  ['255.255.255.255/32', 0.1],
];

const V6_POOLS: ReadonlyArray<readonly [string, number]> = [
  ['2001:db8::/48', 2], // SE, AS64500
  ['2001:db8::/124', 1], // ... 2001:db8::5..2001:db8::9 in $office_blocklist
  ['2001:db8:1::/48', 1], // NO
  ['2001:db8:1::/63', 1], // ... half in $office_blocklist (2001:db8:1::/64)
  ['2001:db8:100::/40', 1], // CH
  ['2001:db8:2::/48', 1], // no country, AS64500 (the /32)
  ['2001:200::/32', 1], // JP
  ['2400:cb00::/32', 1], // SG, AS13335
  ['2606:4700::/32', 1], // US, AS13335
  ['2a00:1450::/32', 1], // IE, AS15169
  ['2a00:1450:dead::/47', 1], // half in $cf.malware (2a00:1450:dead::/48)
  ['2a01:4f8::/32', 1], // DE, AS24940
  ['fd00::/8', 1],
  ['fe80::/64', 1],
  ['ff02::/112', 0.3],
  ['::1/128', 0.1],
];

const POOLS4: ReadonlyArray<readonly [PoolEntry, number]> = V4_POOLS.map(([c, w]) => [{ kind: 'net', net: net(c) }, w] as const);
const POOLS6: ReadonlyArray<readonly [PoolEntry, number]> = [
  ...V6_POOLS.map(([c, w]) => [{ kind: 'net', net: net(c) } as PoolEntry, w] as const),
  // IPv4 addresses inside IPv6, which GeoIP answers with the IPv4 record.
  [{ kind: 'mapped' }, 0.8], // ::ffff:a.b.c.d
  [{ kind: 'compat' }, 0.2], // ::a.b.c.d
  [{ kind: '6to4' }, 0.3], // 2002:aabb:ccdd::/48
];

/** A random address of `family` from the pools. */
export function poolAddress(rng: Rng, family: 4 | 6): IpValue {
  const p = rng.weighted(family === 4 ? POOLS4 : POOLS6);
  if (p.kind === 'net') return inNet(rng, p.net);
  const v4 = poolAddress(rng, 4).value;
  if (p.kind === 'mapped') return { family: 6, value: (0xffffn << 32n) | v4 };
  if (p.kind === 'compat') return { family: 6, value: v4 };
  return { family: 6, value: (0x2002n << 112n) | (v4 << 80n) | rng.bigBelow(1n << 16n) };
}

// ---------------------------------------------------------------------------
// IP lists

/** One list entry: an address, a CIDR or an inclusive range. */
export type ListEntry = { kind: 'cidr'; net: Net; text: string } | { kind: 'range'; lo: IpValue; hi: IpValue; text: string };

function entry(text: string): ListEntry {
  if (text.includes('..')) {
    const [a, b] = text.split('..');
    return { kind: 'range', lo: ipFromText(a!), hi: ipFromText(b!), text };
  }
  if (text.includes('/')) return { kind: 'cidr', net: net(text), text };
  const ip = ipFromText(text);
  return { kind: 'cidr', net: { family: ip.family, base: ip.value, prefix: ip.family === 4 ? 32 : 128 }, text };
}

/** A test list: the name as rules spell it, the name given to `--list`, its entries. */
export interface TestList {
  /** How rules reference it (without `$`); `alias` is another accepted spelling. */
  ref: string;
  alias?: string;
  /** The name given to `moat replay --list name=file`. */
  cliName: string;
  entries: ListEntry[];
}

export const TEST_LISTS: readonly TestList[] = [
  {
    ref: 'office_blocklist',
    cliName: 'office_blocklist',
    entries: ['10.20.0.0/16', '198.51.100.7', '203.0.113.100..203.0.113.160', '2001:db8:1::/64', '2001:db8::5..2001:db8::9'].map(entry),
  },
  {
    ref: 'cf.malware',
    alias: 'svc.malware',
    cliName: 'cf.malware',
    entries: ['10.66.0.0/24', '5.9.128.0/17', '81.2.69.128/25', '2a00:1450:dead::/48'].map(entry),
  },
];

/** The list file text: a comment, entries, one with a trailing comment. */
export function listFileText(l: TestList): string {
  return `# ${l.ref}: a test list of the replay differential test\n${l.entries.map((e, i) => (i === 1 ? `${e.text}  # trailing comment` : e.text)).join('\n')}\n`;
}

function listContains(l: TestList, v: IpValue): boolean {
  return l.entries.some((e) =>
    e.kind === 'cidr' ? netContains(e.net, v) : e.lo.family === v.family && e.lo.value <= v.value && v.value <= e.hi.value,
  );
}

function listByRef(ref: string): TestList {
  const l = TEST_LISTS.find((x) => x.ref === ref || x.alias === ref);
  if (!l) throw new Error(`no test list ${ref}`);
  return l;
}

// ---------------------------------------------------------------------------
// GeoIP model: longest-prefix match over the CSV sources of the test databases

interface GeoRow<T> {
  net: Net;
  value: T;
}

/** An independent model of the test GeoIP databases (country.csv, asn.csv). */
export class GeoModel {
  private constructor(
    private readonly countries: readonly GeoRow<string>[],
    private readonly asns: readonly GeoRow<number>[],
  ) {}

  static async load(geoipDir: string): Promise<GeoModel> {
    const country = readCsv(await readFile(join(geoipDir, 'country.csv'), 'utf8'), 2).map((r) => ({ net: net(r.cells[0]!), value: r.cells[1]! }));
    const asn = readCsv(await readFile(join(geoipDir, 'asn.csv'), 'utf8'), 3).map((r) => ({ net: net(r.cells[0]!), value: Number(r.cells[1]!) }));
    return new GeoModel(country, asn);
  }

  /** All country codes of the database. */
  get countryCodes(): string[] {
    return [...new Set(this.countries.map((r) => r.value))].sort();
  }

  /** All AS numbers of the database. */
  get asNumbers(): number[] {
    return [...new Set(this.asns.map((r) => r.value))].sort((a, b) => a - b);
  }

  country(ip: IpValue): string | undefined {
    return this.lookup(this.countries, ip);
  }

  asn(ip: IpValue): number | undefined {
    return this.lookup(this.asns, ip);
  }

  private lookup<T>(rows: readonly GeoRow<T>[], ip: IpValue): T | undefined {
    let best: GeoRow<T> | undefined;
    for (const r of rows) if (netContains(r.net, ip) && (!best || r.net.prefix > best.net.prefix)) best = r;
    if (best) return best.value;
    // The database aliases ::/96 (IPv4 lives there), ::ffff:0:0/96 and 2002::/16 to its IPv4 tree.
    const v4 = embeddedV4(ip);
    return v4 === undefined ? undefined : this.lookup(rows, v4);
  }
}

function embeddedV4(ip: IpValue): IpValue | undefined {
  if (ip.family !== 6) return undefined;
  const v = ip.value;
  if (v >> 32n === 0n || v >> 32n === 0xffffn) return { family: 4, value: v & 0xffffffffn };
  if (v >> 112n === 0x2002n) return { family: 4, value: (v >> 80n) & 0xffffffffn };
  return undefined;
}

/** What the model knows of a frame beyond the language fields: GeoIP and list membership of both ends. */
export interface GeoFacts {
  srcCountry?: string;
  dstCountry?: string;
  srcAsn?: number;
  dstAsn?: number;
  /** Canonical refs (TestList.ref) of the lists holding the address. */
  srcLists: string[];
  dstLists: string[];
}

export function geoFacts(geo: GeoModel, f: FieldValues): GeoFacts {
  const out: GeoFacts = { srcLists: [], dstLists: [] };
  const src = f['ip.src'];
  const dst = f['ip.dst'];
  if (src) {
    out.srcCountry = geo.country(src);
    out.srcAsn = geo.asn(src);
    out.srcLists = TEST_LISTS.filter((l) => listContains(l, src)).map((l) => l.ref);
  }
  if (dst) {
    out.dstCountry = geo.country(dst);
    out.dstAsn = geo.asn(dst);
    out.dstLists = TEST_LISTS.filter((l) => listContains(l, dst)).map((l) => l.ref);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Frames

export type FrameKind = 'plain' | 'first-fragment' | 'non-first-fragment' | 'icmp-error';

/** One generated frame, what it is, and the fields Moat documents for it. */
export interface ReplayFrame {
  kind: FrameKind;
  family: 4 | 6;
  /** VLAN tags, outermost first (TPIDs). */
  tags: number[];
  frame: Uint8Array;
  fields: FieldValues;
  geo: GeoFacts;
  /** Readable summary for failure reports. */
  note: string;
}

const TRANSPORT_KEYS = [
  'tcp.srcport', 'tcp.dstport', 'tcp.flags',
  'tcp.flags.fin', 'tcp.flags.syn', 'tcp.flags.reset', 'tcp.flags.push', 'tcp.flags.ack', 'tcp.flags.urg', 'tcp.flags.ecn', 'tcp.flags.cwr',
  'udp.srcport', 'udp.dstport', 'icmp.type', 'icmp.code',
] as const;
const TCP_AFTER_PORTS = TRANSPORT_KEYS.slice(2, 11);

function ethernet(ipPacket: Uint8Array): Uint8Array {
  const f = new Uint8Array(14 + ipPacket.length);
  f.set([0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01], 0);
  const et = ipPacket[0]! >> 4 === 6 ? 0x86dd : 0x0800;
  f[12] = et >> 8;
  f[13] = et & 0xff;
  f.set(ipPacket, 14);
  return f;
}

function withAddresses(spec: FrameSpec, src: IpValue, dst: IpValue): FrameSpec {
  return { ...spec, ip: { ...spec.ip, src: ipToText(src), dst: ipToText(dst) } } as FrameSpec;
}

/** Makes sure the L4 segment is at least `min` bytes, so that it can be cut into two fragments. */
function padL4(l4: L4Spec, rng: Rng, min: number): L4Spec {
  if (l4.kind === 'icmp') {
    const body = l4.body ?? new Uint8Array(4);
    return body.length + 4 >= min ? l4 : { ...l4, body: concatBytes(body, rng.bytes(min - 4 - body.length + rng.int(0, 40))) };
  }
  const hdr = l4.kind === 'tcp' ? 20 + (((l4.options?.length ?? 0) + 3) & ~3) : 8;
  const payload = l4.payload ?? new Uint8Array(0);
  return hdr + payload.length >= min ? l4 : { ...l4, payload: concatBytes(payload, rng.bytes(min - hdr - payload.length + rng.int(0, 40))) };
}

const ICMP4_ERRORS: ReadonlyArray<readonly [number, readonly number[]]> = [
  [3, [0, 1, 2, 3, 4, 5, 9, 10, 13]],
  [11, [0, 1]],
  [12, [0]],
];
const ICMP6_ERRORS: ReadonlyArray<readonly [number, readonly number[]]> = [
  [1, [0, 1, 3, 4, 5, 6]],
  [2, [0]],
  [3, [0, 1]],
  [4, [0, 1, 2]],
];

export interface CaptureMix {
  vlan: number;
  qinq: number;
  firstFragment: number;
  nonFirstFragment: number;
  icmpError: number;
}

export const DEFAULT_MIX: CaptureMix = { vlan: 0.1, qinq: 0.06, firstFragment: 0.08, nonFirstFragment: 0.08, icmpError: 0.08 };

/**
 * Generates `count` frames: the packets of diff-generator.ts (IPv4 70%, IPv6 30%;
 * TCP, UDP, ICMP/ICMPv6 informational) with pool addresses, some cut into
 * fragments (first fragments with 8 to 512 bytes of the transport header and
 * payload) or replaced by an ICMP error quoting a TCP/UDP packet (8 bytes of it,
 * or more), some 802.1Q or QinQ (0x88a8 or 0x9100 outer) tagged, most short
 * ones padded to 60 bytes.
 */
export function generateFrames(rng: Rng, count: number, geo: GeoModel, mix: CaptureMix = DEFAULT_MIX): ReplayFrame[] {
  const base = generatePackets(rng.fork(), count);
  // Quoted packets for ICMP errors: TCP/UDP packets of each family.
  const quotable = generatePackets(rng.fork(), Math.max(200, Math.ceil(count / 4))).filter((p) => p.spec.l4.kind !== 'icmp');
  const quote4 = quotable.filter((p) => p.spec.ip.version === 4);
  const quote6 = quotable.filter((p) => p.spec.ip.version === 6);
  const out: ReplayFrame[] = [];
  for (const p of base) {
    const family = p.spec.ip.version;
    const src = poolAddress(rng, family);
    const dst = poolAddress(rng, family);
    let spec = withAddresses(p.spec, src, dst);
    const kind = rng.weighted<FrameKind>([
      ['plain', 1 - mix.firstFragment - mix.nonFirstFragment - mix.icmpError],
      ['first-fragment', mix.firstFragment],
      ['non-first-fragment', mix.nonFirstFragment],
      ['icmp-error', mix.icmpError],
    ]);
    let ipPacket: Uint8Array;
    let fields: FieldValues;
    let note: string;
    if (kind === 'plain') {
      ipPacket = buildIpPacket(spec);
      fields = fieldsOfSpec(spec, ipPacket.length);
      note = `${spec.l4.kind} over IPv${family}`;
    } else if (kind === 'icmp-error') {
      const inner = rng.pick(family === 4 ? quote4 : quote6);
      // The quoted packet was sent by this packet's destination.
      const innerSpec = withAddresses(inner.spec, dst, poolAddress(rng, family));
      const innerPacket = buildIpPacket(innerSpec);
      const ihl = family === 4 ? (innerPacket[0]! & 15) * 4 : 40;
      // RFC 792: the IP header and 8 bytes; RFC 1812 / RFC 4443: as much as fits.
      const quoted = rng.chance(0.5) ? innerPacket.subarray(0, ihl + 8) : innerPacket.subarray(0, Math.min(innerPacket.length, ihl + rng.int(8, 120)));
      const [type, codes] = rng.pick(family === 4 ? ICMP4_ERRORS : ICMP6_ERRORS);
      const code = rng.pick(codes);
      const head = new Uint8Array(4);
      if (family === 6 && type === 2) new DataView(head.buffer).setUint32(0, rng.pick([1280, 1400, 1500]));
      if ((family === 4 && type === 12) || (family === 6 && type === 4)) head[family === 4 ? 0 : 3] = rng.int(0, 40);
      spec = { ...spec, l4: { kind: 'icmp', type, code, body: concatBytes(head, quoted) } };
      ipPacket = buildIpPacket(spec);
      fields = fieldsOfSpec(spec, ipPacket.length);
      note = `ICMPv${family === 4 ? 4 : 6} error ${type}/${code} quoting ${innerSpec.l4.kind} ${innerSpec.ip.src} -> ${innerSpec.ip.dst} (${quoted.length} bytes)`;
    } else {
      spec = { ...spec, l4: padL4(spec.l4, rng, 24) };
      const whole = buildIpPacket(spec);
      const hdr = family === 4 ? (whole[0]! & 15) * 4 : 40;
      const l4Len = whole.length - hdr;
      const steps = [8, 16, 24, 32, 48, 64, 128, 512].filter((s) => s < l4Len);
      const step = rng.pick(steps);
      const frags = family === 4 ? fragmentIpv4(whole, step) : fragmentIpv6(whole, step, rng.u32());
      const index = kind === 'first-fragment' ? 0 : rng.int(1, frags.length - 1);
      ipPacket = frags[index]!;
      fields = fieldsOfSpec(spec, ipPacket.length);
      if (kind === 'non-first-fragment') {
        for (const k of TRANSPORT_KEYS) delete fields[k];
        if (family === 4) fields['ip.hdr_len'] = 5; // options travel in the first fragment only
      } else if (spec.l4.kind === 'tcp' && step < 14) {
        for (const k of TCP_AFTER_PORTS) delete fields[k];
      }
      note = `${kind} ${index + 1}/${frags.length} (${Math.min(step, l4Len - index * step)} of ${l4Len} bytes of ${spec.l4.kind}) over IPv${family}`;
    }
    let frame = ethernet(ipPacket);
    const tagKind = rng.weighted([['none', 1 - mix.vlan - mix.qinq], ['vlan', mix.vlan], ['qinq', mix.qinq]] as const);
    const tags: VlanTag[] = [];
    if (tagKind === 'vlan') tags.push({ tpid: 0x8100, vid: rng.int(1, 4094), pcp: rng.int(0, 7) });
    if (tagKind === 'qinq') tags.push({ tpid: rng.chance(0.75) ? 0x88a8 : 0x9100, vid: rng.int(1, 4094) }, { tpid: 0x8100, vid: rng.int(1, 4094) });
    if (tags.length > 0) frame = withVlanTags(frame, tags);
    // Most short frames carry Ethernet padding to the 60-byte minimum, which is not IP payload.
    if (frame.length < 60 && rng.chance(0.7)) frame = concatBytes(frame, new Uint8Array(60 - frame.length));
    out.push({ kind, family, tags: tags.map((t) => t.tpid), frame, fields, geo: geoFacts(geo, fields), note });
  }
  return out;
}

// ---------------------------------------------------------------------------
// Rule expressions

export type CountryField = 'ip.src.country' | 'ip.dst.country' | 'ip.geoip.country';
export type AsnField = 'ip.src.asnum' | 'ip.dst.asnum';
export type AddrField = 'ip.src' | 'ip.dst';

/** Leaves on GeoIP and lists, which the language differential test does not cover. */
export type GeoLeaf =
  | { kind: 'country'; field: CountryField; op: CmpOp; value: string }
  | { kind: 'countryIn'; field: CountryField; items: string[] }
  | { kind: 'asn'; field: AsnField; op: CmpOp; value: number }
  | { kind: 'asnIn'; field: AsnField; items: IntItem[] }
  | { kind: 'asnBand'; field: AsnField; mask: number }
  | { kind: 'list'; field: AddrField; list: string };

export type BaseLeaf = Leaf;
export type RuleLeaf = BaseLeaf | GeoLeaf;

/** A rule expression: the language's leaves, GeoIP/list leaves, and logic. */
export type RExpr = Logic<RuleLeaf>;

const GEO_KINDS: ReadonlySet<string> = new Set(['country', 'countryIn', 'asn', 'asnIn', 'asnBand', 'list']);

export function isGeoLeaf(e: RExpr): e is GeoLeaf {
  return GEO_KINDS.has(e.kind);
}

/** True when the expression reads a country, an AS number or a list. */
export function usesGeo(e: RExpr): boolean {
  return someLeaf(e, isGeoLeaf);
}

/** True when the expression reads a country or an AS number (tshark then needs GeoIP lookups). */
export function usesGeoIp(e: RExpr): boolean {
  return someLeaf(e, (l) => isGeoLeaf(l) && l.kind !== 'list');
}

const CMP_WEIGHTS: ReadonlyArray<readonly [CmpOp, number]> = [['eq', 40], ['ne', 25], ['lt', 8], ['le', 8], ['gt', 8], ['ge', 8]];

/** Generates rule expressions; `share` of them read countries, AS numbers or lists. */
export class RuleGenerator {
  private readonly gen: ExprGenerator;
  private readonly small: ExprGenerator;

  constructor(
    private readonly rng: Rng,
    frames: readonly FieldValues[],
    private readonly geo: GeoModel,
    private readonly share = 0.45,
  ) {
    const pools = buildPools(frames);
    this.gen = new ExprGenerator(rng.fork(), pools);
    this.small = new ExprGenerator(rng.fork(), pools, { maxDepth: 2 });
  }

  next(): RExpr {
    const r = this.rng;
    if (!r.chance(this.share)) return this.gen.next();
    const shape = r.weighted([['leaf', 45], ['notLeaf', 8], ['withBase', 32], ['twoGeo', 15]] as const);
    if (shape === 'leaf') return this.geoLeaf();
    if (shape === 'notLeaf') return { kind: 'not', arg: this.geoLeaf() };
    const kind = r.weighted([['and', 5], ['or', 4], ['xor', 1]] as const);
    const other: RExpr = shape === 'withBase' ? this.small.next() : this.geoLeaf();
    const args = r.chance(0.5) ? [this.geoLeaf(), other] : [other, this.geoLeaf()];
    return { kind, args };
  }

  geoLeaf(): GeoLeaf {
    const r = this.rng;
    const kind = r.weighted([['country', 30], ['countryIn', 10], ['asn', 18], ['asnIn', 7], ['asnBand', 4], ['list', 22]] as const);
    switch (kind) {
      case 'country':
        return { kind, field: this.countryField(), op: r.weighted(CMP_WEIGHTS), value: this.country() };
      case 'countryIn': {
        const items: string[] = [];
        const n = r.int(1, 4);
        for (let i = 0; i < n; i++) items.push(this.country());
        return { kind, field: this.countryField(), items };
      }
      case 'asn':
        return { kind, field: this.asnField(), op: r.weighted(CMP_WEIGHTS), value: this.asn() };
      case 'asnIn': {
        const items: IntItem[] = [];
        const n = r.int(1, 4);
        for (let i = 0; i < n; i++) {
          const a = this.asn();
          if (r.chance(0.6)) items.push({ lo: a, hi: a });
          else {
            const b = r.chance(0.5) ? this.asn() : a + r.int(0, 2000);
            items.push({ lo: Math.min(a, b), hi: Math.max(a, b) });
          }
        }
        return { kind, field: this.asnField(), items };
      }
      case 'asnBand':
        return { kind, field: this.asnField(), mask: r.chance(0.7) ? 2 ** r.int(0, 31) : r.pick([r.int(1, 2 ** 32 - 1), 2 ** 32, 2 ** 40 + 1, -1]) };
      case 'list': {
        const l = r.pick(TEST_LISTS);
        return { kind, field: r.chance(0.5) ? 'ip.src' : 'ip.dst', list: l.alias && r.chance(0.25) ? l.alias : l.ref };
      }
    }
  }

  private countryField(): CountryField {
    return this.rng.weighted([['ip.src.country', 40], ['ip.dst.country', 35], ['ip.geoip.country', 25]] as const);
  }

  private asnField(): AsnField {
    return this.rng.chance(0.5) ? 'ip.src.asnum' : 'ip.dst.asnum';
  }

  private country(): string {
    const r = this.rng;
    return r.chance(0.93) ? r.pick(this.geo.countryCodes) : r.pick(['ZZ', 'gb', 'A', 'USA', 'M']);
  }

  private asn(): number {
    const r = this.rng;
    return r.weighted<() => number>([
      [() => r.pick(this.geo.asNumbers), 80],
      [() => r.int(0, 70000), 10],
      [() => r.pick([0, 1, 65535, 65536, 2 ** 31, 2 ** 32 - 1, 2 ** 32, -1, 2 ** 40]), 10],
    ])();
  }
}

// ---------------------------------------------------------------------------
// Reference model

function geoEval(e: GeoLeaf, g: GeoFacts): boolean {
  switch (e.kind) {
    case 'country':
    case 'countryIn': {
      const test = (v: string): boolean => (e.kind === 'country' ? cmp(v, e.op, e.value) : e.items.includes(v));
      const values = (e.field === 'ip.src.country' ? [g.srcCountry] : e.field === 'ip.dst.country' ? [g.dstCountry] : [g.srcCountry, g.dstCountry]).filter(
        (v): v is string => v !== undefined,
      );
      // Several values (ip.geoip.country): != means none equal, every other test any.
      if (e.kind === 'country' && e.op === 'ne') return values.length > 0 && values.every((v) => v !== e.value);
      return values.some(test);
    }
    case 'asn':
    case 'asnIn':
    case 'asnBand': {
      const v = e.field === 'ip.src.asnum' ? g.srcAsn : g.dstAsn;
      if (v === undefined) return false;
      if (e.kind === 'asn') return cmp(v, e.op, e.value);
      if (e.kind === 'asnIn') return e.items.some((it) => it.lo <= v && v <= it.hi);
      return (BigInt(v) & BigInt.asUintN(64, BigInt(e.mask))) !== 0n;
    }
    case 'list':
      return (e.field === 'ip.src' ? g.srcLists : g.dstLists).includes(listByRef(e.list).ref);
  }
}

function evaluateRuleLeaf(e: RuleLeaf, f: ReplayFrame): boolean {
  return isGeoLeaf(e) ? geoEval(e, f.geo) : evaluate(e, f.fields);
}

/** Evaluates a rule expression on a frame with the semantics of README "The rules language". */
export function evaluateRule(e: RExpr, f: ReplayFrame): boolean {
  return evaluateLogic(e, evaluateRuleLeaf, f);
}

// ---------------------------------------------------------------------------
// Cloudflare printer

/** Prints rule expressions in Cloudflare syntax, with random valid spellings. */
export class RuleCfPrinter extends LogicPrinter<RuleLeaf> {
  private readonly base: CfPrinter;

  constructor(rng: Rng) {
    super(rng, 0.04);
    this.base = new CfPrinter(rng);
  }

  protected leaf(e: RuleLeaf): string {
    const r = this.rng;
    switch (e.kind) {
      case 'country':
        return `${e.field}${this.op(e.op)}${this.base.str(e.value)}`;
      case 'countryIn':
        return `${e.field} in {${e.items.map((s) => this.base.str(s)).join(' ')}}`;
      case 'asn':
        return `${e.field}${this.op(e.op)}${this.base.int(e.value)}`;
      case 'asnIn':
        return `${e.field} in {${e.items.map((it) => (it.lo === it.hi ? this.base.int(it.lo) : `${this.base.int(it.lo)}..${this.base.int(it.hi)}`)).join(' ')}}`;
      case 'asnBand':
        return `${e.field}${r.chance(0.7) ? ' & ' : ' bitwise_and '}${this.base.int(e.mask)}`;
      case 'list':
        return `${e.field} in $${e.list}`;
      default:
        return this.base.print(e);
    }
  }

  private op(op: CmpOp): string {
    const [sym, word] = CF_OP_SPELLINGS[op];
    return this.rng.chance(0.6) ? ` ${sym} ` : ` ${word} `;
  }
}

// ---------------------------------------------------------------------------
// Wireshark translation (the logic and its combinators are diff-generator's)

/** IP-level fields the language translation emits; they get the layer operator #1 (outermost header). */
const LAYERED = /\b(ip|ipv6)\.(src|dst|len|hdr_len|ttl|plen|hlim)\b(?!#)/g;
/** Moat reads no transport header inside an ICMP error; tshark dissects the quoted one. */
const TRANSPORT_GUARD = '!icmp and !icmpv6';

/** `ip.proto` is the protocol after the IPv6 extension headers; with a fragment header ipv6.nxt is 44. */
function wsProto(leaf: Extract<BaseLeaf, { kind: 'proto' | 'protoIn' }>): Ws {
  const nums: IntItem[] = [];
  for (let n = 0; n <= 255; n++) if (evaluate(leaf, { 'ip.proto': protoName(n) })) nums.push({ lo: n, hi: n });
  const set = wsIntSetText(nums, 255);
  if (set === '') return false;
  return `((ip.proto#1 in {${set}}) or ((ipv6.nxt#1 in {${set}}) and !ipv6.fraghdr) or (ipv6.fraghdr.nxt#1 in {${set}}))`;
}

function wsBaseLeaf(leaf: BaseLeaf): Ws {
  if (leaf.kind === 'proto' || leaf.kind === 'protoIn') return wsProto(leaf);
  const text = printWireshark(leaf);
  if (text === 'frame') return true;
  if (text === '!frame') return false;
  const layered = text.replace(LAYERED, '$&#1');
  return /\b(tcp|udp)\./.test(layered) ? `(${layered} and ${TRANSPORT_GUARD})` : layered;
}

const U32 = 0xffffffff;

function countryFields(f: CountryField): [string, string] {
  const which = f === 'ip.src.country' ? 'src_country_iso' : f === 'ip.dst.country' ? 'dst_country_iso' : 'country_iso';
  return [`ip.geoip.${which}#1`, `ipv6.geoip.${which}#1`];
}

function wsString(s: string): string {
  return JSON.stringify(s);
}

function wsGeoLeaf(e: GeoLeaf): Ws {
  switch (e.kind) {
    case 'country':
      return wsOr(countryFields(e.field).map((f) => `(${f} ${WS_OPS[e.op]} ${wsString(e.value)})`));
    case 'countryIn':
      return e.items.length === 0 ? false : wsOr(countryFields(e.field).map((f) => `(${f} in {${e.items.map(wsString).join(', ')}})`));
    case 'asn':
    case 'asnIn':
    case 'asnBand': {
      const which = e.field === 'ip.src.asnum' ? 'src_asnum' : 'dst_asnum';
      const fields = [`ip.geoip.${which}#1`, `ipv6.geoip.${which}#1`];
      if (e.kind === 'asn') return wsOr(fields.map((f) => wsCmp(f, e.op, e.value, U32)));
      if (e.kind === 'asnIn') {
        const set = wsIntSetText(e.items, U32);
        return set === '' ? false : wsOr(fields.map((f) => `(${f} in {${set}})`));
      }
      const m = BigInt.asUintN(64, BigInt(e.mask)) & BigInt(U32);
      return m === 0n ? false : wsOr(fields.map((f) => `(${f} & ${m})`));
    }
    case 'list': {
      const l = listByRef(e.list);
      const parts: Ws[] = [];
      for (const fam of [4, 6] as const) {
        const items = l.entries.filter((x) => (x.kind === 'cidr' ? x.net.family : x.lo.family) === fam).map((x) => x.text);
        const field = `${fam === 4 ? 'ip' : 'ipv6'}.${e.field === 'ip.src' ? 'src' : 'dst'}#1`;
        if (items.length > 0) parts.push(`(${field} in {${items.join(', ')}})`);
      }
      return wsOr(parts);
    }
  }
}

function translateRuleLeaf(e: RuleLeaf): Ws {
  return isGeoLeaf(e) ? wsGeoLeaf(e) : wsBaseLeaf(e);
}

/** The equivalent Wireshark 4.0 display filter, on the outermost headers. */
export function ruleToWireshark(e: RExpr): string {
  const ws = translateLogic(e, translateRuleLeaf);
  return ws === true ? 'frame' : ws === false ? '!frame' : ws;
}

// ---------------------------------------------------------------------------
// tshark profile

/** Protocols kept enabled on top of tshark.ts's ENABLED_PROTOCOLS. */
export const EXTRA_PROTOCOLS: readonly string[] = ['vlan', 'ieee8021ad', 'ipv6.fraghdr'];

/**
 * Turns the profile Tshark.create wrote into the replay profile: VLAN, QinQ and
 * the IPv6 fragment header enabled, reassembly off, and with `geoip` GeoIP
 * lookups on with the databases in `mmdbDir` (the `maxmind_db_paths` UAT).
 * Lookups cost about 0.2 s per run on 3,000 frames, so rules without GeoIP
 * fields run with a profile that has them off.
 */
export async function writeReplayProfile(tshark: Tshark, mmdbDir: string, geoip: boolean): Promise<void> {
  const dir = tshark.configDir;
  const disabled = (await readFile(join(dir, 'disabled_protos'), 'utf8')).split('\n').filter((p) => p !== '' && !EXTRA_PROTOCOLS.includes(p));
  await writeFile(join(dir, 'disabled_protos'), disabled.join('\n') + '\n');
  await writeFile(join(dir, 'preferences'), tsharkPreferences(geoip));
  if (mmdbDir.includes('"')) throw new Error(`a quote in ${mmdbDir} cannot go in a UAT file`);
  writeFileSync(join(dir, 'maxmind_db_paths'), `"${mmdbDir}"\n`);
}
