// Warm-up frames: synthetic Ethernet frames, built from each rule's own
// literals, that a packet path runs before real traffic (PacketPath.warmUp)
// so that V8 optimises the bundle's code with type feedback for every test.
//
// Why: V8 optimises a function speculatively, from the feedback its
// unoptimised runs gathered. A test that never ran by then (the second half
// of `tcp.dstport == 6644 and ip.src.country in {...}` when no packet went to
// port 6644 yet) has none, so the optimised code deoptimises the whole
// function the first time a packet reaches it, and the function runs
// unoptimised until V8 optimises it again, tens of milliseconds later, once
// per such test (measured: bench/pipeline.bench.ts, "first pass of a new
// process", with and without warm-up). A frame per rule whose fields take the
// rule's literals (6644, 6645, the flags it tests...) reaches those tests
// before optimisation instead.
//
// Frames are of the packet program's kind (untagged Ethernet, IPv4 without
// options or IPv6, TCP or UDP) and cover the fields a program reads from the
// frame; a rule's other fields keep their defaults. Half of a rule's frames
// try to meet all its tests (so that the last test of an `and` runs too),
// half mix its literals and their neighbours. The choices are pseudo-random
// with a fixed seed, so a bundle always gets the same frames.

import type { Checked } from '../expr/index.js';
import { LAYOUT as L } from '../packet/index.js';
import { TCP_FLAG_BITS } from './packet-program.js';

// Probes of bool fields are keyed by slot, as packet-program.ts names the flag fields.
const boolKey = (slot: number): string => `B${slot}`;

/** Frames per rule: each protocol the rule reads, over both families, with different picks. */
const FRAMES_PER_RULE = 8;

/** Per field name: the values a rule's tests single out. */
type Probes = Map<string, number[]>;

/** The warm-up frames of a bundle's checked rules (null: a disabled or broken rule). */
export function warmUpFrames(trees: ReadonlyArray<Checked | null>): Uint8Array[] {
  const frames: Uint8Array[] = [];
  let seed = 0x9e3779b9;
  const rand = (n: number): number => {
    // xorshift32: deterministic, no allocation.
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) % n;
  };
  for (const tree of trees) {
    if (tree === null) continue;
    const probes: Probes = new Map();
    const hits: Probes = new Map();
    const addrs: Array<readonly number[]> = [];
    collect(tree, true, hits, probes, addrs);
    const names = [...probes.keys()];
    const proto = probes.get('ip.proto') ?? [];
    const udp = names.some((f) => f.startsWith('udp.')) || proto.includes(17);
    const tcp = names.some((f) => f.startsWith('tcp.')) || TCP_FLAG_BITS.some(([slot]) => probes.has(boolKey(slot))) || proto.includes(6);
    const protos = udp === tcp ? (['tcp', 'udp'] as const) : udp ? (['udp'] as const) : (['tcp'] as const);
    for (let k = 0; k < FRAMES_PER_RULE; k++) {
      // Half the frames try to meet every test of the rule (an `and` of tests
      // on different fields is met), half take any of its literals.
      const pick = (f: string, dflt: number): number => {
        const p = (k < FRAMES_PER_RULE / 2 ? hits : probes).get(f);
        return p === undefined || p.length === 0 ? dflt : p[rand(p.length)]!;
      };
      const tcp = protos[k % protos.length] === 'tcp';
      const addr = addrs.length > 0 ? addrs[rand(addrs.length)]! : null;
      // The family of an address literal when there is one, else both in turn.
      const v6 = addr !== null ? addr.length === 4 : (k >> 1) % 2 === 1;
      const hostAddr = (): number[] => (v6 ? [0x20010db8, rand(0x10000), rand(0x10000), 1 + rand(0xffff)] : [(1 + rand(223)) * 0x1000000 + rand(0x1000000)]);
      frames.push(
        frame({
          tcp,
          v6,
          len: pick('ip.len', 0),
          ttl: pick('ip.ttl', 64),
          srcPort: pick(tcp ? 'tcp.srcport' : 'udp.srcport', 1024 + rand(60000)),
          dstPort: pick(tcp ? 'tcp.dstport' : 'udp.dstport', rand(65536)),
          flags: flagsOf(k < FRAMES_PER_RULE / 2 ? hits : probes, rand),
          src: addr !== null && rand(2) === 0 ? addr : hostAddr(),
          dst: addr !== null && rand(2) === 0 ? addr : hostAddr(),
        }),
      );
    }
  }
  return frames;
}

// The TCP flags byte: a value the rule compares `tcp.flags` with, else each flag it tests set or not at random.
function flagsOf(probes: Probes, rand: (n: number) => number): number {
  const whole = probes.get('tcp.flags');
  if (whole !== undefined && whole.length > 0 && rand(2) === 0) return whole[rand(whole.length)]! & 0xff;
  let flags = rand(2) === 0 ? 0x02 : 0x10;
  for (const [slot, bit] of TCP_FLAG_BITS) {
    const p = probes.get(boolKey(slot));
    if (p !== undefined && p.length > 0) flags = p[rand(p.length)] === 1 ? flags | (1 << bit) : flags & ~(1 << bit);
  }
  return flags;
}

