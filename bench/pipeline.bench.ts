// End-to-end packet path throughput: a capture of 1,000,000 packets (60-100 byte
// frames, 80% IPv4 / 20% IPv6, TCP and UDP), a 50-rule network_transit ruleset
// mixing port sets, ranges, flags, lengths, countries, AS numbers and lists,
// three lists of 100,000 prefixes, and GeoIP country and ASN lookups on both
// addresses (synthetic databases of realistic size). In the same run, on the
// same file, it measures:
//   * Moat: read the file, decode, look up, evaluate, count (what `moat replay` does),
//     with packet programs (the default) and without (every frame decoded
//     into a context, then the rules);
//   * the same, as the first pass of a new process (what `moat replay` of the
//     file costs, V8's warm-up included), with and without PacketPath.warmUp();
//   * the same ruleset without its three list rules: what the lists cost;
//   * the record walk plus only the lists' memory work (both list-screen reads
//     of every IPv4 frame, a table lookup for each screen-positive address) in
//     a tight loop: what that work costs at best, with nothing else between
//     its reads;
//   * a bare loop that only walks the records (Moat's reader, batches as replay reads
//     them, no decoding): the I/O floor;
//   * tcpdump -r with a BPF filter on a simpler rule, and Moat on that same rule;
//   * tshark -Y with the ruleset's non-list rules translated (a display filter
//     cannot hold 300,000 list entries), on a 100,000-packet prefix because tshark
//     dissects every frame and keeps state per frame; its rate is per packet of the prefix.
// Knob: MOAT_BENCH_PIPELINE_PACKETS (default 1000000).

import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openPcapFile, PacketBatch, PcapReader } from '../src/capture/index.js';
import { loadBundle, PacketPath, type LoadedBundle } from '../src/engine/index.js';
import { formatIpv4 } from '../src/net/index.js';
import { REC_LISTS, screenHas, type AddressTable } from '../src/table/index.js';
import { buildFrame, TCP, type FrameSpec } from '../test/support/packet-builder.js';
import { Rng } from '../test/support/random.js';
import { syntheticAsnDb, syntheticCountryDb } from '../test/support/synthetic-geoip.js';

const PACKETS = Number(process.env.MOAT_BENCH_PIPELINE_PACKETS ?? 1_000_000);
const TSHARK_PACKETS = Math.min(100_000, PACKETS);
const LIST_SIZE = 100_000;

const COUNTRIES = ['CN', 'RU', 'KP', 'IR', 'SY', 'CU', 'VE', 'BY', 'MM', 'SD'];

/** One rule in both syntaxes: Cloudflare's and Wireshark's (null: not expressible in a display filter). */
interface RuleSpec {
  cf: string;
  ws: string | null;
}

