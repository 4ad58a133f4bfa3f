// Capture reader throughput: a 1,000,000-packet pcap of 60-100 byte Ethernet frames
// (written with Moat's pcap writer) and the same packets as pcapng, read in the same
// run by
//   * Moat's PcapReader, walking every record (touching a byte of each packet);
//   * a bare loop walking the record headers of the pcap already in memory (the
//     floor for any reader: no I/O, no timestamp conversion);
//   * `tcpdump -r f -w /dev/null` (libpcap read + write), if installed;
//   * `tshark -n -r f -T fields -e frame.number`, if installed, on a 100,000-packet
//     prefix only: tshark dissects every frame and keeps per-frame state, so a
//     million packets takes long and a lot of memory. Its rate is per packet of the prefix.
// Knob: MOAT_BENCH_PCAP_PACKETS (default 1000000).

import { spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openPcapFile } from '../src/capture/index.js';
import { PcapReader } from '../src/capture/pcap-reader.js';
import { PcapngBuilder } from '../test/support/frame-builder-extra.js';
import { TCP, buildFrame } from '../test/support/packet-builder.js';

const PACKETS = Number(process.env.MOAT_BENCH_PCAP_PACKETS ?? 1_000_000);
const TSHARK_PACKETS = Math.min(100_000, PACKETS);
const ROUNDS = 5;

/** A 100-byte Ethernet/IPv4/TCP frame; packet i is its first 60 + i % 41 bytes. */
const FRAME = buildFrame({
  ip: { version: 4, src: '10.0.0.1', dst: '10.0.0.2', ttl: 64 },
  l4: { kind: 'tcp', srcPort: 40000, dstPort: 443, flags: TCP.ACK, payload: new Uint8Array(46).fill(0x5a) },
});
const FRAME_VIEW = new DataView(FRAME.buffer, FRAME.byteOffset, FRAME.byteLength);
const frameLength = (i: number): number => 60 + (i % 41);

/** Makes packet i a different flow (TCP source port) and sequence number, so tshark's TCP analysis sees many short flows rather than one flow of retransmissions. Checksums are left stale. */
function vary(i: number): Uint8Array {
  const port = 1024 + (i % 50_000);
  FRAME[34] = port >> 8;
  FRAME[35] = port & 0xff;
  FRAME_VIEW.setUint32(38, i >>> 0);
  return FRAME.subarray(0, frameLength(i));
}

export function writePcap(path: string, count: number): void {
  const w = openPcapFile(path, { batchSize: 1 << 20 });
  for (let i = 0; i < count; i++) w.writePacket(vary(i), 1_700_000_000 + Math.floor(i / 10_000), (i % 10_000) * 100_000);
  w.close();
}

export function writePcapng(path: string, count: number): void {
  const head = new PcapngBuilder();
  head.section();
  head.addInterface({ linkType: 1, snapLen: 262_144, tsresol: 9 });
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, head.toBuffer());
    const batch = Buffer.alloc(1 << 20);
    let used = 0;
    for (let i = 0; i < count; i++) {
      const len = frameLength(i);
      const total = 32 + ((len + 3) & ~3);
      if (used + total > batch.length) {
        writeSync(fd, batch, 0, used);
        used = 0;
      }
      const ticks = 1_700_000_000_000_000_000 + i * 1000; // ns; exact enough for a benchmark
      batch.writeUInt32LE(6, used);
      batch.writeUInt32LE(total, used + 4);
      batch.writeUInt32LE(0, used + 8);
      batch.writeUInt32LE(Math.floor(ticks / 2 ** 32), used + 12);
      batch.writeUInt32LE(ticks % 2 ** 32, used + 16);
      batch.writeUInt32LE(len, used + 20);
      batch.writeUInt32LE(len, used + 24);
      batch.set(vary(i), used + 28);
      batch.fill(0, used + 28 + len, used + total - 4);
      batch.writeUInt32LE(total, used + total - 4);
      used += total;
    }
    writeSync(fd, batch, 0, used);
  } finally {
    closeSync(fd);
  }
}

let sink = 0;

/** Best of ROUNDS runs of fn (which returns the packets it walked), in ns. */
function best(fn: () => number, expected: number, what: string): number {
  let bestNs = Infinity;
  for (let r = 0; r < ROUNDS; r++) {
    const t0 = process.hrtime.bigint();
    const n = fn();
    const ns = Number(process.hrtime.bigint() - t0);
    if (n !== expected) throw new Error(`${what}: walked ${n} packets, expected ${expected}`);
    if (ns < bestNs) bestNs = ns;
  }
  return bestNs;
}

