// Packet programs: a bundle's rules fused with the decoder's fast path into one
// generated function per bundle, frame bytes in, verdict out. The rules'
// generated code reads each field once, into a local (see hoistFieldLoads in
// bundle.ts); here those locals are read from the frame itself rather than
// from an execution context the decoder filled, so a frame of the fast path's
// kind (packet/fast.ts: untagged Ethernet, IPv4 without options or IPv6
// without extension headers, not fragmented, a whole TCP or UDP header) costs
// no context stores, no clearing, and no call between decoding and rules.
// This is the shape of the prototype in ../shared/reference/performance.md
// (decode into scalars, rules over scalars). Any other frame, the function
// returns FALLBACK having written nothing, and the packet path decodes it the
// general way and runs the bundle's ordinary function (the same rules).
//
// Measured on the pipeline benchmark's 1M packets (80% IPv4, 20% IPv6, TCP and
// UDP), CPU per packet: decoding into the context cost ~90 ns per frame where
// reading the same fields into locals costs ~25 (the stores, the clearing and
// PacketInfo); the whole packet path went 508 -> 464 ns (interleaved
// in-process A/B), and a one-rule bundle's 203 -> 113 ns. Holding the rules
// once for TCP frames and once for UDP ones, with the other protocol's fields
// as literals (see MAX_SPECIALISED_BODY), took it from 392 to 369 ns (mean of
// three alternating single-build processes, median of 5 passes each).

import type { ExecutionContext } from '../expr/index.js';
import { FIELD_SLOTS as S } from '../packet/index.js';
import { fastFrame } from '../packet/index.js';

/** What a packet program returns for a frame it does not take. */
export const FALLBACK = -2;

/** The packet path a program runs for: it marks the address groups pending (lazy lookups). */
export interface FusedHost {
  /** The addresses are in the context; `src` and `dst` are their first (IPv4: only) words. */
  beginAt(v4: boolean, src: number, dst: number): void;
}

/**
 * A packet program: judges the Ethernet frame buf[off, off + caplen) of `len`
 * bytes on the wire. Returns the index of the blocking rule, VERDICT_PASS, or
 * FALLBACK (nothing written, nothing counted). Like the bundle's function, it
 * counts the hits of log and skip rules but not the block it returns: the
 * caller does (Evaluator.countBlock).
 */
export type PacketProgram = (buf: Uint8Array, off: number, caplen: number, len: number, c: ExecutionContext, host: FusedHost) => number;

/** A field local of the rules' code: `i_7` is I[7], and so on. */
export interface FieldLocal {
  readonly local: string;
  readonly array: 'I' | 'B' | 'F' | 'A4';
  readonly slot: number;
}

// Locals the frame test leaves to the field expressions: $p is the IP header,
// $l4 the transport header, $v4 and $tcp what they say (else IPv6, UDP).
/** [bool slot, bit of the TCP flags byte] of each TCP flag field (warm-up.ts builds frames from it too). */
export const TCP_FLAG_BITS: ReadonlyArray<readonly [number, number]> = [
  [S.TCP_FLAG_FIN, 0], [S.TCP_FLAG_SYN, 1], [S.TCP_FLAG_RST, 2], [S.TCP_FLAG_PSH, 3],
  [S.TCP_FLAG_ACK, 4], [S.TCP_FLAG_URG, 5], [S.TCP_FLAG_ECE, 6], [S.TCP_FLAG_CWR, 7],
];
const word = (at: string) => `(((${'$buf'}[${at}] << 24) | ($buf[${at} + 1] << 16) | ($buf[${at} + 2] << 8) | $buf[${at} + 3]) >>> 0)`;
const u16 = (at: string) => `(($buf[${at}] << 8) | $buf[${at} + 1])`;

// What the general decoder writes in each slot for a frame of the fast path's
// kind, as an expression for TCP frames and one for UDP frames (NaN: absent
// int, 0: false bool). The addresses of IPv6 frames are read from the context
// (A6), which the program writes.
const FIELD_SOURCE: ReadonlyMap<string, readonly [tcp: string, udp: string]> = new Map([
  ...([
    [`I${S.IP_LEN}`, `($v4 ? ${u16('$p + 2')} : 40 + ${u16('$p + 4')})`],
    [`I${S.IP_HDR_LEN}`, '($v4 ? 5 : NaN)'],
    [`I${S.IP_TTL}`, '$buf[$v4 ? $p + 8 : $p + 7]'],
    [`I${S.IP_OPT_TYPE}`, 'NaN'],
    [`I${S.ICMP_TYPE}`, 'NaN'],
    [`I${S.ICMP_CODE}`, 'NaN'],
    [`F${S.IP_SRC}`, '($v4 ? 4 : 6)'],
    [`F${S.IP_DST}`, '($v4 ? 4 : 6)'],
    // Read only where F says 4 (see expr/codegen.ts).
    [`A4${S.IP_SRC}`, `($v4 ? ${word('$p + 12')} : 0)`],
    [`A4${S.IP_DST}`, `($v4 ? ${word('$p + 16')} : 0)`],
  ] as const).map(([k, e]): [string, readonly [string, string]] => [k, [e, e]]),
  [`I${S.IP_PROTO_NUMBER}`, ['6', '17']],
  [`I${S.TCP_SRCPORT}`, [u16('$l4'), 'NaN']],
  [`I${S.TCP_DSTPORT}`, [u16('$l4 + 2'), 'NaN']],
  [`I${S.TCP_FLAGS}`, ['$buf[$l4 + 13]', 'NaN']],
  [`I${S.UDP_SRCPORT}`, ['NaN', u16('$l4')]],
  [`I${S.UDP_DSTPORT}`, ['NaN', u16('$l4 + 2')]],
  ...TCP_FLAG_BITS.map(([slot, bit]): [string, readonly [string, string]] => [`B${slot}`, [`(($buf[$l4 + 13] >>> ${bit}) & 1)`, '0']]),
]);