export function ruleset(rng: Rng): RuleSpec[] {
  const rules: RuleSpec[] = [];
  const setOf = (xs: number[]) => ({ cf: xs.join(' '), ws: xs.join(', ') });
  for (let i = 0; i < 12; i++) {
    const ports = Array.from({ length: 3 + rng.int(6) }, () => 1 + rng.int(10_000));
    const s = setOf(ports);
    rules.push({ cf: `tcp.dstport in {${s.cf} ${20000 + i * 100}..${20000 + i * 100 + 50}}`, ws: `tcp.dstport in {${s.ws}, ${20000 + i * 100}..${20000 + i * 100 + 50}}` });
  }
  for (let i = 0; i < 8; i++) {
    const ports = Array.from({ length: 2 + rng.int(4) }, () => 1 + rng.int(2000));
    const s = setOf(ports);
    const len = 200 + rng.int(1000);
    rules.push({ cf: `udp.dstport in {${s.cf}} and ip.len > ${len}`, ws: `udp.dstport in {${s.ws}} and (ip.len > ${len} or ipv6.plen > ${len - 40})` });
  }
  for (let i = 0; i < 6; i++) {
    const ttl = 1 + rng.int(8);
    rules.push({ cf: `tcp.flags.syn and not tcp.flags.ack and ip.ttl < ${ttl} and tcp.dstport == ${1 + rng.int(1024)}`, ws: `tcp.flags.syn == 1 and tcp.flags.ack == 0 and (ip.ttl < ${ttl} or ipv6.hlim < ${ttl}) and tcp.dstport == ${1 + rng.int(1024)}` });
  }
  for (let i = 0; i < 8; i++) {
    const cs = Array.from({ length: 2 + rng.int(3) }, () => rng.pick(COUNTRIES));
    const port = 1 + rng.int(65535);
    rules.push({
      cf: `ip.src.country in {${cs.map((c) => `"${c}"`).join(' ')}} and tcp.dstport == ${port}`,
      ws: `(ip.geoip.src_country_iso in {${cs.map((c) => `"${c}"`).join(', ')}} or ipv6.geoip.src_country_iso in {${cs.map((c) => `"${c}"`).join(', ')}}) and tcp.dstport == ${port}`,
    });
  }
  for (let i = 0; i < 6; i++) {
    const asn = 1 + rng.int(400_000);
    rules.push({ cf: `ip.dst.asnum == ${asn} and ip.proto == "udp"`, ws: `(ip.geoip.dst_asnum == ${asn} or ipv6.geoip.dst_asnum == ${asn}) and udp` });
  }
  for (let i = 0; i < 4; i++) {
    rules.push({ cf: `tcp.flags & 0x29 and tcp.dstport == ${1 + rng.int(65535)}`, ws: `tcp.flags & 0x29 and tcp.dstport == ${1 + rng.int(65535)}` });
  }
  rules.push({ cf: 'ip.src in $svc.malware', ws: null });
  rules.push({ cf: 'ip.dst in $svc.botnetcc', ws: null });
  rules.push({ cf: 'ip.src in $office_blocklist and not tcp.dstport in {80 443}', ws: null });
  rules.push({ cf: 'icmp.type == 8 and ip.len > 1000', ws: '(icmp.type == 8 and ip.len > 1000) or (icmpv6.type == 8 and ipv6.plen > 960)' });
  rules.push({ cf: 'ip.proto == "gre" or ip.proto == "esp"', ws: 'ip.proto in {47, 50} or ipv6.nxt in {47, 50}' });
  rules.push({ cf: 'ip.src in {192.0.2.0/24 198.51.100.0/24 2001:db8::/32}', ws: 'ip.src in {192.0.2.0/24, 198.51.100.0/24} or ipv6.src in {2001:db8::/32}' });
  if (rules.length !== 50) throw new Error(`ruleset has ${rules.length} rules`);
  return rules;
}

// Prefixes in a blocklist-like mix: 70% /32, 15% /24, 10% /25-/31, 5% /16-/23.
export function listFile(rng: Rng, size: number): { text: string; sample: number[] } {
  const lines: string[] = [];
  const sample: number[] = [];
  for (let i = 0; i < size; i++) {
    const r = rng.next();
    const len = r < 0.7 ? 32 : r < 0.85 ? 24 : r < 0.95 ? 25 + rng.int(7) : 16 + rng.int(8);
    const addr = ((rng.int(223) + 1) * 2 ** 24 + rng.int(2 ** 24)) >>> 0;
    const net = len === 32 ? addr : (addr & ~(0xffffffff >>> len)) >>> 0;
    lines.push(`${formatIpv4(net)}/${len}`);
    if (i % 1000 === 0) sample.push(net);
  }
  return { text: lines.join('\n') + '\n', sample };
}