function readWithMoat(path: string): number {
  const r = PcapReader.open(path);
  let acc = 0;
  try {
    while (r.next()) acc = (acc + r.data[r.offset + 12]! + r.caplen + r.tsNsec) | 0;
  } finally {
    r.close();
  }
  sink ^= acc;
  return r.packets;
}

function bareWalk(file: Buffer): number {
  let n = 0;
  let acc = 0;
  for (let off = 24; off + 16 <= file.length; ) {
    const incl = file.readUInt32LE(off + 8);
    acc = (acc + file[off + 16 + 12]!) | 0;
    off += 16 + incl;
    n++;
  }
  sink ^= acc;
  return n;
}

function which(tool: string): string | undefined {
  const r = spawnSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() || undefined : undefined;
}

/** Wall time in ns of running a command to completion (best of `rounds`), or an error text. */
function timeCommand(cmd: string, args: string[], rounds: number): number | string {
  let bestNs = Infinity;
  for (let r = 0; r < rounds; r++) {
    const t0 = process.hrtime.bigint();
    const res = spawnSync(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8', env: { ...process.env, LC_ALL: 'C' } });
    const ns = Number(process.hrtime.bigint() - t0);
    if (res.status !== 0) return `failed (${res.status}): ${(res.stderr ?? '').trim().split('\n').pop()}`;
    if (ns < bestNs) bestNs = ns;
  }
  return bestNs;
}

function line(name: string, packets: number, ns: number | string, note = ''): void {
  if (typeof ns === 'string') {
    console.log(`${name.padEnd(50)}  ${ns}`);
    return;
  }
  const pps = (packets * 1e9) / ns;
  console.log(`${name.padEnd(50)}  ${(pps / 1e6).toFixed(2).padStart(6)} M pkt/s  ${(ns / packets).toFixed(0).padStart(5)} ns/pkt  ${(ns / 1e6).toFixed(0).padStart(6)} ms${note}`);
}

/** Prints packets/s of Moat's reader, a bare header walk, tcpdump and tshark on the same file. */
export async function runPcapReaderBench(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'moat-bench-pcap-'));
  try {
    const pcap = join(dir, 'bench.pcap');
    const pcapng = join(dir, 'bench.pcapng');
    const prefix = join(dir, 'bench-prefix.pcap');
    writePcap(pcap, PACKETS);
    writePcapng(pcapng, PACKETS);
    writePcap(prefix, TSHARK_PACKETS);
    const mb = (p: string): string => `${(statSync(p).size / 1e6).toFixed(1)} MB`;
    console.log(`\n## pcap reader (${PACKETS.toLocaleString('en-US')} packets of 60-100 bytes; pcap ${mb(pcap)}, pcapng ${mb(pcapng)}; best of ${ROUNDS})`);

    const rss0 = process.memoryUsage().rss;
    line('moat PcapReader, pcap (every record)', PACKETS, best(() => readWithMoat(pcap), PACKETS, 'pcap'));
    line('moat PcapReader, pcapng (every block)', PACKETS, best(() => readWithMoat(pcapng), PACKETS, 'pcapng'));
    const rss1 = process.memoryUsage().rss;

    const inMemory = readFileSync(pcap);
    line('bare header walk, pcap in memory', PACKETS, best(() => bareWalk(inMemory), PACKETS, 'bare walk'));

    const tcpdump = which('tcpdump');
    if (tcpdump) line('tcpdump -r f -w /dev/null', PACKETS, timeCommand(tcpdump, ['-r', pcap, '-w', '/dev/null'], 2), '  (process wall time)');
    else line('tcpdump -r f -w /dev/null', PACKETS, 'not installed (apt-get install -y tcpdump)');

    const tshark = which('tshark');
    const tsharkName = `tshark -n -T fields -e frame.number (${TSHARK_PACKETS / 1000}k prefix)`;
    if (tshark) line(tsharkName, TSHARK_PACKETS, timeCommand(tshark, ['-n', '-r', prefix, '-T', 'fields', '-e', 'frame.number'], 1), '  (process wall time, prefix only)');
    else line(tsharkName, TSHARK_PACKETS, 'not installed (apt-get install -y tshark)');

    console.log(`RSS while reading with moat: ${(rss0 / 2 ** 20).toFixed(0)} MiB before, ${(rss1 / 2 ** 20).toFixed(0)} MiB after (4 MiB read buffer)`);
    if (sink === 0.5) console.log('');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