// Gathers the literals of a rule's tests into `hits` (a value that makes the
// test true where the test is not negated, false under a `not`) and `probes`
// (those and their neighbours, the bounds of sets, the masks tested); and the
// first address of each address literal or range.
function collect(t: Checked, positive: boolean, hits: Probes, probes: Probes, addrs: Array<readonly number[]>): void {
  const add = (to: Probes, name: string, ...values: number[]): void => {
    let p = to.get(name);
    if (p === undefined) to.set(name, (p = []));
    for (const v of values) if (Number.isInteger(v) && v >= 0 && p.length < 64) p.push(v);
  };
  const hit = (name: string, yes: number, no: number): void => add(hits, name, positive ? yes : no);
  switch (t.kind) {
    case 'and':
    case 'or':
    case 'xor':
      for (const i of t.items) collect(i, positive, hits, probes, addrs);
      return;
    case 'not':
      collect(t.operand, !positive, hits, probes, addrs);
      return;
    case 'bool':
      add(probes, boolKey(t.field.slot), 0, 1);
      hit(boolKey(t.field.slot), 1, 0);
      return;
    case 'int-cmp': {
      const v = t.value;
      add(probes, t.lhs.field.name, v, v + 1, v - 1);
      const yes = t.op === '<' ? v - 1 : t.op === '>' || t.op === '!=' ? v + 1 : v;
      const no = t.op === '<' || t.op === '<=' || t.op === '==' ? v + 1 : t.op === '!=' ? v : v - 1;
      hit(t.lhs.field.name, yes, no);
      return;
    }
    case 'int-and':
      add(probes, t.lhs.field.name, t.mask, 0);
      hit(t.lhs.field.name, t.mask, 0);
      return;
    case 'int-in':
      for (let i = 0; i < t.set.lo.length && i < 16; i++) add(probes, t.lhs.field.name, t.set.lo[i]!, t.set.hi[i]!);
      if (t.set.lo.length > 0) {
        const lo = t.set.lo[0]!;
        hit(t.lhs.field.name, lo, lo > 0 ? lo - 1 : t.set.hi[t.set.hi.length - 1]! + 1);
      }
      return;
    case 'ip-cmp':
      addrs.push(t.value.words);
      return;
    case 'ip-in': {
      const v4 = t.set.v4;
      for (let i = 0; i < v4.lo.length && i < 8; i++) addrs.push([v4.lo[i]!]);
      const v6 = t.set.v6;
      for (let i = 0; i < v6.count && i < 8; i++) addrs.push(Array.from(v6.bounds.subarray(i * 8, i * 8 + 4)));
      return;
    }
    default:
      // Lists, countries, AS numbers: looked up from the addresses; bytes fields: no program reads them.
      return;
  }
}

interface FrameFields {
  tcp: boolean;
  v6: boolean;
  /** IP length (IPv4 total length, IPv6 40 + payload length); 0 for the smallest. */
  len: number;
  ttl: number;
  srcPort: number;
  dstPort: number;
  flags: number;
  src: readonly number[];
  dst: readonly number[];
}

// An Ethernet frame holding exactly `len` bytes of IP (within the headers' minimum and 1500).
function frame(f: FrameFields): Uint8Array {
  const ipHdr = f.v6 ? L.IP6_HEADER : L.IP4_HEADER;
  const l4Hdr = f.tcp ? L.TCP_HEADER : L.UDP_HEADER;
  const ipLen = Math.min(1500, Math.max(ipHdr + l4Hdr, f.len));
  const b = new Uint8Array(L.ETH_HEADER + ipLen);
  const dv = new DataView(b.buffer);
  b.set([0x02, 0, 0, 0, 0, 1], L.ETH_DST);
  b.set([0x02, 0, 0, 0, 0, 2], L.ETH_SRC);
  dv.setUint16(L.ETH_TYPE, f.v6 ? 0x86dd : 0x0800);
  const p = L.ETH_HEADER;
  const proto = f.tcp ? 6 : 17;
  if (f.v6) {
    b[p + L.IP6_VERSION] = 0x60;
    dv.setUint16(p + L.IP6_PAYLOAD_LENGTH, ipLen - L.IP6_HEADER);
    b[p + L.IP6_NEXT_HEADER] = proto;
    b[p + L.IP6_HOP_LIMIT] = f.ttl & 0xff;
    for (let k = 0; k < 4; k++) {
      dv.setUint32(p + L.IP6_SRC + k * 4, (f.src[k] ?? 0) >>> 0);
      dv.setUint32(p + L.IP6_DST + k * 4, (f.dst[k] ?? 0) >>> 0);
    }
  } else {
    b[p + L.IP4_VERSION_IHL] = 0x45;
    dv.setUint16(p + L.IP4_TOTAL_LENGTH, ipLen);
    b[p + L.IP4_TTL] = f.ttl & 0xff;
    b[p + L.IP4_PROTOCOL] = proto;
    dv.setUint32(p + L.IP4_SRC, (f.src.length === 1 ? f.src[0]! : 0x0a000001) >>> 0);
    dv.setUint32(p + L.IP4_DST, (f.dst.length === 1 ? f.dst[0]! : 0x0a000002) >>> 0);
  }
  const l4 = p + ipHdr;
  if (f.tcp) {
    dv.setUint16(l4 + L.TCP_SRCPORT, f.srcPort & 0xffff);
    dv.setUint16(l4 + L.TCP_DSTPORT, f.dstPort & 0xffff);
    b[l4 + L.TCP_DATA_OFFSET] = (L.TCP_HEADER / 4) << 4;
    b[l4 + L.TCP_FLAGS] = f.flags;
  } else {
    dv.setUint16(l4 + L.UDP_SRCPORT, f.srcPort & 0xffff);
    dv.setUint16(l4 + L.UDP_DSTPORT, f.dstPort & 0xffff);
    dv.setUint16(l4 + L.UDP_LENGTH, ipLen - ipHdr);
  }
  return b;
}