export function writeCapture(path: string, count: number, rng: Rng, listed: number[]): void {
  const templates: FrameSpec[] = [
    { ip: { version: 4, src: '1.1.1.1', dst: '2.2.2.2', ttl: 64 }, l4: { kind: 'tcp', srcPort: 1, dstPort: 2, flags: TCP.SYN, payload: new Uint8Array(6) } },
    { ip: { version: 4, src: '1.1.1.1', dst: '2.2.2.2', ttl: 64 }, l4: { kind: 'udp', srcPort: 1, dstPort: 2, payload: new Uint8Array(58) } },
    { ip: { version: 6, src: '2001::1', dst: '2001::2', hopLimit: 64 }, l4: { kind: 'tcp', srcPort: 1, dstPort: 2, flags: TCP.ACK } },
    { ip: { version: 6, src: '2001::1', dst: '2001::2', hopLimit: 64 }, l4: { kind: 'udp', srcPort: 1, dstPort: 2, payload: new Uint8Array(30) } },
  ].map((t) => t as FrameSpec);
  const frames = templates.map((t) => buildFrame(t));
  const w = openPcapFile(path, { batchSize: 1 << 20 });
  const hot = [22, 23, 53, 80, 123, 443, 443, 443, 3389, 8080];
  for (let i = 0; i < count; i++) {
    const k = rng.next() < 0.8 ? (rng.next() < 0.75 ? 0 : 1) : rng.next() < 0.75 ? 2 : 3;
    const f = frames[k]!;
    const v6 = k >= 2;
    const l4 = v6 ? 54 : 34;
    if (!v6) {
      const src = rng.next() < 0.05 ? listed[rng.int(listed.length)]! : ((rng.int(223) + 1) * 2 ** 24 + rng.int(2 ** 24)) >>> 0;
      const dst = ((rng.int(223) + 1) * 2 ** 24 + rng.int(2 ** 24)) >>> 0;
      new DataView(f.buffer).setUint32(26, src);
      new DataView(f.buffer).setUint32(30, dst);
      f[22] = rng.pick([64, 128, 255, 3]);
    } else {
      for (let b = 22; b < 54; b += 4) new DataView(f.buffer).setUint32(b, (0x20000000 + rng.int(2 ** 29)) >>> 0);
      f[21] = rng.pick([64, 128, 255, 3]);
    }
    const dport = rng.next() < 0.3 ? rng.pick(hot) : rng.int(65536);
    f[l4] = (1024 + rng.int(60000)) >> 8;
    f[l4 + 2] = dport >> 8;
    f[l4 + 3] = dport & 255;
    if (k === 0 || k === 2) f[l4 + 13] = rng.pick([TCP.SYN, TCP.ACK, TCP.ACK | TCP.PSH, TCP.SYN | TCP.ACK, TCP.FIN | TCP.ACK]);
    w.writePacket(f, 1_700_000_000 + Math.floor(i / 100_000), (i % 100_000) * 10_000);
  }
  w.close();
}

function run(cmd: string, args: string[]): { seconds: number; ok: boolean; out: string } | null {
  const t0 = process.hrtime.bigint();
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 1 << 30 });
  if (r.error !== undefined) return null;
  return { seconds: Number(process.hrtime.bigint() - t0) / 1e9, ok: r.status === 0, out: r.stdout + r.stderr };
}

// What `moat replay` does per file (a batch of packets at a time, see PcapReader.nextBatch), without outputs.
export function moatPass(capture: string, path: PacketPath): { seconds: number; dropped: number; packets: number; lookups: number } {
  path.counters.packets = path.counters.dropped = path.counters.lookups = 0;
  const t0 = process.hrtime.bigint();
  const r = PcapReader.open(capture);
  const batch = new PacketBatch();
  for (let n = r.nextBatch(batch); n > 0; n = r.nextBatch(batch)) {
    const data = r.data;
    for (let k = 0; k < n; k++) path.process(data, batch.offsets[k]!, batch.caplens[k]!, batch.origLens[k]!, r.linkType);
  }
  r.close();
  return { seconds: Number(process.hrtime.bigint() - t0) / 1e9, dropped: path.counters.dropped, packets: path.counters.packets, lookups: path.counters.lookups };
}

// The record walk plus the memory work of the list rules and nothing else:
// for every Ethernet/IPv4 frame, the list screen of both addresses and, where
// it cannot answer, a table lookup (what the packet path does for the list
// rules, without their rules, the decoding or the other rules' work between
// the reads). Returns the addresses found in some list, so that no read is dead.
export function listWorkPass(capture: string, table: AddressTable): { seconds: number; listed: number } {
  const screen = table.listScreen4;
  if (screen === null) throw new Error('the table has no IPv4 list screen');
  const rec = table.rec4;
  let listed = 0;
  const t0 = process.hrtime.bigint();
  const r = PcapReader.open(capture);
  const batch = new PacketBatch();
  for (let n = r.nextBatch(batch); n > 0; n = r.nextBatch(batch)) {
    const d = r.data;
    for (let k = 0; k < n; k++) {
      const o = batch.offsets[k]!;
      if (d[o + 12] !== 8 || d[o + 13] !== 0 || batch.caplens[k]! < 34) continue;
      const a = ((d[o + 26]! << 24) | (d[o + 27]! << 16) | (d[o + 28]! << 8) | d[o + 29]!) >>> 0;
      const b = ((d[o + 30]! << 24) | (d[o + 31]! << 16) | (d[o + 32]! << 8) | d[o + 33]!) >>> 0;
      if (screenHas(screen, a) && rec[table.lookup4(a) * 4 + REC_LISTS] !== 0) listed++;
      if (screenHas(screen, b) && rec[table.lookup4(b) * 4 + REC_LISTS] !== 0) listed++;
    }
  }
  r.close();
  return { seconds: Number(process.hrtime.bigint() - t0) / 1e9, listed };
}

