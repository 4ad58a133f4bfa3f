// Packet programs: a bundle's rules fused with the decoder's fast path into one
// generated function per bundle, frame bytes in, verdict out. The field locals
// of the rules' code (see function-body.ts) are read from the frame itself
// rather than from an execution context the decoder filled, so a frame of the
// fast path's kind (packet/fast.ts: untagged Ethernet, IPv4 without options or
// IPv6 without extension headers, not fragmented, a whole TCP or UDP header)
// costs no context stores, no clearing, and no call between decoding and
// rules (measured: bench/pipeline.bench.ts). Any other frame, the function
// returns FALLBACK having written nothing, and the packet path decodes it the
// general way and runs the bundle's ordinary function (the same rules).

import { contextRead, type ExecutionContext } from '../expr/index.js';
import { fastFrame, FIELD_SLOTS as S, LAYOUT as L } from '../packet/index.js';
import { hoistFieldLoads, localName, renderBody, staysInContext, type FunctionBody } from './function-body.js';

/** What a packet program returns for a frame it does not take. */
export const FALLBACK = -2;

/** The packet path a program runs for: it marks the address groups pending (lazy lookups). */
export interface ProgramHost {
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
export type PacketProgram = (buf: Uint8Array, off: number, caplen: number, len: number, c: ExecutionContext, host: ProgramHost) => number;

/** [bool slot, bit of the TCP flags byte] of each TCP flag field (warm-up.ts builds frames from it too). */
export const TCP_FLAG_BITS: ReadonlyArray<readonly [number, number]> = [
  [S.TCP_FLAG_FIN, 0], [S.TCP_FLAG_SYN, 1], [S.TCP_FLAG_RST, 2], [S.TCP_FLAG_PSH, 3],
  [S.TCP_FLAG_ACK, 4], [S.TCP_FLAG_URG, 5], [S.TCP_FLAG_ECE, 6], [S.TCP_FLAG_CWR, 7],
];

// The program's own names (the rules' names are in code-writer.ts's table):
//   $buf, $off, $cap  the frame: bytes, its offset in $buf, bytes captured
//   $host             the packet path (ProgramHost)
//   $fr               the frame test's answer (FF, packet/fast.ts): transport offset | protocol << 8, or < 0
//   $p, $l4           offsets in $buf of the IP and the transport header
//   $v4, $tcp         IPv4 (else IPv6), TCP (else UDP)
//   $ws, $wd          the first words of the source and destination addresses
//   k                 the word index of the IPv6 address copy
// Header offsets come from packet/layout.ts, the one source of truth for them.

// `base + offset` as source, `base` alone for offset 0.
const at = (base: string, offset: number) => (offset === 0 ? base : `${base} + ${offset}`);
const word = (a: string) => `((($buf[${a}] << 24) | ($buf[${a} + 1] << 16) | ($buf[${a} + 2] << 8) | $buf[${a} + 3]) >>> 0)`;
const u16 = (a: string) => `(($buf[${a}] << 8) | $buf[${a} + 1])`;
const tcpFlags = `$buf[${at('$l4', L.TCP_FLAGS)}]`;

// A field's value in a program: source text, or a number, which is a literal
// the TCP or UDP copy of the rules holds in place of the local.
type Source = string | number;
const text = (s: Source) => (typeof s === 'number' ? String(s) : s);

// What the general decoder writes in each slot for a frame of the fast path's
// kind, for TCP frames and for UDP frames (NaN: absent int, 0: false bool).
// The addresses of IPv6 frames are read from the context (A6), which the
// program writes.
const FIELD_SOURCE: ReadonlyMap<string, readonly [tcp: Source, udp: Source]> = new Map([
  ...([
    [`I${S.IP_LEN}`, `($v4 ? ${u16(at('$p', L.IP4_TOTAL_LENGTH))} : ${L.IP6_HEADER} + ${u16(at('$p', L.IP6_PAYLOAD_LENGTH))})`],
    [`I${S.IP_HDR_LEN}`, `($v4 ? ${L.IP4_HEADER / 4} : NaN)`],
    [`I${S.IP_TTL}`, `$buf[$v4 ? ${at('$p', L.IP4_TTL)} : ${at('$p', L.IP6_HOP_LIMIT)}]`],
    [`I${S.IP_OPT_TYPE}`, NaN],
    [`I${S.ICMP_TYPE}`, NaN],
    [`I${S.ICMP_CODE}`, NaN],
    [`F${S.IP_SRC}`, '($v4 ? 4 : 6)'],
    [`F${S.IP_DST}`, '($v4 ? 4 : 6)'],
    // Read only where F says 4 (see expr/codegen.ts).
    [`A4${S.IP_SRC}`, `($v4 ? ${word(at('$p', L.IP4_SRC))} : 0)`],
    [`A4${S.IP_DST}`, `($v4 ? ${word(at('$p', L.IP4_DST))} : 0)`],
  ] as ReadonlyArray<readonly [string, Source]>).map(([k, e]): [string, readonly [Source, Source]] => [k, [e, e]]),
  [`I${S.IP_PROTO_NUMBER}`, [6, 17]],
  [`I${S.TCP_SRCPORT}`, [u16(at('$l4', L.TCP_SRCPORT)), NaN]],
  [`I${S.TCP_DSTPORT}`, [u16(at('$l4', L.TCP_DSTPORT)), NaN]],
  [`I${S.TCP_FLAGS}`, [tcpFlags, NaN]],
  [`I${S.UDP_SRCPORT}`, [NaN, u16(at('$l4', L.UDP_SRCPORT))]],
  [`I${S.UDP_DSTPORT}`, [NaN, u16(at('$l4', L.UDP_DSTPORT))]],
  ...TCP_FLAG_BITS.map(([slot, bit]): [string, readonly [Source, Source]] => [`B${slot}`, [`((${tcpFlags} >>> ${bit}) & 1)`, 0]]),
]);

/**
 * Largest rules body (characters) a program holds twice, once for TCP frames
 * and once for UDP ones. In each copy the fields the protocol lacks are
 * literals (`NaN === 53`), which the optimising compiler folds, so a TCP
 * frame runs none of the UDP-only tests and the reverse (measured: see the
 * file's header). Twice the body must stay a function V8 optimises (see
 * MAX_FUNCTION_SOURCE in code-writer.ts).
 */
export const MAX_SPECIALISED_BODY = 15_000;

// The declarations and body of one protocol's copy (k = 0 TCP, 1 UDP), or of
// the copy for both (k = -1): literal values are put in place of their locals.
function variant(body: FunctionBody, locals: ReturnType<typeof hoistFieldLoads>['locals'], k: -1 | 0 | 1): string | null {
  const decls: string[] = [];
  const literal = new Map<string, string>();
  for (const l of locals) {
    const src = FIELD_SOURCE.get(`${l.array}${l.slot}`);
    if (src === undefined) return null;
    const mine = k >= 0 ? src[k as 0 | 1] : undefined;
    if (typeof mine === 'number') literal.set(l.local, text(mine));
    else decls.push(`${l.local} = ${mine ?? (text(src[0]) === text(src[1]) ? text(src[0]) : `($tcp ? ${text(src[0])} : ${text(src[1])})`)}`);
  }
  const out = renderBody(body, (r) => (staysInContext(r) ? contextRead(r) : literal.get(localName(r)) ?? localName(r))).source;
  return `${decls.length > 0 ? `const ${decls.join(', ')};\n` : ''}${out}`;
}

/**
 * The source of the packet program of a bundle whose one generated function
 * holds `body`, or null when the body reads the context otherwise than the
 * program provides: a closure over the whole context (bytes fields,
 * `matches`), or a field the fast path does not decode. `prologue` is the
 * function's own (the log count reset).
 */
export function packetProgramSource(body: FunctionBody, prologue: string, end: number): string | null {
  if (body.readsContext) return null;
  const hoisted = hoistFieldLoads(body);
  let rules: string;
  if (hoisted.size <= MAX_SPECIALISED_BODY) {
    const tcp = variant(body, hoisted.locals, 0);
    const udp = variant(body, hoisted.locals, 1);
    if (tcp === null || udp === null) return null;
    rules = `if ($tcp) {\n${tcp}\n} else {\n${udp}\n}`;
  } else {
    const both = variant(body, hoisted.locals, -1);
    if (both === null) return null;
    rules = both;
  }
  // Lazy lookups and IPv6 address tests read the addresses from the context.
  const s = S.IP_SRC;
  const d = S.IP_DST;
  const write = body.readsAddresses
    ? [
      'let $ws = 0, $wd = 0;',
      `if ($v4) { $ws = ${word(at('$p', L.IP4_SRC))}; $wd = ${word(at('$p', L.IP4_DST))}; F[${s}] = 4; F[${d}] = 4; A4[${s}] = $ws; A4[${d}] = $wd; }`,
      `else { F[${s}] = 6; F[${d}] = 6; for (let k = 0; k < 8; k++) A6[${s * 4} + k] = ${word(`${at('$p', L.IP6_SRC)} + k * 4`)}; $ws = A6[${s * 4}]; $wd = A6[${d * 4}]; }`,
      '$host.beginAt($v4, $ws, $wd);',
    ].join('\n')
    : '';
  return [
    'return function packetProgram($buf, $off, $cap, len, c, $host) {',
    'const $fr = FF($buf, $off, $cap);',
    `if ($fr < 0) return ${FALLBACK};`,
    `const $p = $off + ${L.ETH_HEADER}, $l4 = $off + ($fr & 255), $v4 = ($fr & 255) === ${L.L4_AFTER_IP4}, $tcp = ($fr >>> 8) === 6;`,
    prologue,
    'const I = c.ints, F = c.ipFamily, A4 = c.ip4, A6 = c.ip6, PD = c.pending;',
    write,
    rules,
    `return ${end};`,
    '};',
    '//# sourceURL=moat-bundle/packet-program.js',
  ].join('\n');
}

/** The frame test the programs call (bound as FF). */
export const PROGRAM_FRAME_TEST = fastFrame;
