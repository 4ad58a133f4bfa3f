// Conformance table of the rules language (Cloudflare's Rules language for Magic Firewall,
// network_transit field set), written by hand from the README (The rules language) (the contract) and
// /work/shared/reference/expression-language.md (Cloudflare docs and wirefilter behaviour).
// No expected value here was obtained by running the engine.
//
// Shape of a case:
//   - `packet` + `expect: boolean`        one packet, one result;
//   - `runs: [{ packet, expect }, ...]`   one expression against several packets;
//   - `expect: { error }`                 compilation fails with that code (or one of the codes
//                                          listed, where the contract does not pin a single one; a
//                                          comment then says why); `at` is a source index the error
//                                          span must cover.
// A packet lists the fields that are present; every other field is absent. IP fields are text,
// `ip.proto`/countries/colo are strings, the raw fields `ip` `tcp` `udp` `icmp` are hex strings (or a
// `{ hex, start, end }` view into a larger buffer). `ip.geoip.country` is virtual: set
// `ip.src.country` / `ip.dst.country`.
// `lists` defaults to DEFAULT_LISTS; `'none'` compiles without the `lists` option.

/** A view [start, end) into a larger buffer, given in hex. */
export interface RawBytes {
  readonly hex: string;
  readonly start: number;
  readonly end: number;
}
export type FieldValue = string | number | boolean | RawBytes;
export type Packet = Readonly<Record<string, FieldValue>>;
export type Lists = Readonly<Record<string, readonly string[]>>;

export interface Run {
  readonly packet: Packet;
  readonly expect: boolean;
}
export interface ErrorExpect {
  /** The error code, or the set of acceptable codes where the contract leaves the choice open. */
  readonly error: number | readonly number[];
}

interface CaseBase {
  readonly name: string;
  readonly expr: string;
  readonly lists?: Lists | 'none';
  /** For valid expressions: the sorted `fields` / `lists` the filter reports. */
  readonly reports?: { readonly fields?: readonly string[]; readonly lists?: readonly string[] };
}
export interface ValueCase extends CaseBase {
  readonly packet?: Packet;
  readonly expect: boolean;
}
export interface RunsCase extends CaseBase {
  readonly runs: readonly Run[];
}
export interface ErrorCase extends CaseBase {
  readonly expect: ErrorExpect;
  /** A source index that the error span must cover. */
  readonly at?: number;
}
export type Case = ValueCase | RunsCase | ErrorCase;

/** Lists passed to compileExpression by default, keyed by canonical name. */
export const DEFAULT_LISTS: Lists = {
  'svc.anonymizer': ['198.51.100.0/24', '2001:db8:a::/48'],
  'svc.botnetcc': ['203.0.113.7'],
  'svc.malware': ['10.0.0.0/8', '2001:db8::/32', '1.2.3.4..1.2.3.9'],
  office_blocklist: ['192.0.2.1'],
  'hello.world': ['192.0.2.55'],
  empty_list: [],
};

// ---------------------------------------------------------------------------------------------
// Helpers: packets and long expressions
// ---------------------------------------------------------------------------------------------

const NO_PACKET: Packet = {};

/** The eight TCP flag booleans, the named ones true and the rest false (as a decoder sets them). */
function flags(on: string): Packet {
  const names = ['fin', 'syn', 'reset', 'push', 'ack', 'urg', 'ecn', 'cwr'];
  const set = new Set(on.split(' ').filter((s) => s !== ''));
  for (const s of set) if (!names.includes(s)) throw new Error(`bad flag ${s}`);
  const p: Record<string, boolean> = {};
  for (const n of names) p[`tcp.flags.${n}`] = set.has(n);
  return p;
}
const port = (p: number): Packet => ({ 'tcp.dstport': p });
const src = (a: string): Packet => ({ 'ip.src': a });
const proto = (s: string): Packet => ({ 'ip.proto': s });
const colo = (s: string): Packet => ({ 'cf.colo.name': s });

/** `head` + spaces + `tail`, exactly `len` characters long (padding sits inside the expression). */
function padTo(len: number, head: string, tail: string): string {
  const n = len - head.length - tail.length;
  if (n < 1) throw new Error('padTo: too short');
  return head + ' '.repeat(n) + tail;
}

/** `tcp.dstport == 1 or tcp.dstport == 2 or ...`, exactly `len` characters (spaces pad the first `==`). */
function portChain(len: number): string {
  const terms: string[] = [];
  let total = 0;
  for (let i = 1; ; i++) {
    const t = `tcp.dstport == ${i}`;
    const add = (terms.length === 0 ? 0 : 4) + t.length;
    if (total + add > len) break;
    terms.push(t);
    total += add;
  }
  const s = terms.join(' or ');
  return s.replace('==', '=='.padEnd(2 + len - s.length, ' '));
}

// Raw headers used by bit_slice cases.
// UDP: srcport 53 (0035), dstport 8080 (1f90), length 16 (0010), checksum abcd, payload "hello".
const UDP_HELLO = '00351f900010abcd' + '68656c6c6f'; // 13 bytes = 104 bits
// IPv4: 45 00 0028 | 3039 0000 | 40 06 7c9d | c0a80001 (192.168.0.1) | c0a80002 (192.168.0.2)
const IPV4_HDR = '450000283039000040067c9dc0a80001c0a80002';
// TCP: srcport 8080, dstport 80, seq 1, ack 0, data offset 5, flags 0x02 (SYN), window 0x2000.
const TCP_SYN_HDR = '1f900050' + '00000001' + '00000000' + '5002' + '2000' + '00000000';
// ICMP echo request: type 8, code 0, checksum f7ff, id 1, seq 1.
const ICMP_ECHO = '0800f7ff00010001';

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