// One pass over the capture in a fresh process, as `moat replay` makes it: the
// generated code starts unoptimised, and the first pass pays V8's warm-up.
// `warm` runs PacketPath.warmUp() first (replay does), and its time counts.
// `no-lists` loads the ruleset without its list rules (same lists and
// databases), warms up, and prints its best of three passes; in a process of
// its own so that a second packet program does not share the type feedback of
// PacketPath.process() with the full ruleset's passes.
const CHILD_SCRIPT = `
import { PacketPath } from ${JSON.stringify(new URL('../src/engine/index.js', import.meta.url).href)};
import { fullBundle, moatPass } from ${JSON.stringify(import.meta.url)};
const [mode, dir] = process.argv.slice(2);
const b = fullBundle(dir, mode === 'no-lists' ? 'no-lists.json' : 'rules.json');
const path = new PacketPath(b.evaluator, { table: b.table });
const t0 = process.hrtime.bigint();
if (mode !== 'cold') path.warmUp();
const warm = Number(process.hrtime.bigint() - t0) / 1e9;
let m = moatPass(dir + '/traffic.pcap', path);
let seconds = warm + m.seconds;
for (let i = 0; mode === 'no-lists' && i < 2; i++) {
  m = moatPass(dir + '/traffic.pcap', path);
  seconds = Math.min(seconds, m.seconds);
}
console.log(JSON.stringify({ seconds, dropped: m.dropped }));
`;

/**
 * The benchmark's full bundle: its rules, three lists and both GeoIP
 * databases, from the inputs in `dir`; `rules` names another rules file of
 * `dir` to load with the same lists and databases.
 */
export function fullBundle(dir: string, rules = 'rules.json'): LoadedBundle {
  return loadBundle({
    rules: [join(dir, rules)],
    lists: [
      { name: 'svc.malware', file: join(dir, 'malware.txt') },
      { name: 'svc.botnetcc', file: join(dir, 'botnetcc.txt') },
      { name: 'office_blocklist', file: join(dir, 'office.txt') },
    ],
    geoip: join(dir, 'country.mmdb'),
    asn: join(dir, 'asn.mmdb'),
  });
}

function inChild(dir: string, mode: 'warm' | 'cold' | 'no-lists'): { seconds: number; dropped: number } {
  const r = spawnSync(process.execPath, [join(dir, 'child.mjs'), mode, dir], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`child pass (${mode}) failed: ${r.stderr}`);
  return JSON.parse(r.stdout) as { seconds: number; dropped: number };
}

const fmt = (pps: number) => `${(pps / 1e6).toFixed(3).padStart(9)} M packets/s`;

/**
 * Writes the benchmark's inputs into `dir`: country.mmdb and asn.mmdb, three
 * list files (malware.txt, botnetcc.txt, office.txt), rules.json (the 50
 * rules), no-lists.json (the same without the three list rules), simple.json,
 * and traffic.pcap of `packets` frames. Returns the rules in both syntaxes.
 */
export function writePipelineInputs(dir: string, packets: number): RuleSpec[] {
  const rng = new Rng(2026);
  writeFileSync(join(dir, 'country.mmdb'), syntheticCountryDb(new Rng(1), { v4: 300_000, v6: 30_000 }));
  writeFileSync(join(dir, 'asn.mmdb'), syntheticAsnDb(new Rng(2), { v4: 100_000, v6: 10_000 }));
  const lists = ['malware', 'botnetcc', 'office'].map((n) => {
    const l = listFile(rng, LIST_SIZE);
    writeFileSync(join(dir, `${n}.txt`), l.text);
    return l;
  });
  const rules = ruleset(rng);
  writeFileSync(join(dir, 'rules.json'), JSON.stringify({ phase: 'network_transit', rules: rules.map((r, i) => ({ id: `r${i}`, action: 'block', expression: r.cf })) }));
  // The same rules without the three that read lists (same lists and databases loaded, same address table).
  writeFileSync(join(dir, 'no-lists.json'), JSON.stringify({ phase: 'network_transit', rules: rules.flatMap((r, i) => (r.cf.includes('$') ? [] : [{ id: `r${i}`, action: 'block', expression: r.cf }])) }));
  writeFileSync(join(dir, 'simple.json'), JSON.stringify({ rules: [{ action: 'block', expression: 'tcp.dstport in {22 23 3389} or ip.src in {10.0.0.0/8}' }] }));
  writeCapture(join(dir, 'traffic.pcap'), packets, rng, lists.flatMap((l) => l.sample));
  return rules;
}