const LITERAL = /^(NaN|\d+)$/;

/**
 * Largest rules body (characters) a program holds twice, once for TCP frames
 * and once for UDP ones. In each copy the fields the protocol lacks are
 * literals (`NaN === 53`), which the optimising compiler folds, so a TCP
 * frame runs none of the UDP-only tests and the reverse (measured: see the
 * file's header). Twice the body must stay a function V8 optimises (see
 * MAX_FUNCTION_SOURCE in bundle.ts).
 */
export const MAX_SPECIALISED_BODY = 15_000;

// The declarations and body of one protocol's copy (k = 0 TCP, 1 UDP), or of
// the copy for both (k = -1): literal values are put in place of their locals.
function variant(locals: readonly FieldLocal[], body: string, k: -1 | 0 | 1): string | null {
  const decls: string[] = [];
  let out = body;
  for (const l of locals) {
    const src = FIELD_SOURCE.get(`${l.array}${l.slot}`);
    if (src === undefined) return null;
    const e = k >= 0 ? src[k as 0 | 1] : src[0] === src[1] ? src[0] : `($tcp ? ${src[0]} : ${src[1]})`;
    if (k >= 0 && LITERAL.test(e)) out = out.replace(new RegExp(`\\b${l.local}\\b`, 'g'), e);
    else decls.push(`${l.local} = ${e}`);
  }
  return `${decls.length > 0 ? `const ${decls.join(', ')};\n` : ''}${out}`;
}

/**
 * The source of the packet program of a bundle whose one generated function
 * has `locals` and `body` (hoistFieldLoads' output), or null when the body
 * reads the context otherwise than the program provides: a closure over the
 * whole context (bytes fields, `matches`), or a field the fast path does not
 * decode. `prologue` is the function's own (the log count reset).
 */
export function packetProgramSource(locals: readonly FieldLocal[], body: string, prologue: string, end: number): string | null {
  if (/\(c\)/.test(body)) return null;
  let rules: string;
  if (body.length <= MAX_SPECIALISED_BODY) {
    const tcp = variant(locals, body, 0);
    const udp = variant(locals, body, 1);
    if (tcp === null || udp === null) return null;
    rules = `if ($tcp) {\n${tcp}\n} else {\n${udp}\n}`;
  } else {
    const both = variant(locals, body, -1);
    if (both === null) return null;
    rules = both;
  }
  // Lazy lookups and IPv6 address tests read the addresses from the context.
  const addresses = /\bPD\[|\bA6\[/.test(body);
  const s = S.IP_SRC;
  const d = S.IP_DST;
  const write = addresses
    ? [
      'let $ws = 0, $wd = 0;',
      `if ($v4) { $ws = ${word('$p + 12')}; $wd = ${word('$p + 16')}; F[${s}] = 4; F[${d}] = 4; A4[${s}] = $ws; A4[${d}] = $wd; }`,
      `else { F[${s}] = 6; F[${d}] = 6; for (let k = 0; k < 8; k++) A6[${s * 4} + k] = ${word('$p + 8 + k * 4')}; $ws = A6[${s * 4}]; $wd = A6[${d * 4}]; }`,
      '$host.beginAt($v4, $ws, $wd);',
    ].join('\n')
    : '';
  return [
    'return function packetProgram($buf, $off, $cap, len, c, $host) {',
    'const $fr = FF($buf, $off, $cap);',
    `if ($fr < 0) return ${FALLBACK};`,
    'const $p = $off + 14, $l4 = $off + ($fr & 255), $v4 = ($fr & 255) === 34, $tcp = ($fr >>> 8) === 6;',
    prologue,
    'const I = c.ints, F = c.ipFamily, A4 = c.ip4, A6 = c.ip6, PD = c.pending;',
    write,
    rules,
    `return ${end};`,
    '};',
  ].join('\n');
}

/** The frame test the programs call (bound as FF). */
export const PROGRAM_FRAME_TEST = fastFrame;
