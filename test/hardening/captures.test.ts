// Issue #16 item 12, capture files: the capture corpora the project has (the
// native fixtures) and generates (frame variants of test/support, as pcap and
// pcapng) mutated deterministically (truncations at every record or block
// boundary and at seeded random offsets, bit flips in the file, record and
// block headers and in the Ethernet/VLAN/IP/TCP headers of the frames,
// oversize and zero lengths), then read by the pcap reader and judged by the
// packet path in process, and a sample by `moat replay` as a process under a
// memory cap. Every input must end cleanly or with a coded capture error that
// names the file and a byte offset, in bounded time and memory; where the
// mutation determines the answer (a cut, a flipped frame byte, a length the
// file cannot hold), the answer is checked against what the test computes
// from the unmutated file, not from the reader.
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildPcap, PacketBatch, PcapReader } from '../../src/capture/index.js';
import { compileBundle, PacketPath, tableLists, toRuleset, type Evaluator } from '../../src/engine/index.js';
import { MoatError } from '../../src/errors/index.js';
import { BIN, ROOT, ensureBuilt } from '../support/cli.js';
import { Rng } from '../support/diff-generator.js';
import { PcapngBuilder } from '../support/frame-builder-extra.js';
import { frameVariants } from '../support/frame-variants.js';
import { geoByEightTable } from '../support/geo-by-eight.js';