/** Runs the pipeline benchmark and prints its figures. */
export function runPipelineBench(): void {
  const dir = mkdtempSync(join(tmpdir(), 'moat-pipeline-'));
  try {
    console.log(`\n## Packet path end to end (${PACKETS.toLocaleString('en-US')} packets, 50 rules, 3 x ${LIST_SIZE.toLocaleString('en-US')}-prefix lists, GeoIP country + ASN on both addresses)`);
    let t = Date.now();
    const rules = writePipelineInputs(dir, PACKETS);
    const capture = join(dir, 'traffic.pcap');
    console.log(`(inputs generated in ${((Date.now() - t) / 1000).toFixed(1)} s)`);

    t = Date.now();
    const full = fullBundle(dir);
    console.log(`bundle loaded (lists, GeoIP flattened, address table ${full.table.segments4.toLocaleString('en-US')} v4 + ${full.table.segments6.toLocaleString('en-US')} v6 segments, ${(full.table.byteLength / 2 ** 20).toFixed(1)} MiB, 50 rules compiled) in ${((Date.now() - t) / 1000).toFixed(2)} s`);

    // The I/O floor: walk the records only; and the walk with the lists' memory work, alternating.
    let best = Infinity;
    let listWork = { seconds: Infinity, listed: 0 };
    for (let round = 0; round < 3; round++) {
      const lw = listWorkPass(capture, full.table);
      if (lw.listed === 0) throw new Error('the list work found no listed address');
      if (lw.seconds < listWork.seconds) listWork = lw;
      const t0 = process.hrtime.bigint();
      const r = PcapReader.open(capture);
      const batch = new PacketBatch();
      let x = 0;
      for (let n = r.nextBatch(batch); n > 0; n = r.nextBatch(batch)) for (let k = 0; k < n; k++) x ^= r.data[batch.offsets[k]! + 12]!;
      r.close();
      best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
      if (x === 0.5) console.log('');
    }
    const bare = PACKETS / best;

    // With packet programs (the default) and without, alternating.
    const path = new PacketPath(full.evaluator, { table: full.table });
    const noProgramPath = new PacketPath(full.evaluator, { table: full.table, programs: false });
    let moat = { seconds: Infinity, dropped: 0, packets: 0, lookups: 0 };
    let noProgram = { seconds: Infinity, dropped: 0, packets: 0, lookups: 0 };
    for (let round = 0; round < 3; round++) {
      const m = moatPass(capture, path);
      if (m.seconds < moat.seconds) moat = m;
      const p = moatPass(capture, noProgramPath);
      if (p.seconds < noProgram.seconds) noProgram = p;
    }
    const moatPps = PACKETS / moat.seconds;
    if (noProgram.dropped !== moat.dropped) throw new Error(`without packet programs ${noProgram.dropped} packets were dropped, with them ${moat.dropped}`);

    // The first pass of a fresh process, with and without warm-up, alternating.
    writeFileSync(join(dir, 'child.mjs'), CHILD_SCRIPT);
    let warmFirst = Infinity;
    let coldFirst = Infinity;
    for (let round = 0; round < 2; round++) {
      const w = inChild(dir, 'warm');
      const c = inChild(dir, 'cold');
      if (w.dropped !== moat.dropped || c.dropped !== moat.dropped) throw new Error(`a first pass dropped ${w.dropped} / ${c.dropped} packets, the steady one ${moat.dropped}`);
      warmFirst = Math.min(warmFirst, w.seconds);
      coldFirst = Math.min(coldFirst, c.seconds);
    }
    // The ruleset without its list rules (see CHILD_SCRIPT).
    const noListRules = [0, 1].map(() => inChild(dir, 'no-lists')).reduce((a, b) => (b.seconds < a.seconds ? b : a));
    if (noListRules.dropped === 0 || noListRules.dropped >= moat.dropped) throw new Error(`without its list rules the ruleset dropped ${noListRules.dropped} packets, with them ${moat.dropped}`);

    const simple = loadBundle({ rules: [join(dir, 'simple.json')] });
    const simplePath = new PacketPath(simple.evaluator, {});
    let simpleBest = { seconds: Infinity, dropped: 0, packets: 0 };
    for (let round = 0; round < 3; round++) {
      const m = moatPass(capture, simplePath);
      if (m.seconds < simpleBest.seconds) simpleBest = m;
    }

    console.log(`bare record walk (Moat reader, I/O floor)  ${fmt(bare)}`);
    console.log(`Moat, 50 rules + lists + GeoIP             ${fmt(moatPps)}  (${moat.dropped.toLocaleString('en-US')} dropped; ${(moat.seconds * 1e9 / PACKETS).toFixed(0)} ns/packet; ${(moatPps / bare * 100).toFixed(0)}% of the walk rate; ${(moat.lookups / PACKETS).toFixed(2)} table lookups/packet)`);
    console.log(`Moat, same, first pass of a new process    ${fmt(PACKETS / warmFirst)}  (${(warmFirst * 1e9 / PACKETS).toFixed(0)} ns/packet, what \`moat replay\` of this file does, warm-up included; without warm-up: ${fmt(PACKETS / coldFirst).trim()})`);
    console.log(`Moat, same, without packet programs        ${fmt(PACKETS / noProgram.seconds)}  (${(noProgram.seconds * 1e9 / PACKETS).toFixed(0)} ns/packet)`);
    console.log(`Moat, same without its 3 list rules        ${fmt(PACKETS / noListRules.seconds)}  (${(noListRules.seconds * 1e9 / PACKETS).toFixed(0)} ns/packet: the list rules cost ${((moat.seconds - noListRules.seconds) * 1e9 / PACKETS).toFixed(0)} ns/packet, most of it waiting on memory: list screens and table lookups of uniformly random addresses)`);
    const listNs = (listWork.seconds - best) * 1e9 / PACKETS;
    const estimate = noListRules.seconds * 1e9 / PACKETS + listNs;
    console.log(`walk + the lists' memory work only         ${fmt(PACKETS / listWork.seconds)}  (${listNs.toFixed(0)} ns/packet over the walk in a tight loop, ${listWork.listed.toLocaleString('en-US')} listed addresses; added to the ruleset without list rules: ~${estimate.toFixed(0)} ns/packet, ${fmt(1e9 / estimate).trim()} if none of it overlapped)`);
    console.log(`Moat, simple rule                          ${fmt(PACKETS / simpleBest.seconds)}  (${simpleBest.dropped.toLocaleString('en-US')} dropped)`);

    const bpf = '(tcp dst port 22 or tcp dst port 23 or tcp dst port 3389) or src net 10.0.0.0/8';
    const td = run('tcpdump', ['-r', capture, '-w', '/dev/null', bpf]);
    if (td === null) console.log('tcpdump: not installed (apt-get install tcpdump)');
    else {
      const tdPps = PACKETS / td.seconds;
      console.log(`tcpdump -r, same simple rule as BPF        ${fmt(tdPps)}  (Moat simple rule: ${(PACKETS / simpleBest.seconds / tdPps).toFixed(2)}x tcpdump; full ruleset: ${(moatPps / tdPps).toFixed(2)}x)`);
    }

    const wsFilter = rules.filter((r) => r.ws !== null).map((r) => `(${r.ws})`).join(' or ');
    const prefix = join(dir, 'prefix.pcap');
    const w = openPcapFile(prefix);
    const r = PcapReader.open(capture);
    for (let i = 0; i < TSHARK_PACKETS && r.next(); i++) w.writePacket(r.data.subarray(r.offset, r.offset + r.caplen), r.tsSec, r.tsNsec, r.origLen);
    r.close();
    w.close();
    const ts = run('tshark', ['-n', '-o', `uat:maxmind_db_paths:"${dir}"`, '-r', prefix, '-Y', wsFilter, '-T', 'fields', '-e', 'frame.number']);
    if (ts === null) console.log('tshark: not installed (apt-get install tshark)');
    else if (!ts.ok) console.log(`tshark failed: ${ts.out.slice(0, 300)}`);
    else {
      const tsPps = TSHARK_PACKETS / ts.seconds;
      console.log(`tshark -Y, ${rules.filter((x) => x.ws !== null).length} of the 50 rules (no lists), ${TSHARK_PACKETS.toLocaleString('en-US')} pkts ${fmt(tsPps)}  (Moat: ${(moatPps / tsPps).toFixed(0)}x tshark)`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