export const CASES: readonly Case[] = [
  // ===== Constants ============================================================================
  { name: 'true matches every packet (how Cloudflare deploys a rule for all traffic)', expr: 'true',
    runs: [{ packet: port(80), expect: true }, { packet: {}, expect: true }] },
  { name: 'false matches no packet', expr: 'false', runs: [{ packet: port(80), expect: false }, { packet: {}, expect: false }] },
  { name: 'true and false combine like any test', expr: 'true and not (false or tcp.dstport == 22)',
    runs: [{ packet: port(22), expect: false }, { packet: port(80), expect: true }] },
  { name: 'true with an operator is an error: it is a constant', expr: 'true == 1', expect: { error: 2005 } },
  // ===== Integer fields: every operator =====================================================
  { name: 'int == is true only for the equal value', expr: 'tcp.dstport == 80',
    runs: [{ packet: port(79), expect: false }, { packet: port(80), expect: true }, { packet: port(81), expect: false }] },
  { name: 'int eq is the English spelling of ==', expr: 'tcp.dstport eq 80',
    runs: [{ packet: port(79), expect: false }, { packet: port(80), expect: true }, { packet: port(81), expect: false }] },
  { name: 'int != is true for every other value', expr: 'tcp.dstport != 80',
    runs: [{ packet: port(79), expect: true }, { packet: port(80), expect: false }, { packet: port(81), expect: true }] },
  { name: 'int ne is the English spelling of !=', expr: 'tcp.dstport ne 80',
    runs: [{ packet: port(79), expect: true }, { packet: port(80), expect: false }, { packet: port(81), expect: true }] },
  { name: 'int < is strict', expr: 'tcp.dstport < 80',
    runs: [{ packet: port(79), expect: true }, { packet: port(80), expect: false }, { packet: port(81), expect: false }] },
  { name: 'int lt is the English spelling of <', expr: 'tcp.dstport lt 80',
    runs: [{ packet: port(79), expect: true }, { packet: port(80), expect: false }, { packet: port(81), expect: false }] },
  { name: 'int <= includes the bound', expr: 'tcp.dstport <= 80',
    runs: [{ packet: port(79), expect: true }, { packet: port(80), expect: true }, { packet: port(81), expect: false }] },
  { name: 'int le is the English spelling of <=', expr: 'tcp.dstport le 80',
    runs: [{ packet: port(79), expect: true }, { packet: port(80), expect: true }, { packet: port(81), expect: false }] },
  { name: 'int > is strict', expr: 'tcp.dstport > 80',
    runs: [{ packet: port(79), expect: false }, { packet: port(80), expect: false }, { packet: port(81), expect: true }] },
  { name: 'int gt is the English spelling of >', expr: 'tcp.dstport gt 80',
    runs: [{ packet: port(79), expect: false }, { packet: port(80), expect: false }, { packet: port(81), expect: true }] },
  { name: 'int >= includes the bound', expr: 'tcp.dstport >= 80',
    runs: [{ packet: port(79), expect: false }, { packet: port(80), expect: true }, { packet: port(81), expect: true }] },
  { name: 'int ge is the English spelling of >=', expr: 'tcp.dstport ge 80',
    runs: [{ packet: port(79), expect: false }, { packet: port(80), expect: true }, { packet: port(81), expect: true }] },
  { name: 'int in a set of values and ranges matches members and range bounds (wirefilter port test)',
    expr: 'tcp.dstport in { 80 443 2082..2083 }',
    runs: [
      { packet: port(80), expect: true }, { packet: port(443), expect: true },
      { packet: port(2082), expect: true }, { packet: port(2083), expect: true },
      { packet: port(8080), expect: false }, { packet: port(2081), expect: false }, { packet: port(2084), expect: false },
    ] },
  { name: 'int in a set with a wide range matches inside it', expr: 'tcp.dstport in {80 443 8000..8080}',
    runs: [{ packet: port(8000), expect: true }, { packet: port(8042), expect: true }, { packet: port(8081), expect: false }] },
  { name: 'int in a single-value range {80..80} matches only that value', expr: 'tcp.dstport in {80..80}',
    runs: [{ packet: port(80), expect: true }, { packet: port(81), expect: false }] },
  { name: 'int in a set with negative bounds works on i64 values', expr: 'tcp.dstport in {-10..-1 0}',
    runs: [{ packet: port(0), expect: true }, { packet: port(1), expect: false }] },
  { name: '& is true when the field and the mask share a bit (wirefilter port & 1)', expr: 'tcp.dstport & 1',
    runs: [{ packet: port(80), expect: false }, { packet: port(443), expect: true }] },
  { name: '& on tcp.flags tests any of the masked bits', expr: 'tcp.flags & 0x12',
    runs: [
      { packet: { 'tcp.flags': 0x02 }, expect: true }, { packet: { 'tcp.flags': 0x10 }, expect: true },
      { packet: { 'tcp.flags': 0x12 }, expect: true }, { packet: { 'tcp.flags': 0x01 }, expect: false },
      { packet: { 'tcp.flags': 0x00 }, expect: false },
    ] },
  { name: 'bitwise_and is the English spelling of &', expr: 'tcp.flags bitwise_and 2',
    runs: [{ packet: { 'tcp.flags': 0x12 }, expect: true }, { packet: { 'tcp.flags': 0x11 }, expect: false }] },
  { name: '& with a zero mask is never true', expr: 'tcp.flags & 0', packet: { 'tcp.flags': 0xff }, expect: false },
  { name: '& sees the top bit of the flags byte (CWR, 0x80)', expr: 'tcp.flags & 0x80',
    runs: [{ packet: { 'tcp.flags': 0x80 }, expect: true }, { packet: { 'tcp.flags': 0x7f }, expect: false }] },
  { name: 'int values above 2^31 compare exactly (32-bit AS numbers)', expr: 'ip.src.asnum == 4294967295',
    runs: [{ packet: { 'ip.src.asnum': 4294967295 }, expect: true }, { packet: { 'ip.src.asnum': 4294967294 }, expect: false }] },
  { name: 'int ordering above 2^31 is unsigned-safe', expr: 'ip.dst.asnum > 2147483647',
    runs: [{ packet: { 'ip.dst.asnum': 4200000000 }, expect: true }, { packet: { 'ip.dst.asnum': 13335 }, expect: false }] },
  { name: 'a negative literal compares as a signed integer', expr: 'tcp.dstport > -1', packet: port(0), expect: true },
  { name: 'a negative literal never equals a port', expr: 'tcp.dstport == -80', packet: port(80), expect: false },
  { name: 'tcp.flags & 0x12 == 0x12 is an error: & admits no further comparison (wirefilter)',
    // After `tcp.flags & 0x12` the comparison is complete; `== 0x12` is left over.
    expr: 'tcp.flags & 0x12 == 0x12', expect: { error: [1012, 1021] } },

  // ===== IP fields: every operator =========================================================
  { name: 'ip == matches the same IPv4 address only', expr: 'ip.src == 192.0.2.1',
    runs: [
      { packet: src('192.0.2.1'), expect: true }, { packet: src('192.0.2.2'), expect: false },
      { packet: src('::ffff:192.0.2.1'), expect: false }, { packet: src('2001:db8::1'), expect: false },
    ] },
  { name: 'ip eq is the English spelling of ==', expr: 'ip.dst eq 192.0.2.1', packet: { 'ip.dst': '192.0.2.1' }, expect: true },
  { name: 'ip != is true across families (IPv4 and IPv6 are incomparable)', expr: 'ip.src != 192.0.2.1',
    runs: [
      { packet: src('192.0.2.1'), expect: false }, { packet: src('192.0.2.2'), expect: true },
      { packet: src('2001:db8::1'), expect: true }, { packet: src('::ffff:192.0.2.1'), expect: true },
    ] },
  { name: 'ip ne is the English spelling of !=', expr: 'ip.src ne 192.0.2.1',
    runs: [{ packet: src('192.0.2.2'), expect: true }, { packet: src('192.0.2.1'), expect: false }] },
  { name: 'ip < orders IPv4 addresses and is false across families', expr: 'ip.src < 10.0.0.0',
    runs: [
      { packet: src('9.255.255.255'), expect: true }, { packet: src('10.0.0.0'), expect: false },
      { packet: src('10.0.0.1'), expect: false }, { packet: src('::1'), expect: false },
    ] },
  { name: 'ip lt is the English spelling of <', expr: 'ip.src lt 10.0.0.0', packet: src('9.0.0.1'), expect: true },
  { name: 'ip <= on IPv6 includes the bound and is false for IPv4 (wirefilter ip test)',
    expr: 'ip.src <= 10:20:30:40:50:60:70:80',
    runs: [
      { packet: src('::1'), expect: true }, { packet: src('10:20:30:40:50:60:70:80'), expect: true },
      { packet: src('10:20:30:40:50:60:70:81'), expect: false }, { packet: src('127.0.0.1'), expect: false },
    ] },
  { name: 'ip le is the English spelling of <=', expr: 'ip.src le 10.0.0.0',
    runs: [{ packet: src('10.0.0.0'), expect: true }, { packet: src('10.0.0.1'), expect: false }] },
  { name: 'ip > orders IPv4 addresses and is false across families', expr: 'ip.src > 10.0.0.0',
    runs: [
      { packet: src('10.0.0.1'), expect: true }, { packet: src('10.0.0.0'), expect: false },
      { packet: src('9.255.255.255'), expect: false }, { packet: src('2001:db8::1'), expect: false },
    ] },
  { name: 'ip gt is the English spelling of >', expr: 'ip.src gt 10.0.0.0', packet: src('200.0.0.1'), expect: true },
  { name: 'ip >= includes the bound', expr: 'ip.src >= 10.0.0.0',
    runs: [{ packet: src('10.0.0.0'), expect: true }, { packet: src('9.255.255.255'), expect: false }] },
  { name: 'ip ge compares IPv6 as 128-bit numbers', expr: 'ip.dst ge 2001:db8::1',
    runs: [
      { packet: { 'ip.dst': '2001:db8::1' }, expect: true }, { packet: { 'ip.dst': '2001:db8:0:1::' }, expect: true },
      { packet: { 'ip.dst': '2001:db7:ffff::' }, expect: false }, { packet: { 'ip.dst': '255.255.255.255' }, expect: false },
    ] },
  { name: 'ip > :: is true for IPv6 above zero and false for IPv4', expr: 'ip.src > ::',
    runs: [{ packet: src('::1'), expect: true }, { packet: src('0.0.0.1'), expect: false }] },
  { name: 'ip in a set with CIDR, single address and range (wirefilter ip set test)',
    expr: 'ip.src in { 127.0.0.0/8 ::1 10.0.0.0..10.0.255.255 }',
    runs: [
      { packet: src('127.0.0.1'), expect: true }, { packet: src('127.0.0.3'), expect: true },
      { packet: src('::1'), expect: true }, { packet: src('255.255.255.255'), expect: false },
      { packet: src('::2'), expect: false }, { packet: src('10.0.0.0'), expect: true },
      { packet: src('10.0.255.255'), expect: true }, { packet: src('10.1.0.0'), expect: false },
    ] },
  { name: 'ip in a set mixing IPv4 and IPv6 CIDRs picks the family of the value', expr: 'ip.src in {10.0.0.0/8 2001:db8::/32}',
    runs: [
      { packet: src('10.255.255.255'), expect: true }, { packet: src('11.0.0.0'), expect: false },
      { packet: src('2001:db8:ffff::1'), expect: true }, { packet: src('2001:db9::'), expect: false },
    ] },
  { name: 'ip in an IPv6 range', expr: 'ip.src in {2001:db8::1..2001:db8::ff}',
    runs: [{ packet: src('2001:db8::80'), expect: true }, { packet: src('2001:db8::100'), expect: false }, { packet: src('2001:db8::'), expect: false }] },
  { name: 'ip in {0.0.0.0/0} matches every IPv4 address and no IPv6 address', expr: 'ip.src in {0.0.0.0/0}',
    runs: [{ packet: src('1.2.3.4'), expect: true }, { packet: src('::1'), expect: false }] },
  { name: 'ip in {::/0} matches every IPv6 address and no IPv4 address', expr: 'ip.src in {::/0}',
    runs: [{ packet: src('::ffff:1.2.3.4'), expect: true }, { packet: src('1.2.3.4'), expect: false }] },
  { name: 'ip in a /32 and a /128 match exactly one address', expr: 'ip.dst in {192.0.2.1/32 2001:db8::1/128}',
    runs: [
      { packet: { 'ip.dst': '192.0.2.1' }, expect: true }, { packet: { 'ip.dst': '192.0.2.0' }, expect: false },
      { packet: { 'ip.dst': '2001:db8::1' }, expect: true }, { packet: { 'ip.dst': '2001:db8::2' }, expect: false },
    ] },
  { name: 'not ip in a set inverts the membership', expr: 'not ip.src in {10.0.0.0/8}',
    runs: [{ packet: src('192.0.2.1'), expect: true }, { packet: src('10.1.1.1'), expect: false }] },
  { name: '::ffff:1.2.3.4 equals itself as an IPv6 address', expr: 'ip.src == ::ffff:1.2.3.4',
    runs: [{ packet: src('::ffff:1.2.3.4'), expect: true }, { packet: src('1.2.3.4'), expect: false }] },
  { name: 'an IPv4 literal does not match the IPv4-mapped IPv6 address', expr: 'ip.src == 10.1.2.3',
    packet: src('::ffff:10.1.2.3'), expect: false },
  { name: 'a set holding ::ffff:10.1.2.3 does not match 10.1.2.3 (wirefilter, checked with ffi)',
    expr: 'ip.src in {::ffff:10.1.2.3}', runs: [{ packet: src('10.1.2.3'), expect: false }, { packet: src('::ffff:10.1.2.3'), expect: true }] },
  { name: 'an IPv4-mapped /127 with zero host bits is a valid set item (wirefilter lexer test)',
    expr: 'ip.src in {::ffff:12.34.56.78/127}',
    runs: [{ packet: src('::ffff:12.34.56.79'), expect: true }, { packet: src('12.34.56.78'), expect: false }] },

  // ===== Bytes (string) fields: every operator ===============================================
  { name: 'string == is an exact byte comparison', expr: 'ip.proto == "tcp"',
    runs: [{ packet: proto('tcp'), expect: true }, { packet: proto('udp'), expect: false }, { packet: proto('tcpx'), expect: false }] },
  { name: 'string eq is the English spelling of ==', expr: 'ip.proto eq "udp"', packet: proto('udp'), expect: true },
  { name: 'string == is case-sensitive: "TCP" does not match tcp', expr: 'ip.proto == "TCP"', packet: proto('tcp'), expect: false },
  { name: 'a string prefix is not equal', expr: 'ip.proto == "tc"', packet: proto('tcp'), expect: false },
  { name: 'string != is true for a different value', expr: 'ip.proto != "udp"',
    runs: [{ packet: proto('tcp'), expect: true }, { packet: proto('udp'), expect: false }] },
  { name: 'string ne is the English spelling of !=', expr: 'ip.proto ne "tcp"', packet: proto('tcp'), expect: false },
  { name: 'string < orders bytes lexicographically', expr: 'ip.proto < "udp"',
    runs: [{ packet: proto('tcp'), expect: true }, { packet: proto('udp'), expect: false }, { packet: proto('xyz'), expect: false }] },
  { name: 'string lt puts a proper prefix first', expr: 'ip.proto lt "tcpx"', packet: proto('tcp'), expect: true },
  { name: 'string <= includes equality', expr: 'ip.proto <= "tcp"',
    runs: [{ packet: proto('tcp'), expect: true }, { packet: proto('udp'), expect: false }] },
  { name: 'string le is the English spelling of <=', expr: 'ip.proto le "tc"', packet: proto('tcp'), expect: false },
  { name: 'string > sorts a longer string after its prefix', expr: 'ip.proto > "tc"', packet: proto('tcp'), expect: true },
  { name: 'string gt is the English spelling of >', expr: 'ip.proto gt "tcp"', packet: proto('tcp'), expect: false },
  { name: 'string >= includes equality', expr: 'ip.proto >= "tcp"',
    runs: [{ packet: proto('tcp'), expect: true }, { packet: proto('icmp'), expect: false }] },
  { name: 'string ge is the English spelling of >=', expr: 'ip.proto ge "udp"', packet: proto('tcp'), expect: false },
  { name: 'string ordering compares bytes, so uppercase sorts before lowercase', expr: 'cf.colo.region < "wnam"',
    packet: { 'cf.colo.region': 'WNAM' }, expect: true },
  { name: 'string in a set of strings', expr: 'ip.proto in {"tcp" "udp"}',
    runs: [{ packet: proto('tcp'), expect: true }, { packet: proto('udp'), expect: true }, { packet: proto('icmp'), expect: false }] },
  { name: 'string contains finds a substring', expr: 'ip.proto contains "cp"',
    runs: [{ packet: proto('tcp'), expect: true }, { packet: proto('udp'), expect: false }] },
  { name: 'string contains is case-sensitive', expr: 'cf.colo.name contains "SFO"', packet: colo('sfo06'), expect: false },
  { name: 'string contains "" is true for any present value', expr: 'ip.proto contains ""', packet: proto('tcp'), expect: true },
  { name: 'matches tests a regular expression', expr: 'ip.proto matches "^t.p$"',
    runs: [{ packet: proto('tcp'), expect: true }, { packet: proto('udp'), expect: false }] },
  { name: '~ is the symbol spelling of matches', expr: 'ip.proto ~ "^u"',
    runs: [{ packet: proto('udp'), expect: true }, { packet: proto('tcp'), expect: false }] },
  // Rust's Regex::is_match (wirefilter) searches anywhere in the value: the pattern is not anchored.
  { name: 'matches is unanchored: the pattern may match anywhere', expr: 'cf.colo.name matches "fo0"', packet: colo('sfo06'), expect: true },
  { name: 'matches is case-sensitive', expr: 'ip.proto matches "^TCP$"', packet: proto('tcp'), expect: false },
  { name: 'matches accepts a raw string pattern', expr: String.raw`cf.colo.name matches r"^[a-z]{3}\d\d$"`,
    runs: [{ packet: colo('sfo06'), expect: true }, { packet: colo('sfo6'), expect: false }] },
  { name: 'an invalid regular expression is error 1023', expr: 'ip.proto matches "("', expect: { error: 1023 } },
  { name: 'an unclosed character class is error 1023', expr: 'ip.proto ~ "[a-"', expect: { error: 1023 } },

  // ===== Boolean fields ====================================================================
  { name: 'a bare bool field is true when the flag is set', expr: 'tcp.flags.syn',
    runs: [{ packet: flags('syn'), expect: true }, { packet: flags('ack'), expect: false }, { packet: NO_PACKET, expect: false }] },
  { name: 'tcp.flags.syn == 1 is an error: booleans are used bare', expr: 'tcp.flags.syn == 1', expect: { error: 2005 } },
  { name: 'tcp.flags.syn == true is an error (there are no bool literals)', expr: 'tcp.flags.syn == true', expect: { error: 2005 } },
  { name: 'tcp.flags.ack != 0 is an error', expr: 'tcp.flags.ack != 0', expect: { error: 2005 } },
  { name: 'tcp.flags.fin eq 1 is an error', expr: 'tcp.flags.fin eq 1', expect: { error: 2005 } },
  { name: 'a bool field with in is an error', expr: 'tcp.flags.syn in {1}', expect: { error: 2005 } },
  { name: 'sip contains ... is an error', expr: 'sip contains "INVITE"', expect: { error: 2005 } },
  { name: 'a bool field with a comparison operator inside a larger expression is an error',
    expr: 'tcp.dstport == 80 and tcp.flags.syn == 1', expect: { error: 2005 } },
  { name: 'True is not the constant: names are case-sensitive, so it is an unknown field', expr: 'True', expect: { error: 2001 } },

  // ===== Operators not supported by a type ===================================================
  { name: 'contains on an int field is error 2002', expr: 'tcp.dstport contains 80', expect: { error: 2002 } },
  { name: 'matches on an int field is error 2002', expr: 'tcp.dstport matches "80"', expect: { error: 2002 } },
  { name: '~ on an int field is error 2002', expr: 'tcp.dstport ~ "80"', expect: { error: 2002 } },
  { name: 'contains on an IP field is error 2002', expr: 'ip.src contains "10"', expect: { error: 2002 } },
  { name: 'matches on an IP field is error 2002', expr: 'ip.src matches "^10"', expect: { error: 2002 } },
  { name: '~ on an IP field is error 2002', expr: 'ip.dst ~ "^10"', expect: { error: 2002 } },
  { name: '& on an IP field is error 2002', expr: 'ip.src & 1', expect: { error: 2002 } },
  { name: 'bitwise_and on an IP field is error 2002', expr: 'ip.dst bitwise_and 1', expect: { error: 2002 } },
  { name: '& on a string field is error 2002', expr: 'ip.proto & 1', expect: { error: 2002 } },
  { name: 'bitwise_and on a string field is error 2002', expr: 'cf.colo.name bitwise_and 1', expect: { error: 2002 } },
  { name: 'contains on the int result of bit_slice is error 2002', expr: 'bit_slice(udp, 0, 16) contains "a"', expect: { error: 2002 } },

  // ===== Logical operators and spellings =====================================================
  { name: 'and is true only when both sides are', expr: 'tcp.flags.syn and tcp.flags.ack',
    runs: [
      { packet: flags('syn ack'), expect: true }, { packet: flags('syn'), expect: false },
      { packet: flags('ack'), expect: false }, { packet: flags(''), expect: false },
    ] },
  { name: '&& is the symbol spelling of and', expr: 'tcp.flags.syn && tcp.flags.ack',
    runs: [{ packet: flags('syn ack'), expect: true }, { packet: flags('syn'), expect: false }] },
  { name: 'or is true when either side is', expr: 'tcp.flags.syn or tcp.flags.ack',
    runs: [
      { packet: flags('syn ack'), expect: true }, { packet: flags('syn'), expect: true },
      { packet: flags('ack'), expect: true }, { packet: flags(''), expect: false },
    ] },
  { name: '|| is the symbol spelling of or', expr: 'tcp.flags.syn || tcp.flags.ack',
    runs: [{ packet: flags('ack'), expect: true }, { packet: flags(''), expect: false }] },
  { name: 'xor is true when exactly one side is', expr: 'tcp.flags.syn xor tcp.flags.ack',
    runs: [
      { packet: flags('syn ack'), expect: false }, { packet: flags('syn'), expect: true },
      { packet: flags('ack'), expect: true }, { packet: flags(''), expect: false },
    ] },
  { name: '^^ is the symbol spelling of xor', expr: 'tcp.flags.syn ^^ tcp.flags.ack',
    runs: [{ packet: flags('syn ack'), expect: false }, { packet: flags('ack'), expect: true }] },
  { name: 'a chain of three xor is true for an odd number of true operands', expr: 'tcp.flags.syn xor tcp.flags.ack xor tcp.flags.fin',
    runs: [
      { packet: flags('syn ack fin'), expect: true }, { packet: flags('syn ack'), expect: false },
      { packet: flags('fin'), expect: true }, { packet: flags(''), expect: false },
    ] },
  { name: 'not inverts a bool field', expr: 'not tcp.flags.syn',
    runs: [{ packet: flags('syn'), expect: false }, { packet: flags(''), expect: true }] },
  { name: '! is the symbol spelling of not', expr: '!tcp.flags.syn',
    runs: [{ packet: flags('syn'), expect: false }, { packet: flags(''), expect: true }] },
  { name: '!! is a double negation', expr: '!!tcp.flags.syn',
    runs: [{ packet: flags('syn'), expect: true }, { packet: flags(''), expect: false }] },
  { name: 'not not is a double negation', expr: 'not not tcp.flags.syn',
    runs: [{ packet: flags('syn'), expect: true }, { packet: flags(''), expect: false }] },
  { name: '! (not !x) is not x (wirefilter logical test)', expr: '! (not !tcp.flags.syn)',
    runs: [{ packet: flags('syn'), expect: false }, { packet: flags(''), expect: true }] },
  { name: 'not applies to a whole comparison', expr: 'not tcp.dstport == 80',
    runs: [{ packet: port(80), expect: false }, { packet: port(443), expect: true }] },
  { name: '! applies to a whole comparison', expr: '!tcp.dstport == 80',
    runs: [{ packet: port(80), expect: false }, { packet: port(443), expect: true }] },
  { name: 'not in a set inverts membership', expr: 'not tcp.dstport in {80 443}',
    runs: [{ packet: port(22), expect: true }, { packet: port(443), expect: false }] },
  { name: 'symbol and English spellings mix in one chain', expr: 'tcp.flags.syn && tcp.flags.ack and tcp.flags.fin',
    runs: [{ packet: flags('syn ack fin'), expect: true }, { packet: flags('syn ack'), expect: false }] },
  { name: 'a flat chain of or mixes spellings', expr: 'tcp.flags.fin or tcp.flags.syn || tcp.flags.reset or tcp.flags.push',
    runs: [{ packet: flags('push'), expect: true }, { packet: flags('ack'), expect: false }] },
  { name: 'comparisons combine with logical operators', expr: 'tcp.dstport == 80 and ip.proto == "tcp"',
    runs: [
      { packet: { 'tcp.dstport': 80, 'ip.proto': 'tcp' }, expect: true },
      { packet: { 'tcp.dstport': 80, 'ip.proto': 'udp' }, expect: false },
    ] },

  // ===== Precedence: not > and > xor > or ====================================================
  { name: 'precedence shape of wirefilter: t or t && t and t or t ^^ t and t || t is OR[a, AND[b,c,d], XOR[e, AND[f,g]], h]',
    // a..h = fin syn reset push ack urg ecn cwr.
    expr: 'tcp.flags.fin or tcp.flags.syn && tcp.flags.reset and tcp.flags.push or tcp.flags.ack ^^ tcp.flags.urg and tcp.flags.ecn || tcp.flags.cwr',
    runs: [
      { packet: flags(''), expect: false },
      { packet: flags('fin'), expect: true },
      { packet: flags('syn reset push'), expect: true },
      { packet: flags('syn reset'), expect: false },
      { packet: flags('ack'), expect: true },
      { packet: flags('ack urg ecn'), expect: false }, // XOR[t, AND[t,t]] = false
      { packet: flags('urg ecn'), expect: true }, // XOR[f, t] = true
      { packet: flags('fin ack urg ecn'), expect: true }, // left-to-right parsing would give false
      { packet: flags('fin urg ecn'), expect: true }, // xor below or would give false
      { packet: flags('cwr'), expect: true },
    ] },
  { name: 'not a and b is (not a) and b', expr: 'not tcp.flags.syn and tcp.flags.ack',
    runs: [
      { packet: flags(''), expect: false }, // not (a and b) would be true
      { packet: flags('ack'), expect: true }, { packet: flags('syn ack'), expect: false }, { packet: flags('syn'), expect: false },
    ] },
  { name: 'not a or b is (not a) or b', expr: 'not tcp.flags.syn or tcp.flags.ack',
    runs: [{ packet: flags('syn ack'), expect: true }, { packet: flags('syn'), expect: false }, { packet: flags(''), expect: true }] },
  { name: 'a or b and c is a or (b and c)', expr: 'tcp.flags.syn or tcp.flags.ack and tcp.flags.fin',
    runs: [{ packet: flags('syn'), expect: true }, { packet: flags('ack'), expect: false }, { packet: flags('ack fin'), expect: true }] },
  { name: 'a and b or c is (a and b) or c', expr: 'tcp.flags.syn and tcp.flags.ack or tcp.flags.fin',
    runs: [{ packet: flags('fin'), expect: true }, { packet: flags('syn'), expect: false }, { packet: flags('syn ack'), expect: true }] },
  { name: 'a xor b and c is a xor (b and c)', expr: 'tcp.flags.syn xor tcp.flags.ack and tcp.flags.fin',
    runs: [{ packet: flags('syn ack'), expect: true }, { packet: flags('syn ack fin'), expect: false }, { packet: flags('ack fin'), expect: true }] },
  { name: 'a or b xor c is a or (b xor c)', expr: 'tcp.flags.syn or tcp.flags.ack xor tcp.flags.fin',
    runs: [{ packet: flags('syn ack fin'), expect: true }, { packet: flags('ack fin'), expect: false }, { packet: flags('fin'), expect: true }] },
  { name: 'a xor b or c is (a xor b) or c', expr: 'tcp.flags.syn ^^ tcp.flags.ack || tcp.flags.fin',
    runs: [{ packet: flags('syn fin'), expect: true }, { packet: flags('syn ack'), expect: false }, { packet: flags('syn'), expect: true }] },
  { name: 'a and not b', expr: 'tcp.flags.syn and not tcp.flags.ack',
    runs: [{ packet: flags('syn'), expect: true }, { packet: flags('syn ack'), expect: false }] },
  { name: 'not binds tighter than xor', expr: 'not tcp.flags.syn xor tcp.flags.ack',
    runs: [{ packet: flags(''), expect: true }, { packet: flags('syn ack'), expect: true }, { packet: flags('ack'), expect: false }] },

  // ===== Parentheses and nesting ===========================================================
  { name: '(a or b) and c groups the or', expr: '(tcp.flags.syn or tcp.flags.ack) and tcp.flags.fin',
    runs: [{ packet: flags('syn'), expect: false }, { packet: flags('ack fin'), expect: true }] },
  { name: 'a or (b and c) is the default grouping made explicit', expr: 'tcp.flags.syn or (tcp.flags.ack and tcp.flags.fin)',
    runs: [{ packet: flags('syn'), expect: true }, { packet: flags('ack'), expect: false }] },
  { name: 'not (a and b) negates the group', expr: 'not (tcp.flags.syn and tcp.flags.ack)',
    runs: [{ packet: flags(''), expect: true }, { packet: flags('syn ack'), expect: false }] },
  { name: '(a xor b) xor (c xor d)', expr: '(tcp.flags.syn xor tcp.flags.ack) xor (tcp.flags.fin xor tcp.flags.reset)',
    runs: [{ packet: flags('syn ack fin'), expect: true }, { packet: flags('syn ack fin reset'), expect: false }] },
  { name: 'redundant nested parentheses', expr: '((((tcp.dstport == 80))))', packet: port(80), expect: true },
  { name: 'spaces and newlines inside parentheses', expr: '( \n tcp.flags.syn \n )', packet: flags('syn'), expect: true },
  { name: 'nested groups in a realistic rule', expr: '(tcp.dstport == 80 or tcp.dstport == 443) and (tcp.flags.syn and not tcp.flags.ack)',
    runs: [
      { packet: { ...port(443), ...flags('syn') }, expect: true },
      { packet: { ...port(443), ...flags('syn ack') }, expect: false },
      { packet: { ...port(22), ...flags('syn') }, expect: false },
    ] },
  { name: 'deep mixture of groups', expr: '((tcp.flags.syn or (tcp.flags.ack and (tcp.flags.fin or tcp.flags.reset))) and not (tcp.flags.urg))',
    runs: [
      { packet: flags('ack reset'), expect: true }, { packet: flags('ack'), expect: false },
      { packet: flags('syn urg'), expect: false }, { packet: flags('syn'), expect: true },
    ] },

  // ===== Integer literals ==================================================================
  { name: 'hex literal 0x50 is 80', expr: 'tcp.dstport == 0x50', packet: port(80), expect: true },
  { name: 'hex literal with leading zeros 0x0050 is 80', expr: 'tcp.dstport == 0x0050', packet: port(80), expect: true },
  { name: 'hex literal digits may be uppercase: 0xFF is 255', expr: 'ip.ttl == 0xFF', packet: { 'ip.ttl': 255 }, expect: true },
  { name: 'hex literal 0x1f5 is 501 (wirefilter lexer test)', expr: 'tcp.dstport == 0x1f5', packet: port(501), expect: true },
  { name: 'a leading zero makes octal: 0120 is 80', expr: 'tcp.dstport == 0120', packet: port(80), expect: true },
  { name: 'octal 0123 is 83 (wirefilter lexer test)', expr: 'tcp.dstport == 0123', packet: port(83), expect: true },
  { name: 'octal 0100 is 64, not 100', expr: 'ip.ttl == 0100', runs: [{ packet: { 'ip.ttl': 64 }, expect: true }, { packet: { 'ip.ttl': 100 }, expect: false }] },
  { name: '0 is zero', expr: 'icmp.code == 0', packet: { 'icmp.code': 0 }, expect: true },
  { name: '00 is zero in octal', expr: 'icmp.code == 00', packet: { 'icmp.code': 0 }, expect: true },
  { name: '080 is an error: 8 is not an octal digit', expr: 'tcp.dstport == 080', expect: { error: 1004 }, at: 16 },
  { name: '09 is an error: 9 is not an octal digit', expr: 'tcp.dstport == 09', expect: { error: 1004 } },
  { name: 'hex, octal and decimal mix in one set', expr: 'tcp.dstport in {0x50 0120 443}',
    runs: [{ packet: port(80), expect: true }, { packet: port(443), expect: true }, { packet: port(120), expect: false }] },
  { name: 'hex range bounds in a set', expr: 'tcp.dstport in {0x1f0..0x1ff}',
    runs: [{ packet: port(501), expect: true }, { packet: port(512), expect: false }] },
  { name: 'the i64 maximum is a valid literal', expr: 'tcp.dstport < 9223372036854775807', packet: port(65535), expect: true },
  { name: 'the i64 minimum is a valid literal', expr: 'tcp.dstport > -9223372036854775808', packet: port(0), expect: true },
  { name: '2^63 is out of i64 range', expr: 'tcp.dstport == 9223372036854775808', expect: { error: 1005 } },
  { name: '-2^63-1 is out of i64 range', expr: 'tcp.dstport == -9223372036854775809', expect: { error: 1005 } },
  { name: 'a 20-digit decimal is out of i64 range', expr: 'tcp.dstport == 99999999999999999999', expect: { error: 1005 } },
  { name: '0x7fffffffffffffff is the largest hex literal', expr: 'tcp.dstport < 0x7fffffffffffffff', packet: port(80), expect: true },
  { name: '0x8000000000000000 is out of i64 range', expr: 'tcp.dstport == 0x8000000000000000', expect: { error: 1005 } },
  { name: 'a large int literal that fits i64 compiles (tcp.dstport == 99999999999 is false, not an error)',
    expr: 'tcp.dstport == 99999999999', packet: port(80), expect: false },
  // wirefilter reads hex digits greedily (`10fe`) and fails to parse them as decimal; an engine that
  // stops at the first non-digit would call `fe` trailing input instead. Both are errors.
  { name: '10fe is not an integer literal', expr: 'tcp.dstport == 10fe', expect: { error: [1004, 1021] } },
  { name: '0x without digits is not an integer literal', expr: 'tcp.dstport == 0x', expect: { error: [1004, 1021] } },
  // Only decimal takes a sign (contract: "decimal (optionally negative), 0x hex").
  { name: 'a negative hex literal is an error', expr: 'tcp.dstport == -0x50', expect: { error: [1004, 1012, 1021] } },
  { name: 'a decimal fraction is not an integer literal', expr: 'tcp.dstport == 8.0', expect: { error: [1004, 1021] } },

  // ===== String literals and escapes =======================================================
  { name: 'a plain quoted string', expr: 'cf.colo.name == "sfo06"', packet: colo('sfo06'), expect: true },
  { name: 'escape \\" is a double quote', expr: String.raw`cf.colo.name == "a\"b"`, packet: colo('a"b'), expect: true },
  { name: 'escape \\\\ is a backslash', expr: String.raw`cf.colo.name == "a\\b"`, packet: colo('a\\b'), expect: true },
  { name: 'escape \\xHH is a byte in hex', expr: String.raw`cf.colo.name == "\x73fo06"`, packet: colo('sfo06'), expect: true },
  { name: 'escape \\xHH accepts uppercase and lowercase hex digits', expr: String.raw`cf.colo.name == "\x6Fsl\x6f1"`, packet: colo('oslo1'), expect: true },
  { name: 'escape \\OOO is a byte in octal', expr: String.raw`cf.colo.name == "\163fo06"`, packet: colo('sfo06'), expect: true },
  { name: 'escape \\377 is the byte 0xff', expr: String.raw`udp == "\377"`, packet: { udp: 'ff' }, expect: true },
  { name: 'escapes build UTF-8 bytes: "z\\xc3\\xbcrich" equals zürich', expr: String.raw`cf.colo.name == "z\xc3\xbcrich"`, packet: colo('zürich'), expect: true },
  { name: 'non-ASCII text inside a string compares as UTF-8', expr: 'cf.colo.name == "zürich"', packet: colo('zürich'), expect: true },
  { name: 'the empty string equals an empty present value', expr: 'cf.colo.name == ""',
    runs: [{ packet: colo(''), expect: true }, { packet: colo('sfo06'), expect: false }] },
  { name: 'escapes work in sets and contains', expr: String.raw`cf.colo.name contains "\x2d" and ip.proto in {"\x74cp" "udp"}`,
    packet: { 'cf.colo.name': 'sfo-06', 'ip.proto': 'tcp' }, expect: true },
  { name: '\\n is not a valid escape', expr: String.raw`cf.colo.name == "a\nb"`, expect: { error: 1003 }, at: 18 },
  { name: '\\t is not a valid escape', expr: String.raw`cf.colo.name == "a\tb"`, expect: { error: 1003 } },
  { name: '\\\' is not a valid escape', expr: String.raw`cf.colo.name == "a\'b"`, expect: { error: 1003 } },
  { name: '\\u is not a valid escape', expr: String.raw`cf.colo.name == "\u0073"`, expect: { error: 1003 } },
  { name: '\\X (uppercase) is not a valid escape', expr: String.raw`cf.colo.name == "\X73"`, expect: { error: 1003 } },
  { name: '\\x needs two hex digits', expr: String.raw`cf.colo.name == "\x7"`, expect: { error: 1003 } },
  { name: '\\x needs hex digits', expr: String.raw`cf.colo.name == "\xzz"`, expect: { error: 1003 } },
  { name: 'an octal escape needs three octal digits', expr: String.raw`cf.colo.name == "\18a"`, expect: { error: 1003 } },
  { name: 'an octal escape above \\377 is not a byte', expr: String.raw`cf.colo.name == "\400"`, expect: { error: 1003 } },
  { name: 'an unterminated string is error 1002', expr: 'cf.colo.name == "sfo06', expect: { error: 1002 } },
  { name: 'a string whose last quote is escaped is unterminated', expr: String.raw`cf.colo.name == "sfo06\"`, expect: { error: 1002 } },
  { name: 'single quotes are not string delimiters', expr: "cf.colo.name == 'sfo06'", expect: { error: 1001 }, at: 16 },

  // ===== Raw strings =======================================================================
  { name: 'r"..." is a raw string', expr: 'cf.colo.name == r"sfo06"', packet: colo('sfo06'), expect: true },
  { name: 'r#"..."# is a raw string', expr: 'cf.colo.name == r#"sfo06"#', packet: colo('sfo06'), expect: true },
  { name: 'r#"..."# may contain a double quote', expr: 'cf.colo.name == r#"a"b"#', packet: colo('a"b'), expect: true },
  { name: 'r##"..."## may contain "#', expr: 'cf.colo.name == r##"a"#b"##', packet: colo('a"#b'), expect: true },
  { name: 'a backslash in a raw string is literal', expr: String.raw`cf.colo.name == r"a\x62"`,
    runs: [{ packet: colo(String.raw`a\x62`), expect: true }, { packet: colo('ab'), expect: false }] },
  { name: 'raw strings work in sets and with contains', expr: 'ip.proto in {r"tcp" "udp"} and ip.proto contains r#"c"#', packet: proto('tcp'), expect: true },
  { name: 'a raw string may use 255 hashes', expr: `cf.colo.name == r${'#'.repeat(255)}"sfo06"${'#'.repeat(255)}`, packet: colo('sfo06'), expect: true },
  { name: 'a raw string may not use 256 hashes', expr: `cf.colo.name == r${'#'.repeat(256)}"sfo06"${'#'.repeat(256)}`, expect: { error: 1020 } },
  { name: 'a raw string needs a quote after its hashes', expr: 'cf.colo.name == r#sfo06#', expect: { error: 1020 } },
  // Unterminated raw strings: "bad raw string" and "unterminated string" both describe it.
  { name: 'a raw string with too few closing hashes is an error', expr: 'cf.colo.name == r#"sfo06"', expect: { error: [1002, 1020] } },
  { name: 'an unterminated raw string is an error', expr: 'cf.colo.name == r"sfo06', expect: { error: [1002, 1020] } },

  // ===== Hex byte strings ==================================================================
  { name: 'hex bytes 74:63:70 are "tcp"', expr: 'ip.proto == 74:63:70', packet: proto('tcp'), expect: true },
  { name: 'hex bytes may be separated by -', expr: 'ip.proto == 74-63-70', packet: proto('tcp'), expect: true },
  { name: 'hex bytes may be separated by .', expr: 'ip.proto == 74.63.70', packet: proto('tcp'), expect: true },
  // wirefilter's lexer test accepts mixed separators (01:2e:f3-77.12).
  { name: 'hex bytes may mix separators', expr: 'ip.proto == 74:63-70', packet: proto('tcp'), expect: true },
  { name: 'hex bytes compare exactly', expr: 'ip.proto == 75:64:70', packet: proto('tcp'), expect: false },
  { name: 'a shorter hex byte string is not equal', expr: 'ip.proto == 74:63', packet: proto('tcp'), expect: false },
  { name: 'hex bytes with contains', expr: 'ip.proto contains 63:70', packet: proto('tcp'), expect: true },
  { name: 'hex bytes accept uppercase digits and compare with raw bytes', expr: 'udp == DE:AD:be:ef', packet: { udp: 'deadbeef' }, expect: true },
  { name: 'hex bytes in a set', expr: 'ip.proto in {74:63:70 "udp"}', packet: proto('tcp'), expect: true },
  { name: 'a hex byte needs two digits', expr: 'ip.proto == 74:6', expect: { error: 1022 } },
  { name: 'hex bytes need hex digits', expr: 'ip.proto == 74:zz', expect: { error: 1022 } },
  { name: 'hex bytes may not end with a separator', expr: 'ip.proto == 74:63:', expect: { error: [1014, 1022] } },
  // Unquoted `tcp` is read as hex bytes for a bytes field (wirefilter): an error in any reading.
  { name: 'ip.proto == tcp (unquoted) is an error', expr: 'ip.proto == tcp', expect: { error: [1012, 1022, 2003] } },
  { name: 'ip.proto == 6 is an error: ip.proto is a string', expr: 'ip.proto == 6', expect: { error: [1022, 2003] } },

  // ===== IP literals, CIDRs, ranges, sets ==================================================
  { name: 'full-form IPv6 literal equals the compressed address', expr: 'ip.dst == 2001:0db8:0000:0000:0000:0000:0000:0001',
    packet: { 'ip.dst': '2001:db8::1' }, expect: true },
  { name: 'IPv6 literal hex digits may be uppercase', expr: 'ip.dst == 2001:DB8::1', packet: { 'ip.dst': '2001:db8::1' }, expect: true },
  { name: ':: literal is the zero IPv6 address', expr: 'ip.dst == ::', runs: [{ packet: { 'ip.dst': '::' }, expect: true }, { packet: { 'ip.dst': '0.0.0.0' }, expect: false }] },
  { name: 'an IPv4 octet above 255 is error 1006', expr: 'ip.src == 10.1.2.256', expect: { error: 1006 } },
  { name: 'a three-part IPv4 address is error 1006', expr: 'ip.src == 10.1.2', expect: { error: 1006 } },
  { name: 'a five-part IPv4 address is an error', expr: 'ip.src == 1.2.3.4.5', expect: { error: [1006, 1021] } },
  // wirefilter uses the std parser after `==`, which rejects leading zeros in an octet.
  { name: 'an IPv4 octet with a leading zero is rejected after ==', expr: 'ip.src == 1.1.1.01', expect: { error: 1006 } },
  { name: 'a triple colon is not an IPv6 address', expr: 'ip.src == 2001:db8:::1', expect: { error: 1006 } },
  { name: 'two :: in one IPv6 address is error 1006', expr: 'ip.src == 2001::db8::1', expect: { error: 1006 } },
  { name: 'an IPv6 group of five digits is error 1006', expr: 'ip.src == 2001:db8::12345', expect: { error: 1006 } },
  { name: 'a CIDR after == is an error (CIDR only inside sets)', expr: 'ip.src == 10.0.0.0/8', expect: { error: 1010 }, at: 17 },
  { name: 'an IPv6 CIDR after == is an error', expr: 'ip.dst == 2001:db8::/32', expect: { error: 1010 } },
  { name: 'a CIDR after != is an error', expr: 'ip.src != 10.0.0.0/8', expect: { error: 1010 } },
  { name: 'an IP range after == is an error (ranges only inside sets)', expr: 'ip.src == 10.0.0.1..10.0.0.9', expect: { error: 1010 } },
  { name: 'an int range after == is an error', expr: 'tcp.dstport == 80..90', expect: { error: 1010 } },
  { name: 'an int range after >= is an error', expr: 'tcp.dstport >= 80..90', expect: { error: 1010 } },
  // `in` needs a set or a list; a bare CIDR is "outside a set", an unexpected token, or (as the engine
  // reports, 2003) a value of the wrong kind for `in`. The contract does not pin one of them.
  { name: 'in with a bare CIDR instead of a set is an error', expr: 'ip.src in 10.0.0.0/8', expect: { error: [1010, 1012, 2003] } },
  { name: 'a CIDR with host bits set is error 1008', expr: 'ip.src in {10.1.2.3/24}', expect: { error: 1008 } },
  { name: 'an IPv6 CIDR with host bits set is error 1008', expr: 'ip.src in {2001:db8::1/32}', expect: { error: 1008 } },
  { name: 'a /0 CIDR with a non-zero address has host bits set', expr: 'ip.src in {10.0.0.0/0}', expect: { error: 1008 } },
  { name: 'an IPv4 prefix length above 32 is error 1007', expr: 'ip.src in {10.0.0.0/33}', expect: { error: 1007 } },
  { name: 'an IPv6 prefix length above 128 is error 1007', expr: 'ip.src in {2001:db8::/129}', expect: { error: 1007 } },
  { name: 'a reversed IPv4 range is error 1009', expr: 'ip.src in {10.0.0.9..10.0.0.1}', expect: { error: 1009 } },
  { name: 'a reversed IPv6 range is error 1009', expr: 'ip.src in {2001:db8::9..2001:db8::1}', expect: { error: 1009 } },
  { name: 'a range mixing IPv4 and IPv6 is error 1009', expr: 'ip.src in {10.0.0.1..2001:db8::1}', expect: { error: 1009 } },
  { name: 'a reversed int range is error 1009', expr: 'tcp.dstport in {8080..8000}', expect: { error: 1009 } },
  { name: 'a single-address IP range is valid', expr: 'ip.src in {10.0.0.5..10.0.0.5}',
    runs: [{ packet: src('10.0.0.5'), expect: true }, { packet: src('10.0.0.6'), expect: false }] },
  { name: 'the empty set is valid and matches nothing (int)', expr: 'tcp.dstport in {}', packet: port(80), expect: false },
  { name: 'the empty set is valid and matches nothing (ip)', expr: 'ip.src in { }', packet: src('10.0.0.1'), expect: false },
  { name: 'the empty set is valid and matches nothing (string)', expr: 'ip.proto in {}', packet: proto('tcp'), expect: false },
  { name: 'not in the empty set is true for a present field', expr: 'not tcp.dstport in {}', packet: port(80), expect: true },
  { name: 'a comma between set items is error 1011', expr: 'tcp.dstport in {80, 443}', expect: { error: 1011 }, at: 18 },
  { name: 'a comma before a set item is error 1011', expr: 'tcp.dstport in {80 ,443}', expect: { error: 1011 } },
  { name: 'a comma in an IP set is error 1011', expr: 'ip.src in {10.0.0.1, 10.0.0.2}', expect: { error: 1011 } },
  { name: 'a comma in a string set is error 1011', expr: 'ip.proto in {"tcp", "udp"}', expect: { error: 1011 } },
  { name: 'set items are separated by any whitespace, including newlines', expr: 'tcp.dstport in {\n80\r\n443\n}', packet: port(443), expect: true },
  // Either "value does not match the field type" or "set items are of different types" fits.
  { name: 'a string item in an int set is an error', expr: 'tcp.dstport in {80 "http"}', expect: { error: [2003, 2011] } },

  // ===== Every field of the Magic Firewall set =============================================
  { name: 'ip.src is an IP field', expr: 'ip.src == 203.0.113.9', packet: src('203.0.113.9'), expect: true },
  { name: 'ip.dst is an IP field', expr: 'ip.dst == 2001:db8::53', packet: { 'ip.dst': '2001:db8::53' }, expect: true },
  { name: 'ip.proto is a string field', expr: 'ip.proto == "gre"', packet: proto('gre'), expect: true },
  { name: 'ip.len is an int field', expr: 'ip.len == 60', packet: { 'ip.len': 60 }, expect: true },
  { name: 'ip.hdr_len is an int field (IHL in words)', expr: 'ip.hdr_len == 5', packet: { 'ip.hdr_len': 5 }, expect: true },
  { name: 'ip.ttl is an int field', expr: 'ip.ttl <= 1', runs: [{ packet: { 'ip.ttl': 1 }, expect: true }, { packet: { 'ip.ttl': 64 }, expect: false }] },
  { name: 'ip.opt.type is an int field', expr: 'ip.opt.type == 148', packet: { 'ip.opt.type': 148 }, expect: true },
  { name: 'ip.src.country is a string field', expr: 'ip.src.country == "GB"', packet: { 'ip.src.country': 'GB' }, expect: true },
  { name: 'ip.src.country is case-sensitive', expr: 'ip.src.country == "gb"', packet: { 'ip.src.country': 'GB' }, expect: false },
  { name: 'ip.dst.country is a string field', expr: 'ip.dst.country in {"US" "CA"}', packet: { 'ip.dst.country': 'CA' }, expect: true },
  { name: 'ip.src.asnum is an int field', expr: 'ip.src.asnum == 13335', packet: { 'ip.src.asnum': 13335 }, expect: true },
  { name: 'ip.dst.asnum is an int field', expr: 'ip.dst.asnum in {15169 13335}', packet: { 'ip.dst.asnum': 15169 }, expect: true },
  { name: 'tcp.srcport is an int field', expr: 'tcp.srcport >= 1024', packet: { 'tcp.srcport': 40000 }, expect: true },
  { name: 'tcp.dstport is an int field', expr: 'tcp.dstport == 443', packet: port(443), expect: true },
  { name: 'tcp.flags is an int field (the flags byte)', expr: 'tcp.flags == 0x12', packet: { 'tcp.flags': 0x12 }, expect: true },
  { name: 'tcp.flags.fin is a bool field', expr: 'tcp.flags.fin', runs: [{ packet: flags('fin'), expect: true }, { packet: flags('syn'), expect: false }] },
  { name: 'tcp.flags.syn is a bool field', expr: 'tcp.flags.syn', runs: [{ packet: flags('syn'), expect: true }, { packet: flags('fin'), expect: false }] },
  { name: 'tcp.flags.reset is a bool field', expr: 'tcp.flags.reset', runs: [{ packet: flags('reset'), expect: true }, { packet: flags('syn'), expect: false }] },
  { name: 'tcp.flags.push is a bool field', expr: 'tcp.flags.push', runs: [{ packet: flags('push'), expect: true }, { packet: flags('syn'), expect: false }] },
  { name: 'tcp.flags.ack is a bool field', expr: 'tcp.flags.ack', runs: [{ packet: flags('ack'), expect: true }, { packet: flags('syn'), expect: false }] },
  { name: 'tcp.flags.urg is a bool field', expr: 'tcp.flags.urg', runs: [{ packet: flags('urg'), expect: true }, { packet: flags('syn'), expect: false }] },
  { name: 'tcp.flags.ecn is a bool field', expr: 'tcp.flags.ecn', runs: [{ packet: flags('ecn'), expect: true }, { packet: flags('syn'), expect: false }] },
  { name: 'tcp.flags.cwr is a bool field', expr: 'tcp.flags.cwr', runs: [{ packet: flags('cwr'), expect: true }, { packet: flags('syn'), expect: false }] },
  { name: 'udp.srcport is an int field', expr: 'udp.srcport == 53', packet: { 'udp.srcport': 53 }, expect: true },
  { name: 'udp.dstport is an int field', expr: 'udp.dstport in {33434..33534}', packet: { 'udp.dstport': 33434 }, expect: true },
  { name: 'icmp.type is an int field', expr: 'icmp.type == 8', packet: { 'icmp.type': 8 }, expect: true },
  { name: 'icmp.code is an int field', expr: 'icmp.code == 3', packet: { 'icmp.code': 3 }, expect: true },
  { name: 'sip is a bool field', expr: 'ip.proto == "udp" and sip',
    runs: [
      { packet: { 'ip.proto': 'udp', sip: true }, expect: true }, { packet: { 'ip.proto': 'udp', sip: false }, expect: false },
      { packet: { 'ip.proto': 'udp' }, expect: false },
    ] },
  { name: 'cf.colo.name is a string field', expr: 'cf.colo.name == "sfo06"', packet: colo('sfo06'), expect: true },
  { name: 'cf.colo.region is a string field', expr: 'cf.colo.region == "WNAM"', packet: { 'cf.colo.region': 'WNAM' }, expect: true },
  { name: 'ip (raw bytes) is a bytes field', expr: 'ip contains c0:a8:00:02', packet: { ip: IPV4_HDR }, expect: true },
  { name: 'tcp (raw bytes) is a bytes field', expr: 'tcp contains 1f:90:00:50', packet: { tcp: TCP_SYN_HDR }, expect: true },
  { name: 'udp (raw bytes) is a bytes field including the payload', expr: 'udp contains "hello"', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'icmp (raw bytes) is a bytes field', expr: 'icmp == 08:00:f7:ff:00:01:00:01', packet: { icmp: ICMP_ECHO }, expect: true },
  { name: 'udp.dstport is a different field from tcp.dstport', expr: 'udp.dstport == 80', packet: port(80), expect: false },
  { name: 'ip.src.country is its own field, not ip.src', expr: 'ip.src.country == "GB"', packet: src('81.2.69.142'), expect: false },
  { name: 'a string literal for an int field is a type mismatch', expr: 'ip.ttl == "64"', expect: { error: [1004, 2003] } },
  { name: 'a string literal for an IP field is a type mismatch', expr: 'ip.src == "10.0.0.1"', expect: { error: [1006, 2003] } },
  { name: 'an unquoted country code is an error', expr: 'ip.src.country == GB', expect: { error: [1012, 1022, 2003] } },

  // ===== Fields that do not exist in Magic Firewall ==========================================
  { name: 'an unknown field is error 2001', expr: 'tcp.port == 80', expect: { error: 2001 }, at: 2 },
  { name: 'Wireshark ip.addr is not a field', expr: 'ip.addr == 10.0.0.1', expect: { error: 2001 } },
  { name: 'ip.flags.df is not a field', expr: 'ip.flags.df', expect: { error: 2001 } },
  { name: 'tcp.flags.ns is not a field', expr: 'tcp.flags.ns', expect: { error: 2001 } },
  { name: 'Wireshark tcp.flags.ece is not a field (ours is tcp.flags.ecn)', expr: 'tcp.flags.ece', expect: { error: 2001 } },
  { name: 'ipv6.src is not a field (ip.src holds both families)', expr: 'ipv6.src == ::1', expect: { error: 2001 } },
  { name: 'icmpv6.type is not a field', expr: 'icmpv6.type == 128', expect: { error: 2001 } },
  { name: 'the HTTP field http.host is not a field here', expr: 'http.host == "example.com"', expect: { error: 2001 } },
  { name: 'ip.geoip.asnum is not a field here', expr: 'ip.geoip.asnum == 13335', expect: { error: 2001 } },
  { name: 'ip.src.city is not a field here', expr: 'ip.src.city == "London"', expect: { error: 2001 } },
  { name: 'a longer name than a field is not that field', expr: 'tcp.dstport.x == 1', expect: { error: 2001 } },
  { name: 'a field name with a trailing letter is unknown', expr: 'ip.srcx == 1.2.3.4', expect: { error: 2001 } },
  { name: 'an unknown field inside a valid expression is still an error', expr: 'tcp.dstport == 80 or udp.port == 53', expect: { error: 2001 }, at: 25 },

  // ===== Lists ===========================================================================
  { name: 'ip.src in $svc.malware matches its CIDRs and ranges', expr: 'ip.src in $svc.malware',
    reports: { fields: ['ip.src'], lists: ['svc.malware'] },
    runs: [
      { packet: src('10.1.2.3'), expect: true }, { packet: src('11.0.0.1'), expect: false },
      { packet: src('2001:db8::5'), expect: true }, { packet: src('2001:db9::1'), expect: false },
      { packet: src('1.2.3.4'), expect: true }, { packet: src('1.2.3.9'), expect: true }, { packet: src('1.2.3.10'), expect: false },
      { packet: src('::ffff:10.1.2.3'), expect: false }, { packet: NO_PACKET, expect: false },
    ] },
  { name: '$cf.malware is an alias of $svc.malware', expr: 'ip.src in $cf.malware',
    reports: { lists: ['svc.malware'] },
    runs: [{ packet: src('10.1.2.3'), expect: true }, { packet: src('1.2.3.10'), expect: false }] },
  { name: 'ip.dst in $svc.anonymizer', expr: 'ip.dst in $svc.anonymizer',
    runs: [
      { packet: { 'ip.dst': '198.51.100.7' }, expect: true }, { packet: { 'ip.dst': '198.51.101.1' }, expect: false },
      { packet: { 'ip.dst': '2001:db8:a:1::1' }, expect: true },
    ] },
  { name: '$cf.anonymizer is an alias of $svc.anonymizer', expr: 'ip.dst in $cf.anonymizer', reports: { lists: ['svc.anonymizer'] },
    runs: [{ packet: { 'ip.dst': '198.51.100.7' }, expect: true }, { packet: { 'ip.dst': '198.51.101.1' }, expect: false }] },
  { name: 'ip.dst in $svc.botnetcc', expr: 'ip.dst in $svc.botnetcc',
    runs: [{ packet: { 'ip.dst': '203.0.113.7' }, expect: true }, { packet: { 'ip.dst': '203.0.113.8' }, expect: false }] },
  { name: '$cf.botnetcc is an alias of $svc.botnetcc', expr: 'ip.src in $cf.botnetcc', reports: { lists: ['svc.botnetcc'] },
    runs: [{ packet: src('203.0.113.7'), expect: true }, { packet: src('203.0.113.6'), expect: false }] },
  { name: 'an account list $office_blocklist', expr: 'ip.src in $office_blocklist', reports: { lists: ['office_blocklist'] },
    runs: [{ packet: src('192.0.2.1'), expect: true }, { packet: src('192.0.2.2'), expect: false }] },
  { name: 'an account list name may contain dots ($hello.world, wirefilter lexer test)', expr: 'ip.dst in $hello.world',
    runs: [{ packet: { 'ip.dst': '192.0.2.55' }, expect: true }, { packet: { 'ip.dst': '192.0.2.1' }, expect: false }] },
  { name: 'an empty account list matches nothing', expr: 'ip.src in $empty_list', packet: src('10.0.0.1'), expect: false },
  { name: 'not ip.src in $svc.malware inverts, and is true when ip.src is absent', expr: 'not ip.src in $svc.malware',
    runs: [{ packet: src('10.1.2.3'), expect: false }, { packet: src('192.0.2.1'), expect: true }, { packet: NO_PACKET, expect: true }] },
  { name: 'lists combine with other tests', expr: 'ip.src in $svc.malware or ip.dst in $office_blocklist',
    reports: { fields: ['ip.dst', 'ip.src'], lists: ['office_blocklist', 'svc.malware'] },
    runs: [
      { packet: { 'ip.src': '192.0.2.9', 'ip.dst': '192.0.2.1' }, expect: true },
      { packet: { 'ip.src': '192.0.2.9', 'ip.dst': '192.0.2.9' }, expect: false },
    ] },
  { name: 'an account list that does not exist is error 2006', expr: 'ip.src in $nosuch', expect: { error: 2006 } },
  { name: 'without the lists option, $svc.malware compiles as an empty list', expr: 'ip.src in $svc.malware', lists: 'none',
    packet: src('10.1.2.3'), expect: false },
  { name: 'without the lists option, $cf.botnetcc compiles as an empty list', expr: 'ip.dst in $cf.botnetcc', lists: 'none',
    packet: { 'ip.dst': '203.0.113.7' }, expect: false },
  { name: 'without the lists option, an account list is error 2006', expr: 'ip.src in $office_blocklist', lists: 'none', expect: { error: 2006 } },
  { name: 'a lone $ is not a list name', expr: 'ip.src in $', expect: { error: 1016 } },
  { name: '$. is not a list name', expr: 'ip.src in $.', expect: { error: 1016 } },
  { name: 'a list name may not start with a dot', expr: 'ip.src in $.abc', expect: { error: 1016 } },
  { name: 'a list name may not end with a dot', expr: 'ip.src in $abc.', expect: { error: 1016 } },
  { name: 'a list name may not contain uppercase ($My_List)', expr: 'ip.src in $My_List', expect: { error: 1016 }, at: 11 },
  { name: 'an uppercase managed list name is not valid', expr: 'ip.src in $SVC.MALWARE', expect: { error: 1016 } },
  { name: 'a list on an int field is error 2007', expr: 'tcp.dstport in $svc.malware', expect: { error: 2007 } },
  { name: 'an account list on a string field is error 2007', expr: 'ip.proto in $office_blocklist', expect: { error: 2007 } },
  { name: 'a managed list alias on an int field is error 2007', expr: 'ip.src.asnum in $cf.malware', expect: { error: 2007 } },

  // ===== bit_slice =======================================================================
  { name: 'bit_slice reads the UDP source port from bits 0..16', expr: 'bit_slice(udp, 0, 16) == 53', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'bit_slice accepts the field name quoted', expr: 'bit_slice("udp", 16, 32) == 8080', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'bit_slice offset 64 is the first UDP payload byte', expr: 'bit_slice(udp, 64, 72) == 0x68', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'bit_slice reads bits across a byte boundary, most significant first', expr: 'bit_slice(udp, 4, 12) == 3', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'bit_slice reads a nibble inside a byte', expr: 'bit_slice(udp, 10, 14) == 13', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'bit_slice reads a single bit', expr: 'bit_slice(udp, 15, 16) == 1 and bit_slice(udp, 14, 15) == 0', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'bit_slice reads 32 bits', expr: 'bit_slice(udp, 0, 32) == 0x351f90', packet: { udp: UDP_HELLO }, expect: true },
  // 32 bits read as an unsigned number (the value of the bits); it fits an i64.
  { name: 'bit_slice of 32 set bits is 4294967295, not -1', expr: 'bit_slice(udp, 0, 32) == 4294967295 and not bit_slice(udp, 0, 32) == -1',
    packet: { udp: 'ffffffff' }, expect: true },
  { name: 'bit_slice reads the last full byte of the packet', expr: 'bit_slice(udp, 96, 104) == 0x6f', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'bit_slice past the end is absent: == and != are both false', expr: 'bit_slice(udp, 97, 105) == 0 or bit_slice(udp, 97, 105) != 0',
    packet: { udp: UDP_HELLO }, expect: false },
  { name: 'not on an absent bit_slice is true', expr: 'not bit_slice(udp, 0, 16) == 0', packet: { udp: 'ab' }, expect: true },
  { name: 'bit_slice fits exactly a one-byte packet', expr: 'bit_slice(udp, 0, 8) == 0xab', packet: { udp: 'ab' }, expect: true },
  { name: 'bit_slice on a one-byte packet is absent for 16 bits', expr: 'bit_slice(udp, 0, 16) != 0', packet: { udp: 'ab' }, expect: false },
  { name: 'bit_slice of an absent raw field is absent', expr: 'bit_slice(udp, 0, 8) == 0 or bit_slice(udp, 0, 8) != 0', packet: port(80), expect: false },
  { name: 'bit_slice at the 2040-bit limit is valid and absent on a short packet', expr: 'bit_slice(udp, 2008, 2040) == 0',
    packet: { udp: UDP_HELLO }, expect: false },
  { name: 'bit_slice reaches bit 2040 of a 255-byte packet', expr: 'bit_slice(udp, 2032, 2040) == 0xee',
    packet: { udp: '00'.repeat(254) + 'ee' }, expect: true },
  { name: 'bit_slice result supports in', expr: 'bit_slice(udp, 0, 16) in {53 5353}', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'bit_slice result supports &', expr: 'bit_slice(udp, 0, 16) & 1', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'bit_slice result supports ordering', expr: 'bit_slice(udp, 0, 16) > 52 and bit_slice(udp, 0, 16) <= 53', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'bit_slice result supports !=', expr: 'bit_slice(udp, 0, 16) != 53', packet: { udp: UDP_HELLO }, expect: false },
  { name: 'bit_slice reads the IPv4 version and IHL', expr: 'bit_slice(ip, 0, 4) == 4 and bit_slice(ip, 4, 8) == 5', packet: { ip: IPV4_HDR }, expect: true },
  { name: 'bit_slice reads the IPv4 protocol byte', expr: 'bit_slice(ip, 72, 80) == 6', packet: { ip: IPV4_HDR }, expect: true },
  { name: 'bit_slice reads the IPv4 source address as a number', expr: 'bit_slice(ip, 96, 128) == 0xc0a80001', packet: { ip: IPV4_HDR }, expect: true },
  { name: 'bit_slice reads the TCP destination port and flags', expr: 'bit_slice(tcp, 16, 32) == 80 and bit_slice(tcp, 110, 111) == 1 and bit_slice(tcp, 111, 112) == 0',
    packet: { tcp: TCP_SYN_HDR }, expect: true },
  { name: 'bit_slice reads the TCP data offset', expr: 'bit_slice("tcp", 96, 100) == 5', packet: { tcp: TCP_SYN_HDR }, expect: true },
  { name: 'bit_slice reads the ICMP type and code', expr: 'bit_slice(icmp, 0, 8) == 8 and bit_slice("icmp", 8, 16) == 0', packet: { icmp: ICMP_ECHO }, expect: true },
  { name: 'bit_slice reads relative to the start of a bytes view', expr: 'bit_slice(udp, 0, 16) == 53 and bit_slice(udp, 96, 104) == 0x6f',
    packet: { udp: { hex: 'aaaa' + UDP_HELLO + 'bbbb', start: 2, end: 15 } }, expect: true },
  { name: 'bit_slice does not read past the end of a bytes view', expr: 'bit_slice(udp, 104, 112) == 0xbb or bit_slice(udp, 104, 112) != 0xbb',
    packet: { udp: { hex: 'aaaa' + UDP_HELLO + 'bbbb', start: 2, end: 15 } }, expect: false },
  { name: 'bit_slice allows spaces around its arguments', expr: 'bit_slice( udp , 0 , 16 ) == 53', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'bit_slice without spaces', expr: 'bit_slice(udp,0,16)==53', packet: { udp: UDP_HELLO }, expect: true },
  { name: 'bit_slice combines with other tests', expr: 'ip.proto == "udp" and bit_slice(udp, 64, 72) == 0x68',
    runs: [
      { packet: { 'ip.proto': 'udp', udp: UDP_HELLO }, expect: true },
      { packet: { 'ip.proto': 'udp', udp: '00351f9000080000' }, expect: false },
    ] },
  { name: 'bit_slice wider than 32 bits is error 2009', expr: 'bit_slice(udp, 64, 97) == 0', expect: { error: 2009 } },
  { name: 'bit_slice of zero bits is error 2009', expr: 'bit_slice(udp, 8, 8) == 0', expect: { error: 2009 } },
  { name: 'bit_slice with start after end is error 2009', expr: 'bit_slice(udp, 16, 8) == 0', expect: { error: 2009 } },
  { name: 'bit_slice ending past 2040 is error 2009', expr: 'bit_slice(udp, 2009, 2041) == 0', expect: { error: 2009 } },
  { name: 'bit_slice with a negative start is error 2009', expr: 'bit_slice(udp, -1, 8) == 0', expect: { error: 2009 } },
  { name: 'bit_slice with two arguments is error 2009', expr: 'bit_slice(udp, 0) == 0', expect: { error: 2009 } },
  { name: 'bit_slice with four arguments is error 2009', expr: 'bit_slice(udp, 0, 8, 16) == 0', expect: { error: 2009 } },
  { name: 'bit_slice with no arguments is error 2009', expr: 'bit_slice() == 0', expect: { error: 2009 } },
  { name: 'bit_slice of a string field is error 2009', expr: 'bit_slice(ip.proto, 0, 8) == 0', expect: { error: 2009 } },
  { name: 'bit_slice of an int field is error 2009', expr: 'bit_slice(tcp.dstport, 0, 8) == 0', expect: { error: 2009 } },
  { name: 'bit_slice of a quoted non-raw name is error 2009', expr: 'bit_slice("tcp.dstport", 0, 8) == 0', expect: { error: 2009 } },
  { name: 'bit_slice of a quoted unknown name is error 2009', expr: 'bit_slice("eth", 0, 8) == 0', expect: { error: 2009 } },
  // Contract: a non-bool value without an operator is 2004; "not a boolean expression" (2010) also fits.
  { name: 'bit_slice without a comparison is not a test', expr: 'bit_slice(udp, 0, 16)', expect: { error: [2004, 2010] } },
  { name: 'an unknown function is error 2008', expr: 'lower(ip.proto) == "tcp"', expect: { error: 2008 }, at: 1 },
  { name: 'len() is not a Magic Firewall function', expr: 'len(udp) > 8', expect: { error: 2008 } },
  { name: 'cidr() is not a Magic Firewall function', expr: 'cidr(ip.src, 24) == 10.0.0.0', expect: { error: 2008 } },
  { name: 'concat() is not a Magic Firewall function', expr: 'concat(ip.proto, "x") == "tcpx"', expect: { error: 2008 } },

  // ===== Missing fields (wirefilter test_optional_fields, nil != false) =====================
  { name: '(tcp.dstport != 80) or (udp.dstport != 80) is false when neither port is there or both equal 80',
    expr: '(tcp.dstport != 80) or (udp.dstport != 80)',
    runs: [
      { packet: { 'tcp.dstport': 443 }, expect: true }, { packet: { 'udp.dstport': 53 }, expect: true },
      { packet: { 'tcp.dstport': 80 }, expect: false }, { packet: { 'udp.dstport': 80 }, expect: false },
      { packet: NO_PACKET, expect: false },
    ] },
  { name: 'not tcp.flags.syn on an empty packet is true', expr: 'not tcp.flags.syn', packet: NO_PACKET, expect: true },
  { name: 'not (tcp.dstport ne 80) on an empty packet is true', expr: 'not (tcp.dstport ne 80)', packet: NO_PACKET, expect: true },
  { name: 'a missing int field makes == false', expr: 'tcp.dstport == 80', packet: { 'udp.dstport': 80 }, expect: false },
  { name: 'a missing int field makes != false', expr: 'tcp.dstport != 22', packet: { 'ip.proto': 'udp', 'udp.dstport': 22 }, expect: false },
  { name: 'a missing int field makes < false', expr: 'tcp.dstport < 65536', packet: NO_PACKET, expect: false },
  { name: 'a missing int field makes >= false', expr: 'tcp.dstport >= 0', packet: NO_PACKET, expect: false },
  { name: 'a missing int field makes & false', expr: 'tcp.flags & 0xff', packet: NO_PACKET, expect: false },
  { name: 'a missing int field makes in false', expr: 'tcp.dstport in {0..65535}', packet: NO_PACKET, expect: false },
  { name: 'not on a missing int field comparison is true', expr: 'not tcp.dstport in {0..65535}', packet: NO_PACKET, expect: true },
  { name: 'not tcp.dstport == 80 matches a UDP packet (wirefilter)', expr: 'not tcp.dstport == 80', packet: { 'ip.proto': 'udp', 'udp.dstport': 80 }, expect: true },
  { name: 'a missing IP field makes != false', expr: 'ip.src != 10.0.0.1', packet: NO_PACKET, expect: false },
  { name: 'a missing IP field makes == false', expr: 'ip.dst == 10.0.0.1', packet: src('10.0.0.1'), expect: false },
  { name: 'a missing IP field makes ordering false', expr: 'ip.src >= 0.0.0.0 or ip.src >= ::', packet: NO_PACKET, expect: false },
  { name: 'a missing IP field is in no set', expr: 'ip.src in {0.0.0.0/0 ::/0}', packet: NO_PACKET, expect: false },
  { name: 'a missing string field makes != false', expr: 'ip.proto != "tcp"', packet: NO_PACKET, expect: false },
  { name: 'a missing string field makes contains "" false', expr: 'ip.proto contains ""', packet: NO_PACKET, expect: false },
  { name: 'a missing string field makes matches false', expr: 'ip.proto matches ".*"', packet: NO_PACKET, expect: false },
  { name: 'a missing string field makes ordering false', expr: 'cf.colo.name >= ""', packet: NO_PACKET, expect: false },
  { name: 'a missing raw field makes == false', expr: 'udp == 00:35', packet: NO_PACKET, expect: false },
  { name: 'x == v or x != v is false when x is missing', expr: 'tcp.dstport == 80 or tcp.dstport != 80',
    runs: [{ packet: NO_PACKET, expect: false }, { packet: port(22), expect: true }] },
  { name: 'not (x == v or x != v) is true when x is missing', expr: 'not (tcp.dstport == 80 or tcp.dstport != 80)', packet: NO_PACKET, expect: true },
  { name: 'x == v xor x != v is false when x is missing and true when present', expr: 'tcp.dstport == 80 xor tcp.dstport != 80',
    runs: [{ packet: NO_PACKET, expect: false }, { packet: port(80), expect: true }] },
  { name: 'a bare bool field that is absent is false', expr: 'tcp.flags.syn or sip', packet: NO_PACKET, expect: false },
  { name: 'fields set for one packet do not leak into the next (context reset)', expr: 'tcp.dstport == 80 or ip.src == 10.0.0.1 or ip.proto == "tcp" or tcp.flags.syn',
    runs: [
      { packet: { 'tcp.dstport': 80, 'ip.src': '10.0.0.1', 'ip.proto': 'tcp', 'tcp.flags.syn': true }, expect: true },
      { packet: NO_PACKET, expect: false },
    ] },

  // ===== ip.geoip.country: either src or dst; != means all present values differ ============
  { name: 'ip.geoip.country == matches on either end', expr: 'ip.geoip.country == "GB"',
    runs: [
      { packet: { 'ip.src.country': 'GB', 'ip.dst.country': 'US' }, expect: true },
      { packet: { 'ip.src.country': 'US', 'ip.dst.country': 'GB' }, expect: true },
      { packet: { 'ip.src.country': 'US', 'ip.dst.country': 'DE' }, expect: false },
      { packet: { 'ip.dst.country': 'GB' }, expect: true },
      { packet: NO_PACKET, expect: false },
    ] },
  { name: 'ip.geoip.country != is true only when every present end differs', expr: 'ip.geoip.country != "GB"',
    runs: [
      { packet: { 'ip.src.country': 'GB', 'ip.dst.country': 'US' }, expect: false },
      { packet: { 'ip.src.country': 'US', 'ip.dst.country': 'GB' }, expect: false },
      { packet: { 'ip.src.country': 'US', 'ip.dst.country': 'DE' }, expect: true },
      { packet: { 'ip.src.country': 'DE' }, expect: true },
      { packet: { 'ip.src.country': 'GB' }, expect: false },
      { packet: NO_PACKET, expect: false },
    ] },
  { name: 'ip.geoip.country ne is the English spelling', expr: 'ip.geoip.country ne "GB"',
    runs: [{ packet: { 'ip.src.country': 'GB', 'ip.dst.country': 'GB' }, expect: false }, { packet: { 'ip.dst.country': 'FR' }, expect: true }] },
  { name: 'not ip.geoip.country == is true when neither end matches or none is known', expr: 'not ip.geoip.country == "GB"',
    runs: [
      { packet: { 'ip.src.country': 'GB', 'ip.dst.country': 'US' }, expect: false },
      { packet: { 'ip.src.country': 'FR', 'ip.dst.country': 'US' }, expect: true },
      { packet: NO_PACKET, expect: true },
    ] },
  { name: 'ip.geoip.country in a set matches on either end', expr: 'ip.geoip.country in {"DE" "US"}',
    runs: [{ packet: { 'ip.src.country': 'GB', 'ip.dst.country': 'US' }, expect: true }, { packet: { 'ip.src.country': 'GB', 'ip.dst.country': 'FR' }, expect: false }] },
  { name: 'ip.geoip.country contains matches on either end', expr: 'ip.geoip.country contains "S"',
    runs: [{ packet: { 'ip.src.country': 'GB', 'ip.dst.country': 'US' }, expect: true }, { packet: { 'ip.src.country': 'GB', 'ip.dst.country': 'FR' }, expect: false }] },
  { name: 'ip.geoip.country matches on either end', expr: 'ip.geoip.country matches "^U"',
    runs: [{ packet: { 'ip.src.country': 'US', 'ip.dst.country': 'GB' }, expect: true }, { packet: { 'ip.src.country': 'GB' }, expect: false }] },
  { name: 'ip.geoip.country is case-sensitive', expr: 'ip.geoip.country == "gb"', packet: { 'ip.src.country': 'GB' }, expect: false },
  { name: 'ip.src.country and ip.dst.country read one end each', expr: 'ip.src.country == "GB" and not ip.dst.country == "GB"',
    runs: [{ packet: { 'ip.src.country': 'GB', 'ip.dst.country': 'US' }, expect: true }, { packet: { 'ip.src.country': 'US', 'ip.dst.country': 'GB' }, expect: false }] },

  // ===== Whitespace, case, word boundaries ==================================================
  { name: 'newlines are whitespace', expr: 'tcp.dstport\n==\n80', packet: port(80), expect: true },
  { name: 'CR LF is whitespace', expr: 'tcp.flags.syn\r\nand\r\ntcp.flags.ack', packet: flags('syn ack'), expect: true },
  { name: 'a lone CR is whitespace', expr: 'tcp.flags.syn\rand\rtcp.flags.ack', packet: flags('syn ack'), expect: true },
  { name: 'leading and trailing spaces and newlines are allowed', expr: '  \n tcp.dstport == 80 \r\n ', packet: port(80), expect: true },
  { name: 'many spaces between tokens', expr: 'tcp.dstport     ==      80', packet: port(80), expect: true },
  { name: 'a tab is error 1001', expr: 'tcp.dstport\t==\t80', expect: { error: 1001 }, at: 11 },
  { name: 'a leading tab is error 1001', expr: '\ttcp.flags.syn', expect: { error: 1001 }, at: 0 },
  { name: 'a trailing tab is error 1001', expr: 'tcp.flags.syn\t', expect: { error: 1001 }, at: 13 },
  { name: 'a no-break space is error 1001', expr: 'tcp.dstport\u00a0== 80', expect: { error: 1001 }, at: 11 },
  { name: 'a form feed is error 1001', expr: 'tcp.dstport ==\f80', expect: { error: 1001 } },
  { name: 'a vertical tab is error 1001', expr: 'tcp.flags.syn\vand tcp.flags.ack', expect: { error: 1001 } },
  { name: 'a character outside the language is error 1001', expr: '@tcp.flags.syn', expect: { error: 1001 }, at: 0 },
  { name: 'symbol operators need no spaces', expr: 'tcp.dstport==80&&ip.proto=="tcp"', packet: { 'tcp.dstport': 80, 'ip.proto': 'tcp' }, expect: true },
  { name: '|| and ^^ need no spaces', expr: 'tcp.flags.syn||tcp.flags.ack^^tcp.flags.fin', packet: flags('ack fin'), expect: false },
  { name: '& needs no spaces', expr: 'tcp.flags&0x02', packet: { 'tcp.flags': 0x02 }, expect: true },
  { name: 'a word operator may be followed by a parenthesis', expr: '(tcp.flags.syn)and(tcp.flags.ack)', packet: flags('syn ack'), expect: true },
  { name: 'not may be followed by a parenthesis', expr: 'not(tcp.flags.ack)', packet: flags('syn'), expect: true },
  { name: 'in may be followed by a brace', expr: 'tcp.dstport in{80 443}', packet: port(443), expect: true },
  { name: 'contains may be followed by a quote', expr: 'ip.proto contains"cp"', packet: proto('tcp'), expect: true },
  // Contract: "Operators must be lowercase and must end at a word boundary (eq80 is an error)".
  { name: 'eq80 is an error: an operator must end at a word boundary', expr: 'tcp.dstport eq80', expect: { error: [1012, 1019] } },
  { name: 'ne80 is an error', expr: 'tcp.dstport ne80', expect: { error: [1012, 1019] } },
  { name: 'bitwise_and0x02 is an error', expr: 'tcp.flags bitwise_and0x02', expect: { error: [1012, 1019] } },
  { name: 'andtcp... is an error: and must end at a word boundary', expr: 'tcp.flags.syn andtcp.flags.ack', expect: { error: [1012, 1019, 1021] } },
  { name: 'ortcp... is an error', expr: 'tcp.flags.syn ortcp.flags.ack', expect: { error: [1012, 1019, 1021] } },
  // `nottcp.flags.ack` reads as one (unknown) name.
  { name: 'nottcp... is an error', expr: 'nottcp.flags.ack', expect: { error: [1012, 2001] } },
  { name: 'uppercase field names are unknown', expr: 'TCP.DSTPORT == 80', expect: { error: 2001 } },
  { name: 'a capitalised field name is unknown', expr: 'Tcp.dstport == 80', expect: { error: 2001 } },
  { name: 'EQ is an unknown operator', expr: 'tcp.dstport EQ 80', expect: { error: 1019 }, at: 12 },
  { name: 'Eq is an unknown operator', expr: 'tcp.dstport Eq 80', expect: { error: 1019 } },
  { name: 'IN is an unknown operator', expr: 'tcp.dstport IN {80}', expect: { error: 1019 } },
  { name: 'CONTAINS is an unknown operator', expr: 'ip.proto CONTAINS "t"', expect: { error: 1019 } },
  { name: '=== is an unknown operator', expr: 'tcp.dstport === 80', expect: { error: 1019 } },
  { name: 'a single = is not an operator', expr: 'tcp.dstport = 80', expect: { error: [1001, 1019] } },
  { name: 'AND is an error', expr: 'tcp.flags.syn AND tcp.flags.ack', expect: { error: [1012, 1019, 1021] } },
  { name: 'OR is an error', expr: 'tcp.flags.syn OR tcp.flags.ack', expect: { error: [1012, 1019, 1021] } },
  { name: 'NOT is an error', expr: 'NOT tcp.flags.syn', expect: { error: [1012, 1019, 2001] } },
  { name: 'a single | is an error', expr: 'tcp.flags.syn | tcp.flags.ack', expect: { error: [1001, 1012, 1019, 1021] } },
  { name: '& between two bool fields is an error', expr: 'tcp.flags.syn & tcp.flags.ack', expect: { error: [1012, 1021, 2005] } },

  // ===== Syntax errors ====================================================================
  { name: 'the empty expression is error 1024', expr: '', expect: { error: 1024 } },
  // wirefilter trims the input before parsing: whitespace alone is empty.
  { name: 'an expression of spaces is error 1024', expr: '   ', expect: { error: 1024 } },
  { name: 'an expression of newlines is error 1024', expr: '\n\r\n', expect: { error: 1024 } },
  { name: 'an int field without an operator is error 2004', expr: 'tcp.dstport', expect: { error: 2004 }, at: 0 },
  { name: 'an IP field without an operator is error 2004', expr: 'ip.src', expect: { error: 2004 } },
  { name: 'a string field without an operator is error 2004', expr: 'ip.proto', expect: { error: 2004 } },
  { name: 'a raw bytes field without an operator is error 2004', expr: 'udp', expect: { error: 2004 } },
  { name: 'a non-bool field as an operand of and is error 2004', expr: 'tcp.flags.syn and tcp.dstport', expect: { error: 2004 } },
  { name: 'not on a non-bool field is an error', expr: 'not tcp.dstport', expect: { error: [2004, 2010] } },
  { name: 'a parenthesised non-bool field is an error', expr: '(tcp.dstport)', expect: { error: [2004, 2010] } },
  { name: 'a comparison without a value is error 1014', expr: 'tcp.dstport ==', expect: { error: 1014 } },
  { name: 'in without a set is error 1014', expr: 'tcp.dstport in', expect: { error: 1014 } },
  { name: 'a lone not is error 1014', expr: 'not', expect: { error: 1014 } },
  { name: 'a trailing and is error 1014', expr: 'tcp.flags.syn and', expect: { error: 1014 } },
  { name: 'a trailing or with spaces is error 1014', expr: 'tcp.dstport == 80 or  ', expect: { error: 1014 } },
  { name: 'an unclosed parenthesis is error 1013', expr: '(tcp.flags.syn', expect: { error: 1013 } },
  { name: 'an unclosed inner parenthesis is error 1013', expr: '((tcp.flags.syn) and tcp.flags.ack', expect: { error: 1013 } },
  { name: 'a lone opening parenthesis is an error', expr: '(', expect: { error: [1013, 1014] } },
  { name: 'an extra closing parenthesis is an error', expr: 'tcp.flags.syn)', expect: { error: [1012, 1021] } },
  { name: 'an extra closing parenthesis after a group is an error', expr: '(tcp.flags.syn))', expect: { error: [1012, 1021] } },
  { name: 'empty parentheses are an error', expr: '()', expect: { error: [1012, 1014] } },
  { name: 'a closing parenthesis where an operand is expected is error 1012', expr: 'tcp.dstport == 80 and (tcp.flags.syn or)', expect: { error: 1012 } },
  { name: 'an unclosed set is error 1015', expr: 'tcp.dstport in {80 443', expect: { error: 1015 } },
  { name: 'an unclosed set followed by spaces is error 1015', expr: 'tcp.dstport in {80 443   ', expect: { error: 1015 } },
  { name: 'an unclosed empty set is an error', expr: 'ip.src in {', expect: { error: [1014, 1015] } },
  { name: 'an extra closing brace is an error', expr: 'tcp.dstport in {80}}', expect: { error: [1012, 1021] } },
  // Syntax (1xxx) is checked before names and types (2xxx), and keywords are not reserved: a word right
  // after a name stands where an operator goes, so "unknown operator" (1019, as for `EQ`) is consistent too.
  { name: 'two tests without a logical operator are an error', expr: 'tcp.flags.syn tcp.flags.ack', expect: { error: [1012, 1019, 1021] } },
  { name: 'two values after one operator are an error', expr: 'tcp.dstport == 80 443', expect: { error: [1012, 1021] } },
  { name: 'a semicolon after the expression is an error', expr: 'tcp.dstport == 80;', expect: { error: [1001, 1021] } },
  // `and`/`or` can also be read as an (unknown) field name where an operand is expected (wirefilter:
  // unknown identifier); the word after it then stands where an operator goes (1019, see above).
  { name: 'two logical operators in a row are an error', expr: 'tcp.flags.syn and or tcp.flags.ack', expect: { error: [1012, 1019, 2001] } },
  { name: 'a leading and is an error', expr: 'and tcp.flags.syn', expect: { error: [1012, 1019, 2001] } },

  // ===== Limits: 4,096 characters, nesting 128 ==============================================
  { name: 'a 4,096-character expression is accepted', expr: padTo(4096, 'tcp.dstport ==', '80'), packet: port(80), expect: true },
  { name: 'a 4,097-character expression is error 1017', expr: padTo(4097, 'tcp.dstport ==', '80'), expect: { error: 1017 } },
  { name: 'a 4,096-character chain of 191 or-ed comparisons is accepted', expr: portChain(4096),
    runs: [{ packet: port(1), expect: true }, { packet: port(80), expect: true }, { packet: port(65535), expect: false }] },
  { name: 'a 4,097-character chain of comparisons is error 1017', expr: portChain(4097), expect: { error: 1017 } },
  { name: 'a much longer expression is error 1017', expr: 'tcp.flags.syn or '.repeat(1000) + 'tcp.flags.syn', expect: { error: 1017 } },
  // wirefilter: each `(` and each `not`/`!` enters one nesting level; the limit is 128 levels.
  { name: '128 nested parentheses are accepted', expr: '('.repeat(128) + 'tcp.flags.syn' + ')'.repeat(128),
    runs: [{ packet: flags('syn'), expect: true }, { packet: flags(''), expect: false }] },
  { name: '129 nested parentheses are error 1018', expr: '('.repeat(129) + 'tcp.flags.syn' + ')'.repeat(129), expect: { error: 1018 } },
  { name: '300 nested parentheses are error 1018', expr: '('.repeat(300) + 'tcp.flags.syn' + ')'.repeat(300), expect: { error: 1018 } },
  { name: '128 nested negations are accepted', expr: '!'.repeat(128) + 'tcp.flags.syn',
    runs: [{ packet: flags('syn'), expect: true }, { packet: flags(''), expect: false }] },
  { name: '129 nested negations are error 1018', expr: 'not '.repeat(129) + 'tcp.flags.syn', expect: { error: 1018 } },
  { name: '64 levels of not ( ... ) make 128 levels and are accepted', expr: 'not ('.repeat(64) + 'tcp.flags.syn' + ')'.repeat(64),
    runs: [{ packet: flags('syn'), expect: true }, { packet: flags(''), expect: false }] },
  { name: '65 levels of not ( ... ) make 130 levels and are error 1018', expr: 'not ('.repeat(65) + 'tcp.flags.syn' + ')'.repeat(65), expect: { error: 1018 } },
  { name: 'a flat chain of 200 or-ed terms is not nesting', expr: Array(200).fill('tcp.flags.syn').join(' or '),
    runs: [{ packet: flags('syn'), expect: true }, { packet: flags(''), expect: false }] },
  { name: 'a flat chain of 250 and-ed negations is not nesting', expr: Array(250).fill('!tcp.flags.syn').join('&&'),
    runs: [{ packet: flags(''), expect: true }, { packet: flags('syn'), expect: false }] },
];