const SEED = 16_012;
const dir = mkdtempSync(join(tmpdir(), 'moat-hardening-captures-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// ---------------------------------------------------------------- the corpus

interface Corpus {
  name: string;
  bytes: Buffer;
}

function corpus(): Corpus[] {
  const native = join(ROOT, 'native-fixtures');
  const out: Corpus[] = readdirSync(native)
    .filter((f) => /\.pcap(ng)?$/.test(f))
    .sort()
    .map((f) => ({ name: f, bytes: readFileSync(join(native, f)) }));
  // Generated frames of every kind the decoder must take or refuse (VLAN, fragments,
  // extension headers, padding, cuts): a sample of them, in a pcap and a pcapng.
  const rng = new Rng(SEED);
  const variants = frameVariants(rng.fork());
  const sample = Array.from({ length: 160 }, () => rng.pick(variants));
  out.push({ name: 'generated.pcap', bytes: buildPcap(sample.map((data, i) => ({ data, seconds: 1_700_000_000 + i, nanoseconds: i * 1000 })), { resolution: 'ns' }) });
  const ng = new PcapngBuilder().section();
  ng.addInterface({ linkType: 1, tsresol: 9 });
  for (const [i, data] of sample.slice(0, 80).entries()) {
    if (i % 17 === 5) ng.simplePacket(data);
    else ng.enhancedPacket(0, data, { seconds: 1_700_000_000 + i, nanoseconds: i });
    if (i % 40 === 39) ng.interfaceStatistics(0, { seconds: 1_700_000_100 }, i + 1, 0);
  }
  out.push({ name: 'generated.pcapng', bytes: ng.toBuffer() });
  return out;
}

/**
 * One record or block of a known-good file, found by walking it here (not by the
 * reader under test): where it starts, how long it is, the packets before it, and
 * where a packet's frame bytes and length fields are.
 */
interface Unit {
  offset: number;
  length: number;
  kind: 'pcap-header' | 'record' | 'shb' | 'idb' | 'epb' | 'pb' | 'spb' | 'other-block';
  packetsBefore: number;
  le: boolean;
  /** Frame bytes of a packet unit: [dataAt, dataAt + caplen). */
  dataAt: number;
  caplen: number;
  /** Length fields whose oversize values the file cannot hold: the reader must refuse the unit. */
  mustFailLengths: number[];
}

function walk(b: Buffer): Unit[] {
  const units: Unit[] = [];
  const u32 = (o: number, le: boolean): number => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
  let packets = 0;
  if (b.readUInt32BE(0) !== 0x0a0d0d0a) {
    const le = b[0] === 0xd4 || b[0] === 0x4d;
    units.push({ offset: 0, length: 24, kind: 'pcap-header', packetsBefore: 0, le, dataAt: 0, caplen: 0, mustFailLengths: [] });
    for (let o = 24; o < b.length; ) {
      const incl = u32(o + 8, le);
      units.push({ offset: o, length: 16 + incl, kind: 'record', packetsBefore: packets++, le, dataAt: o + 16, caplen: incl, mustFailLengths: [o + 8] });
      o += 16 + incl;
    }
    return units;
  }
  let le = true;
  for (let o = 0; o < b.length; ) {
    if (b.readUInt32BE(o) === 0x0a0d0d0a) le = b.readUInt32LE(o + 8) === 0x1a2b3c4d;
    const type = u32(o, le);
    const len = u32(o + 4, le);
    const kind = type === 0x0a0d0d0a ? 'shb' : type === 1 ? 'idb' : type === 6 ? 'epb' : type === 2 ? 'pb' : type === 3 ? 'spb' : 'other-block';
    const unit: Unit = { offset: o, length: len, kind, packetsBefore: packets, le, dataAt: 0, caplen: 0, mustFailLengths: [o + 4] };
    if (kind === 'epb' || kind === 'pb') {
      unit.dataAt = o + 28;
      unit.caplen = u32(o + 20, le);
      unit.mustFailLengths.push(o + 20);
    } else if (kind === 'spb') {
      unit.dataAt = o + 12;
      unit.caplen = Math.min(u32(o + 8, le), len - 16);
    }
    if (unit.dataAt !== 0) packets++;
    units.push(unit);
    o += len;
  }
  return units;
}

// ---------------------------------------------------------------- mutations

interface Mutation {
  what: string;
  bytes: Buffer;
  /** The answer the mutation determines, when it does. */
  expect?: { packets: number; error?: { code: number; at: number } | undefined; sameFramesBut?: number };
  /** Packets of the original that must come back unchanged before anything else happens. */
  prefix: number;
}

const OVERSIZE = [0xffff_ffff, 0x8000_0000, 64 * 1024 * 1024 + 1, 64 * 1024 * 1024, 262_145];

function unitAt(units: Unit[], at: number): Unit {
  let u = units[0]!;
  for (const v of units) if (v.offset <= at) u = v;
  return u;
}

function* mutations(c: Corpus, rng: Rng): Generator<Mutation> {
  const b = c.bytes;
  const units = walk(b);
  const total = units.at(-1)!.packetsBefore + (units.at(-1)!.dataAt !== 0 ? 1 : 0);
  const cut = (n: number, why: string): Mutation => {
    const u = unitAt(units, n);
    if (n === 0) return { what: `${why} at 0`, bytes: b.subarray(0, 0), prefix: 0, expect: { packets: 0, error: { code: 3002, at: 0 } } };
    // At a boundary the file ends cleanly after the units before it; inside a unit it is cut short there.
    const inside = n > u.offset;
    return { what: `${why} at ${n}`, bytes: b.subarray(0, n), prefix: u.packetsBefore, expect: { packets: u.packetsBefore, error: inside ? { code: 3002, at: u.offset } : undefined } };
  };
  // Truncations: at every record or block boundary, one byte either side, and at random offsets.
  for (const u of units) {
    for (const n of [u.offset, u.offset + 1, u.offset + u.length - 1]) if (n < b.length) yield cut(n, 'cut at a boundary');
  }
  for (let i = 0; i < 24; i++) yield cut(rng.int(0, b.length - 1), 'cut at random');
  const flip = (at: number): Buffer => {
    const m = Buffer.from(b);
    m[at]! ^= 1 << rng.int(0, 7);
    return m;
  };
  for (const u of units) {
    // Bit flips in the file, record and block headers (pcapng: type, length, fixed fields, trailing length).
    const header = u.kind === 'pcap-header' ? 24 : u.kind === 'record' ? 16 : u.kind === 'epb' || u.kind === 'pb' ? 28 : u.kind === 'spb' ? 12 : Math.min(u.length, 32);
    const places = Array.from({ length: Math.min(header, 6) }, () => u.offset + rng.int(0, header - 1));
    if (u.kind !== 'pcap-header' && u.kind !== 'record') places.push(u.offset + u.length - 1 - rng.int(0, 3));
    for (const at of places) yield { what: `bit flip in the ${u.kind} header at byte ${at}`, bytes: flip(at), prefix: u.packetsBefore };
    // Bit flips in the frame's Ethernet, VLAN, IP and TCP/UDP headers: the file's structure is intact,
    // so every packet comes back, and only this one's bytes differ.
    if (u.dataAt !== 0 && u.caplen > 0) {
      for (let k = 0; k < 3; k++) {
        const at = u.dataAt + rng.int(0, Math.min(u.caplen, 14 + 8 + 60 + 60) - 1);
        yield { what: `bit flip in frame ${u.packetsBefore} at byte ${at}`, bytes: flip(at), prefix: u.packetsBefore, expect: { packets: total, sameFramesBut: u.packetsBefore } };
      }
    }
    // Lengths no file this size can hold, and zero.
    for (const at of u.mustFailLengths) {
      for (const v of [...OVERSIZE, b.length + 1]) {
        const m = Buffer.from(b);
        if (u.le) m.writeUInt32LE(v, at);
        else m.writeUInt32BE(v, at);
        // Error code not fixed: too long for the limit (3003), for the block (3004) or for the file (3002).
        yield { what: `length ${v} at byte ${at} (${u.kind})`, bytes: m, prefix: u.packetsBefore, expect: { packets: u.packetsBefore, error: { code: 0, at: u.offset } } };
      }
    }
    for (const at of [...u.mustFailLengths, ...(u.kind === 'record' ? [u.offset + 12] : [])]) {
      const m = Buffer.from(b);
      m.writeUInt32LE(0, at);
      yield { what: `zero length at byte ${at} (${u.kind})`, bytes: m, prefix: u.packetsBefore };
    }
  }
}

// ---------------------------------------------------------------- running one input

const table = geoByEightTable({ bad: ['11.0.0.0/9', '12.1.2.0/24', '2001:db8::/48'], office: ['13.0.0.0/10', '14.5.0.0/16'] });
const RULES = [
  { action: 'log', expression: 'ip.src in $office' },
  { action: 'skip', expression: 'tcp.flags.ack and tcp.srcport == 443', action_parameters: { ruleset: 'current' } },
  { action: 'block', expression: 'tcp.dstport in {22 23 3389} and not tcp.flags.ack' },
  { action: 'block', expression: 'udp.dstport == 53 and ip.len > 512' },
  { action: 'block', expression: 'ip.src in $bad or ip.dst.country in {"KP" "SY"}' },
  { action: 'block', expression: 'icmp.type == 8 and ip.ttl < 5' },
  { action: 'block', expression: 'ip.src.asnum == 64512 and ip.hdr_len > 5' },
];

function compile(): Evaluator {
  return compileBundle({ account: toRuleset({ name: 'a', phase: 'network_transit', rules: RULES }), lists: tableLists(table) });
}

interface Outcome {
  packets: number;
  error: MoatError | undefined;
  frames: Buffer[];
}

interface Tally {
  inputs: number;
  packets: number;
  clean: number;
  coded: Map<number, number>;
  crashes: string[];
  wrong: string[];
  slowestMs: number;
}

// The two packet paths that must agree: the bundle's packet program, and decoding into the context.
const withProgram = compile();
const without = compile();
const pathA = new PacketPath(withProgram, { table });
const pathB = new PacketPath(without, { table, programs: false });

/** Reads with next() through a 64-byte buffer that must grow, judging every packet twice. */
function readOne(file: string, size: number, tally: Tally, what: string): Outcome {
  const frames: Buffer[] = [];
  let error: MoatError | undefined;
  let r: PcapReader | undefined;
  try {
    r = PcapReader.open(file, { bufferSize: 64 });
    while (r.next()) {
      frames.push(Buffer.from(r.data.subarray(r.offset, r.offset + r.caplen)));
      const a = pathA.process(r.data, r.offset, r.caplen, r.origLen, r.linkType);
      const b = pathB.process(r.data, r.offset, r.caplen, r.origLen, r.linkType);
      if (a !== b || pathA.lastRule !== pathB.lastRule) {
        tally.wrong.push(`${what}: packet ${frames.length}: packet program says ${a ? 'drop' : 'pass'} (rule ${pathA.lastRule}), the decoder ${b ? 'drop' : 'pass'} (rule ${pathB.lastRule})`);
      }
    }
  } catch (err) {
    if (!(err instanceof MoatError)) throw err;
    error = err;
  } finally {
    // The buffer grows only for a record the file holds: never past twice the file.
    if (r !== undefined && r.bufferSize > Math.max(64, 2 * size)) tally.wrong.push(`${what}: buffer grew to ${r.bufferSize} bytes for a ${size}-byte file`);
    r?.close();
  }
  return { packets: frames.length, error, frames };
}

/** Reads with nextBatch(), as `moat replay` does: the count and the error must be next()'s. */
function readBatched(file: string): { packets: number; error: MoatError | undefined } {
  const batch = new PacketBatch(32);
  let packets = 0;
  let r: PcapReader | undefined;
  try {
    r = PcapReader.open(file, { bufferSize: 256 });
    for (let n = r.nextBatch(batch); n > 0; n = r.nextBatch(batch)) packets += n;
    return { packets, error: undefined };
  } catch (err) {
    if (!(err instanceof MoatError)) throw err;
    return { packets, error: err };
  } finally {
    r?.close();
  }
}

function check(file: string, m: Mutation, original: Buffer[], tally: Tally): Outcome | undefined {
  const what = `${m.what} of ${file.slice(dir.length + 1)}`;
  writeFileSync(file, m.bytes);
  tally.inputs++;
  const t0 = performance.now();
  let got: Outcome;
  let batched: { packets: number; error: MoatError | undefined };
  try {
    got = readOne(file, m.bytes.length, tally, what);
    batched = readBatched(file);
  } catch (err) {
    tally.crashes.push(`${what}: ${(err as Error).stack ?? String(err)}`);
    return undefined;
  }
  tally.slowestMs = Math.max(tally.slowestMs, performance.now() - t0);
  tally.packets += got.packets;
  const wrong = (why: string): void => void tally.wrong.push(`${what}: ${why}`);
  const e = got.error;
  if (e === undefined) tally.clean++;
  else {
    tally.coded.set(e.code, (tally.coded.get(e.code) ?? 0) + 1);
    if (e.code < 3001 || e.code > 3006) wrong(`error ${e.code} is not a capture-file error: ${e.message}`);
    if (!e.message.startsWith(`${file}: `)) wrong(`the error does not start with the file: ${e.message}`);
    const at = /at byte (\d+)/.exec(e.message);
    if (at === null || Number(at[1]) > m.bytes.length) wrong(`the error names no byte of the file: ${e.message}`);
  }
  if (batched.packets !== got.packets || batched.error?.message !== e?.message) {
    wrong(`nextBatch() read ${batched.packets} packets and ${batched.error?.message ?? 'no error'}; next() ${got.packets} and ${e?.message ?? 'no error'}`);
  }
  for (let i = 0; i < m.prefix; i++) {
    if (got.frames[i] === undefined || !got.frames[i]!.equals(original[i]!)) {
      wrong(`packet ${i + 1}, before the damage, is ${got.frames[i] === undefined ? 'missing' : 'changed'}`);
      break;
    }
  }
  const x = m.expect;
  if (x !== undefined) {
    if (got.packets !== x.packets) wrong(`${got.packets} packets, expected ${x.packets} (${e?.message ?? 'no error'})`);
    if (x.error === undefined && e !== undefined) wrong(`expected a clean end, got ${e.message}`);
    if (x.error !== undefined) {
      if (e === undefined) wrong(`expected an error at byte ${x.error.at}, got a clean end`);
      else if ((x.error.code !== 0 && e.code !== x.error.code) || !new RegExp(` at byte ${x.error.at}\\b`).test(e.message)) wrong(`expected error ${x.error.code || '3002-3004'} at byte ${x.error.at}, got ${e.code}: ${e.message}`);
    }
    if (x.sameFramesBut !== undefined) {
      for (const [i, f] of got.frames.entries()) {
        if (i !== x.sameFramesBut && !f.equals(original[i]!)) {
          wrong(`packet ${i + 1} changed by a flip in packet ${x.sameFramesBut + 1}`);
          break;
        }
      }
    }
  }
  return got;
}

// ---------------------------------------------------------------- the suites

describe('mutated capture files', () => {
  // The sample for `moat replay`: each input, and what the in-process run answered.
  const inputs: Array<{ file: string; m: Mutation; packets: number; errorLine: string | undefined }> = [];

  it(`read and judged in process: a result or a coded error naming the file and byte, bounded time and buffer (seed ${SEED})`, () => {
    const rng = new Rng(SEED);
    const tally: Tally = { inputs: 0, packets: 0, clean: 0, coded: new Map(), crashes: [], wrong: [], slowestMs: 0 };
    const files = corpus();
    for (const c of files) {
      const file = join(dir, c.name);
      writeFileSync(file, c.bytes);
      const original = readOne(file, c.bytes.length, tally, c.name);
      // The unmutated corpus reads cleanly, as many packets as the walk here found.
      const units = walk(c.bytes);
      expect(original.error, c.name).toBeUndefined();
      expect(original.packets, c.name).toBe(units.filter((u) => u.dataAt !== 0).length);
      for (const m of mutations(c, rng)) {
        const got = check(file, m, original.frames, tally);
        // Every 571st input (a prime: the kinds of mutation vary) again as `moat replay` below, in its own file.
        if (got !== undefined && tally.inputs % 571 === 7) {
          const copy = join(dir, `${inputs.length}-${c.name}`);
          writeFileSync(copy, m.bytes);
          const errorLine = got.error === undefined ? undefined : `moat: error ${got.error.code}: ${got.error.message.replace(file, copy)}`;
          inputs.push({ file: copy, m, packets: got.packets, errorLine });
        }
      }
    }
    // Agreement of the two paths is counted above; their counters must be the packets read.
    expect(pathA.counters.packets).toBe(pathA.counters.passed + pathA.counters.dropped);
    const coded = [...tally.coded].sort(([a], [b]) => a - b).map(([c, n]) => `${c}: ${n}`).join(', ');
    console.log(
      `captures in process: ${files.length} files, ${tally.inputs} mutated inputs, ${tally.packets} packets judged twice; ` +
        `${tally.clean} clean, coded errors {${coded}}; crashes ${tally.crashes.length}, hangs ${tally.slowestMs > 2000 ? 1 : 0} (slowest ${tally.slowestMs.toFixed(1)} ms), wrong answers ${tally.wrong.length}`,
    );
    expect(tally.crashes.slice(0, 5)).toEqual([]);
    expect(tally.wrong.slice(0, 10)).toEqual([]);
    expect(tally.slowestMs).toBeLessThan(2000);
    // Both sides of every expectation are reached.
    expect(tally.clean).toBeGreaterThan(500);
    for (const code of [3001, 3002, 3003, 3004, 3005]) expect(tally.coded.get(code) ?? 0, `error ${code}`).toBeGreaterThan(0);
  }, 120_000);

  it('a sample through `moat replay` as a process: exit 0 or 1, one coded line, the same answer, under 20 s and a 2 GiB address-space cap', async () => {
    ensureBuilt();
    expect(inputs.length).toBeGreaterThan(12);
    const rules = join(dir, 'rules.json');
    // The rules that need no list or GeoIP data (those would print a 5011 warning).
    writeFileSync(rules, JSON.stringify({ rules: RULES.filter((r) => !/\$|country|asnum/.test(r.expression)) }));
    const results = { runs: 0, crashes: 0, hangs: 0, wrong: [] as string[], maxRssKiB: 0 };
    const run = async ({ file, m, packets, errorLine }: (typeof inputs)[number]): Promise<void> => {
      const timing = `${file}.time`;
      // prlimit caps the address space (an allocation past it would crash the run); time reports the peak RSS.
      const child = spawn('/usr/bin/time', ['-o', timing, '-f', '%M', 'prlimit', `--as=${2 * 1024 ** 3}`, process.execPath, BIN, 'replay', file, '--rules', rules, '--json'], { cwd: ROOT });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)));
      clearTimeout(timer);
      results.runs++;
      const what = `moat replay of ${m.what} (${file})`;
      if (code === null) {
        results.hangs++;
        return;
      }
      results.maxRssKiB = Math.max(results.maxRssKiB, Number(readFileSync(timing, 'utf8').trim().split('\n').at(-1)));
      const lines = stderr.split('\n').filter((l) => l !== '');

      if (/\n\s+at |Error:|Aborted|Segmentation/.test(stderr) || (code !== 0 && code !== 1)) {
        results.crashes++;
        results.wrong.push(`${what}: exit ${code}: ${stderr.slice(0, 400)}`);
        return;
      }
      const expected = errorLine === undefined ? [] : [errorLine];
      if (JSON.stringify(lines) !== JSON.stringify(expected) || code !== (errorLine === undefined ? 0 : 1)) {
        results.wrong.push(`${what}: exit ${code}, ${JSON.stringify(lines)}; expected ${JSON.stringify(expected)}`);
      }
      const summary = JSON.parse(stdout) as { packets: number };
      if (summary.packets !== packets) results.wrong.push(`${what}: ${summary.packets} packets, in process ${packets}`);
    };
    // Two at a time: the machine has two cores.
    const queue = [...inputs];
    await Promise.all([0, 1].map(async () => {
      for (let next = queue.shift(); next !== undefined; next = queue.shift()) await run(next);
    }));
    console.log(
      `captures through moat replay: ${results.runs} runs, crashes ${results.crashes}, hangs ${results.hangs}, wrong answers ${results.wrong.length}, peak RSS ${(results.maxRssKiB / 1024).toFixed(0)} MiB`,
    );
    expect(results.wrong.slice(0, 5)).toEqual([]);
    expect(results.hangs).toBe(0);
    expect(results.runs).toBe(inputs.length);
    // The reader's buffer is 4 MiB and grows only for what the file holds; node itself is ~60-90 MiB.
    expect(results.maxRssKiB).toBeLessThan(256 * 1024);
  }, 120_000);
});
