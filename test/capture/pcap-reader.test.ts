// Tests of the capture reader: every fixture of native-fixtures/ against its manifest
// and against tshark, damaged files (every cut point of a small pcap and pcapng, bad
// magic, absurd lengths, malformed blocks, undeclared interfaces, empty and unreadable
// files), buffer growth for a big record, bounded memory on a file much bigger than
// the buffer, and the BigInt-free timestamp conversion against a BigInt reference for
// every if_tsresol.
//
// Without tshark the tshark comparison is skipped, except on CI (CI=true) where it fails.

import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { LINKTYPE, buildPcap, encodePcapGlobalHeader, openPcapFile } from '../../src/capture/index.js';
import {
  PacketBatch,
  PCAP_READER_BUFFER_SIZE,
  PcapReader,
  readCapture,
  type PcapReaderOptions,
} from '../../src/capture/pcap-reader.js';
import { MoatError } from '../../src/errors/index.js';
import { PcapngBuilder, ticksToTime, type ExpectedPacket } from '../support/frame-builder-extra.js';
import { buildFixtures, type Manifest, type ManifestRecord } from '../support/make-fixtures.js';
import { buildFrame } from '../support/packet-builder.js';
import { Rng } from '../support/random.js';
import { findTshark } from '../support/tshark.js';

const FIXTURES = fileURLToPath(new URL('../../native-fixtures/', import.meta.url));
const manifest = JSON.parse(readFileSync(join(FIXTURES, 'manifest.json'), 'utf8')) as Manifest;
const TSHARK = findTshark();

const dir = mkdtempSync(join(tmpdir(), 'moat-pcap-reader-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let fileCounter = 0;
/** Writes bytes to a fresh temporary file and returns its path. */
function tempFile(bytes: Uint8Array, name = 'capture'): string {
  const path = join(dir, `${name}-${fileCounter++}`);
  writeFileSync(path, bytes);
  return path;
}

/** A packet as read: what ExpectedPacket describes, with the bytes copied into a Buffer. */
type Got = ExpectedPacket & { data: Buffer };

/** Reads a file to the end or to its first error; packets are copied out of the reader's buffer. */
function readAll(path: string, options: PcapReaderOptions = {}): { packets: Got[]; error?: unknown; reader?: PcapReader } {
  const packets: Got[] = [];
  let r: PcapReader;
  try {
    r = PcapReader.open(path, options);
  } catch (error) {
    return { packets, error };
  }
  try {
    while (r.next()) {
      packets.push({
        tsSec: r.tsSec,
        tsNsec: r.tsNsec,
        caplen: r.caplen,
        origLen: r.origLen,
        linkType: r.linkType,
        interfaceId: r.interfaceId,
        section: r.section,
        offset: r.fileOffset,
        data: Buffer.from(r.data.subarray(r.offset, r.offset + r.caplen)),
      });
    }
    return { packets, reader: r };
  } catch (error) {
    return { packets, error, reader: r };
  } finally {
    r.close();
  }
}

/**
 * readAll() through nextBatch() with batches of `capacity`. A packet read in a
 * batch has no file offset of its own: `offset` is the reader's fileOffset
 * after the batch for the batch's last packet, -1 for the others.
 */
function readAllBatched(path: string, capacity: number, options: PcapReaderOptions = {}): { packets: Got[]; error?: unknown; batches: number } {
  const packets: Got[] = [];
  let batches = 0;
  let r: PcapReader;
  try {
    r = PcapReader.open(path, options);
  } catch (error) {
    return { packets, error, batches };
  }
  const batch = new PacketBatch(capacity);
  try {
    for (let n = r.nextBatch(batch); n > 0; n = r.nextBatch(batch)) {
      batches++;
      expect(batch.count).toBe(n);
      expect(n).toBeLessThanOrEqual(capacity);
      for (let k = 0; k < n; k++) {
        packets.push({
          tsSec: batch.tsSec[k]!,
          tsNsec: batch.tsNsec[k]!,
          caplen: batch.caplens[k]!,
          origLen: batch.origLens[k]!,
          linkType: r.linkType,
          interfaceId: r.interfaceId,
          section: r.section,
          offset: k === n - 1 ? r.fileOffset : -1,
          data: Buffer.from(r.data.subarray(batch.offsets[k]!, batch.offsets[k]! + batch.caplens[k]!)),
        });
      }
      expect(r.packets).toBe(packets.length);
    }
    expect(batch.count).toBe(0);
    return { packets, batches };
  } catch (error) {
    return { packets, error, batches };
  } finally {
    r.close();
  }
}

/** What readAll() read, with the file offsets that readAllBatched() cannot give set to -1. */
function asBatched(all: Got[], batched: Got[]): Got[] {
  return all.map((g, i) => ({ ...g, offset: batched[i]?.offset === -1 ? -1 : g.offset }));
}

function expectMoatError(error: unknown, code: number, ...fragments: string[]): MoatError {
  expect(error).toBeInstanceOf(MoatError);
  const e = error as MoatError;
  expect(e.code, e.message).toBe(code);
  for (const f of fragments) expect(e.message).toContain(f);
  return e;
}

const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');
const asExpected = (g: Got): Omit<ManifestRecord, 'what'> => ({
  offset: g.offset,
  tsSec: g.tsSec,
  tsNsec: g.tsNsec,
  caplen: g.caplen,
  origLen: g.origLen,
  linkType: g.linkType,
  interfaceId: g.interfaceId,
  section: g.section,
  sha256: sha256(g.data),
});
const withoutWhat = ({ what: _what, ...rest }: ManifestRecord): Omit<ManifestRecord, 'what'> => rest;
const fromBuilder = (p: ExpectedPacket): Got => ({ ...p, data: Buffer.from(p.data) });

// ------------------------------------------------------------------ fixtures

describe('the reader on the native fixtures', () => {
  it('has a manifest entry for at least every required kind of file', () => {
    const names = manifest.files.map((f) => f.file);
    expect(names.length).toBeGreaterThanOrEqual(18);
    const links = new Set(manifest.files.flatMap((f) => f.linkTypes));
    for (const lt of [0, 1, 101, 108, 113, 276]) expect(links).toContain(lt);
    expect(manifest.files.some((f) => f.format === 'pcapng' && f.byteOrder === 'mixed')).toBe(true);
  });

  for (const entry of manifest.files) {
    it(`reads ${entry.file} with the manifest's count, timestamps, lengths, link types and bytes`, () => {
      const path = join(FIXTURES, entry.file);
      const { packets, error, reader } = readAll(path);
      expect(error).toBeUndefined();
      expect(reader!.format).toBe(entry.format);
      expect(packets.length).toBe(entry.packets);
      expect(packets.map(asExpected)).toEqual(entry.records.map(withoutWhat));
      expect(reader!.packets).toBe(entry.packets);
    });
  }

  it('reads every fixture the same way through a 64-byte buffer that must grow and compact', () => {
    for (const entry of manifest.files) {
      const { packets, error } = readAll(join(FIXTURES, entry.file), { bufferSize: 64 });
      expect(error, entry.file).toBeUndefined();
      expect(packets.map(asExpected), entry.file).toEqual(entry.records.map(withoutWhat));
    }
  });

  it('reads every fixture the same way in batches of 1, 3 and 32 packets, through small and default buffers', () => {
    for (const entry of manifest.files) {
      const path = join(FIXTURES, entry.file);
      const one = readAll(path).packets;
      for (const capacity of [1, 3, 32]) {
        for (const options of [{ bufferSize: 64 }, {}]) {
          const { packets, error, batches } = readAllBatched(path, capacity, options);
          expect(error, entry.file).toBeUndefined();
          expect(packets, `${entry.file}, batches of ${capacity}`).toEqual(asBatched(one, packets));
          if (capacity === 32 && entry.format === 'pcap' && options.bufferSize === undefined) expect(batches).toBe(Math.ceil(one.length / 32));
        }
      }
    }
  });

  it('finds the committed fixtures identical to what the generator produces now', () => {
    for (const f of buildFixtures()) {
      expect(readFileSync(join(FIXTURES, f.entry.file)).equals(f.bytes), f.entry.file).toBe(true);
      expect(manifest.files.find((m) => m.file === f.entry.file)).toEqual(f.entry);
    }
  });

  it('reports the byte order, interfaces and resolutions a file declares', () => {
    const r = PcapReader.open(join(FIXTURES, 'pcap-ns-be.pcap'));
    expect([r.format, r.bigEndian, r.interfaceCount]).toEqual(['pcap', true, 1]);
    expect(r.interfaceInfo(0)).toEqual({ linkType: 1, snapLen: 262_144, resolution: { base: 10, exponent: 9 } });
    r.close();
    const ng = PcapReader.open(join(FIXTURES, 'pcapng-interfaces.pcapng'));
    expect(ng.next()).toBe(true);
    expect(ng.interfaceCount).toBe(4);
    expect(ng.interfaceInfo(0)).toEqual({ linkType: 1, snapLen: 262_144, resolution: { base: 10, exponent: 6 } });
    expect(ng.interfaceInfo(1)!.resolution).toEqual({ base: 10, exponent: 9 });
    expect(ng.interfaceInfo(2)!.resolution).toEqual({ base: 2, exponent: 20 });
    expect(ng.interfaceInfo(4)).toBeUndefined();
    ng.close();
    expect(ng.next()).toBe(false);
  });

  it('masks the FCS bits out of a classic link-type field', () => {
    const bytes = buildPcap([{ data: new Uint8Array(20), seconds: 1 }]);
    bytes.writeUInt32LE(0x2400_0001, 20); // FCS length present, 2 x 16 bits, Ethernet
    const r = PcapReader.open(tempFile(bytes));
    expect(r.next()).toBe(true);
    expect(r.linkType).toBe(1);
    r.close();
  });

  it('reads a capture from a pipe, where the file size is unknown', () => {
    const fifo = join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    const path = join(FIXTURES, 'pcapng-two-sections.pcapng');
    const writer = spawn('sh', ['-c', 'cat "$1" > "$2"', 'sh', path, fifo], { stdio: 'ignore' });
    const { packets, error } = readAll(fifo, { bufferSize: 100 });
    writer.kill();
    expect(error).toBeUndefined();
    expect(packets.map(asExpected)).toEqual(manifest.files.find((f) => f.file === 'pcapng-two-sections.pcapng')!.records.map(withoutWhat));
  });

  it('calls back once per packet through readCapture and returns the count', () => {
    const lengths: number[] = [];
    const n = readCapture(join(FIXTURES, 'raw.pcap'), (r) => lengths.push(r.caplen));
    expect(n).toBe(5);
    expect(lengths).toEqual(manifest.files.find((f) => f.file === 'raw.pcap')!.records.map((x) => x.caplen));
  });
});

// ------------------------------------------------------------------ tshark

describe('the reader against tshark', () => {
  it.runIf(!!TSHARK)('agrees with tshark on every fixture: packet count, timestamps to the nanosecond, frame and capture lengths', () => {
    for (const entry of manifest.files) {
      const path = join(FIXTURES, entry.file);
      const out = execFileSync(TSHARK!, ['-n', '-r', path, '-T', 'fields', '-e', 'frame.encap_type', '-e', 'frame.time_epoch', '-e', 'frame.len', '-e', 'frame.cap_len'], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, LC_ALL: 'C' },
      });
      // Records without an encapsulation are pcapng custom blocks Wireshark lists as frames.
      const rows = out
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => l.split('\t'))
        .filter(([encap]) => encap !== '');
      const { packets, error } = readAll(path);
      expect(error, entry.file).toBeUndefined();
      const ours = packets.map((p) => [p.tsSec < 0 ? '' : `${p.tsSec}.${String(p.tsNsec).padStart(9, '0')}`, String(p.origLen), String(p.caplen)]);
      const theirs = rows.map(([, time, len, capLen]) => {
        const [sec, frac = ''] = time!.split('.');
        return [time === '' ? '' : `${sec}.${frac.padEnd(9, '0')}`, len!, capLen!];
      });
      expect(ours, entry.file).toEqual(theirs);
    }
  }, 120_000);
});

// ------------------------------------------------------------------ damage

/** A small classic pcap: three packets of different sizes. */
function smallPcap(bigEndian = false): { bytes: Buffer; boundaries: number[] } {
  const frames = [buildFrame({ ip: { version: 4, src: '10.0.0.1', dst: '10.0.0.2', ttl: 64 }, l4: { kind: 'udp', srcPort: 1, dstPort: 2, payload: new Uint8Array(5) } }), new Uint8Array(3).fill(7), new Uint8Array(20).fill(9)];
  const bytes = buildPcap(
    frames.map((data, i) => ({ data, seconds: 100 + i, nanoseconds: i * 1000 })),
    { bigEndian },
  );
  const boundaries = [24];
  for (const f of frames) boundaries.push(boundaries[boundaries.length - 1]! + 16 + f.length);
  return { bytes, boundaries };
}

/** A small pcapng with two sections (LE then BE), every packet block kind and skipped blocks. */
function smallPcapng(): { builder: PcapngBuilder; bytes: Buffer } {
  const b = new PcapngBuilder();
  b.section();
  b.addInterface({ linkType: LINKTYPE.ETHERNET, snapLen: 0 });
  b.enhancedPacket(0, new Uint8Array(14).fill(1), { seconds: 1, nanoseconds: 1000 });
  b.nameResolution([{ ipv4: Uint8Array.of(1, 2, 3, 4), names: ['a'] }]);
  b.simplePacket(new Uint8Array(5).fill(2));
  b.section({ bigEndian: true });
  b.addInterface({ linkType: LINKTYPE.RAW, tsresol: 9 });
  b.obsoletePacket(0, new Uint8Array(21).fill(3), { seconds: 2, nanoseconds: 5 });
  b.custom(32473, new Uint8Array(3));
  b.enhancedPacket(0, new Uint8Array(1).fill(4), { seconds: 3, nanoseconds: 7 });
  return { builder: b, bytes: b.toBuffer() };
}

describe('the reader on damaged captures', () => {
  it('returns every whole record before any cut point of a classic pcap, then a truncation error at the cut record', () => {
    for (const bigEndian of [false, true]) {
      const { bytes, boundaries } = smallPcap(bigEndian);
      const all = readAll(tempFile(bytes)).packets;
      expect(all.length).toBe(3);
      for (let cut = 0; cut <= bytes.length; cut++) {
        const path = tempFile(bytes.subarray(0, cut), 'cut');
        const { packets, error } = readAll(path);
        const whole = boundaries.slice(1).filter((end) => end <= cut).length;
        expect(packets, `cut ${cut}`).toEqual(all.slice(0, whole));
        // Batches give the same packets, then the same error.
        const batched = readAllBatched(path, 2);
        expect(batched.packets, `cut ${cut}, batched`).toEqual(asBatched(packets, batched.packets));
        expect(String(batched.error), `cut ${cut}, batched`).toBe(String(error));
        if (cut < 24) {
          expectMoatError(error, 3002, path, 'byte 0');
        } else if (boundaries.includes(cut)) {
          expect(error, `cut ${cut}`).toBeUndefined();
        } else {
          const start = boundaries.filter((b) => b < cut).pop()!;
          expectMoatError(error, 3002, `${path}: `, `at byte ${start} `, 'cut short');
        }
      }
    }
  });

  it('returns every whole packet before any cut point of a pcapng, then a truncation error naming the cut block', () => {
    const { builder, bytes } = smallPcapng();
    const expected = builder.packets.map(fromBuilder);
    const all = readAll(tempFile(bytes)).packets;
    expect(all).toEqual(expected);
    const boundaries = [...builder.blocks, bytes.length];
    for (let cut = 0; cut <= bytes.length; cut++) {
      const path = tempFile(bytes.subarray(0, cut), 'cut');
      const { packets, error } = readAll(path);
      const whole = expected.filter((p) => boundaries[boundaries.indexOf(p.offset) + 1]! <= cut).length;
      expect(packets, `cut ${cut}`).toEqual(expected.slice(0, whole));
      if (boundaries.includes(cut) && cut > 0) {
        expect(error, `cut ${cut}`).toBeUndefined();
      } else {
        const start = cut === 0 ? 0 : boundaries.filter((b) => b < cut).pop()!;
        expectMoatError(error, 3002, `${path}: `, `at byte ${start}`);
      }
    }
  });

  it('rejects an empty file as truncated, saying it is empty', () => {
    const path = tempFile(new Uint8Array(0));
    expectMoatError(readAll(path).error, 3002, path, 'empty');
  });

  it('rejects a file that is not a capture, a modified-pcap magic and a gzip file with 3001', () => {
    const text = tempFile(Buffer.from('hello, this is not a capture file at all'));
    expectMoatError(readAll(text).error, 3001, text, 'byte 0', '0x68656c6c');
    const modified = Buffer.from(encodePcapGlobalHeader());
    modified.writeUInt32LE(0xa1b2cd34, 0);
    const mod = tempFile(modified);
    expectMoatError(readAll(mod).error, 3001, mod, 'modified');
    modified.writeUInt32BE(0xa1b2cd34, 0);
    expectMoatError(readAll(tempFile(modified)).error, 3001, 'modified');
    expectMoatError(readAll(tempFile(Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0]))).error, 3001, 'gzip');
    const badBom = smallPcapng().bytes;
    badBom.writeUInt32LE(0x12345678, 8);
    expectMoatError(readAll(tempFile(badBom)).error, 3001, 'byte-order magic');
    const v1 = Buffer.from(encodePcapGlobalHeader());
    v1.writeUInt16LE(1, 4);
    expectMoatError(readAll(tempFile(v1)).error, 3001, 'version 1.4');
  });

  it('fails to open a missing file or a directory with 3006', () => {
    const missing = join(dir, 'no-such-file.pcap');
    expectMoatError(readAll(missing).error, 3006, missing);
    const sub = join(dir, 'a-directory.pcap');
    mkdirSync(sub);
    expectMoatError(readAll(sub).error, 3006, sub, 'directory');
  });

  it('carries whole seconds out of record timestamps a writer did not normalise, one by one and in batches', () => {
    for (const resolution of ['us', 'ns'] as const) {
      const unit = resolution === 'us' ? 1_000_000 : 1_000_000_000;
      // Fractions of 0.5, 1.25 and 3 seconds, little and big endian.
      for (const bigEndian of [false, true]) {
        const records = [unit / 2, unit + unit / 4, 3 * unit].map((frac, i) => {
          const r = Buffer.alloc(16 + 4);
          const w = (v: number, at: number) => (bigEndian ? r.writeUInt32BE(v, at) : r.writeUInt32LE(v, at));
          w(100 + i, 0);
          w(frac, 4);
          w(4, 8);
          w(4, 12);
          return r;
        });
        const path = tempFile(Buffer.concat([encodePcapGlobalHeader({ resolution, bigEndian }), ...records]), 'unnormalised');
        const want = [[100, 500_000_000], [102, 250_000_000], [105, 0]];
        expect(readAll(path).packets.map((p) => [p.tsSec, p.tsNsec]), `${resolution} ${bigEndian}`).toEqual(want);
        expect(readAllBatched(path, 32).packets.map((p) => [p.tsSec, p.tsNsec]), `${resolution} ${bigEndian}, batched`).toEqual(want);
      }
    }
  });

  it('rejects a classic record claiming an absurd length after returning the good one before it', () => {
    const good = buildPcap([{ data: new Uint8Array(60), seconds: 1 }]);
    const bad = Buffer.alloc(16 + 8);
    bad.writeUInt32LE(2, 0);
    bad.writeUInt32LE(9_999_999, 8);
    bad.writeUInt32LE(9_999_999, 12);
    const path = tempFile(Buffer.concat([good, bad]), 'trace.pcap');
    const { packets, error } = readAll(path);
    expect(packets.length).toBe(1);
    const e = expectMoatError(error, 3003);
    expect(e.message).toBe(`${path}: record at byte 100 claims 9999999 bytes (limit 262144)`);
    expect(e.file).toBe(path);
    // A batch ends before the bad record; the next one throws for it.
    const batched = readAllBatched(path, 32);
    expect(batched.packets.length).toBe(1);
    expect(expectMoatError(batched.error, 3003).message).toBe(e.message);
  });

  it('rejects a pcapng block above the size cap and a packet above its snaplen limit with 3003', () => {
    const b = new PcapngBuilder();
    b.section();
    b.addInterface({ linkType: 1 });
    const head = b.toBuffer();
    const huge = Buffer.alloc(12);
    huge.writeUInt32LE(6, 0);
    huge.writeUInt32LE(0x1000_0000, 4);
    expectMoatError(readAll(tempFile(Buffer.concat([head, huge]))).error, 3003, `block at byte ${head.length} claims ${0x1000_0000} bytes (limit ${64 * 1024 * 1024})`);

    const epb = Buffer.alloc(32);
    epb.writeUInt32LE(6, 0);
    epb.writeUInt32LE(32, 4);
    epb.writeUInt32LE(300_000, 20);
    epb.writeUInt32LE(300_000, 24);
    epb.writeUInt32LE(32, 28);
    expectMoatError(readAll(tempFile(Buffer.concat([head, epb]))).error, 3003, `enhanced packet block at byte ${head.length} claims 300000 bytes (limit 262144)`);
  });

  it('rejects malformed pcapng blocks with 3004 after the good packets before them', () => {
    const base = (): PcapngBuilder => {
      const b = new PcapngBuilder();
      b.section();
      b.addInterface({ linkType: 1 });
      b.enhancedPacket(0, new Uint8Array(10), { seconds: 1 });
      return b;
    };
    const cases: Array<[string, (b: PcapngBuilder) => void, string]> = [
      ['a length that is not a multiple of 4', (b) => b.raw(Buffer.from([4, 0, 0, 0, 13, 0, 0, 0, 0, 0, 0, 0, 13, 0, 0, 0])), 'total length 13'],
      ['a length below 12', (b) => b.raw(Buffer.from([4, 0, 0, 0, 8, 0, 0, 0, 8, 0, 0, 0])), 'total length 8'],
      ['a trailing length that differs', (b) => b.raw(Buffer.from([4, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0])), 'ends with 20'],
      [
        'a packet longer than its block',
        (b) => {
          const epb = Buffer.alloc(32);
          epb.writeUInt32LE(6, 0);
          epb.writeUInt32LE(32, 4);
          epb.writeUInt32LE(100, 20);
          epb.writeUInt32LE(32, 28);
          b.raw(epb);
        },
        'more than its 32-byte block holds',
      ],
      [
        'a section header with a bad byte-order magic',
        (b) => b.raw(Buffer.from([0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 1, 2, 3, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0])),
        'byte-order magic 0x04030201',
      ],
      ['an interface option overrunning its block', (b) => b.block(1, Buffer.from([1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 200, 0])), 'overrunning the block'],
      ['an interface block too short for its fields', (b) => b.block(1, Buffer.from([1, 0, 0, 0])), 'shorter than the 20-byte minimum'],
    ];
    for (const [what, damage, fragment] of cases) {
      const b = base();
      const at = b.byteLength;
      damage(b);
      const path = tempFile(b.toBuffer(), 'bad-block');
      const { packets, error } = readAll(path);
      expect(packets.length, what).toBe(1);
      expectMoatError(error, 3004, `${path}: `, `at byte ${at}`, fragment);
    }
  });

  it('rejects packets for undeclared interfaces with 3005', () => {
    const b = new PcapngBuilder();
    b.section();
    b.addInterface({ linkType: 1 });
    b.enhancedPacket(0, new Uint8Array(10), { seconds: 1 });
    const at = b.byteLength;
    b.block(6, Buffer.concat([Buffer.from([1, 0, 0, 0]), Buffer.alloc(16)]));
    const path = tempFile(b.toBuffer());
    const { packets, error } = readAll(path);
    expect(packets.length).toBe(1);
    expectMoatError(error, 3005, path, `enhanced packet block at byte ${at} refers to interface 1, but section 0 declares only interface 0`);

    const spb = new PcapngBuilder();
    spb.section();
    spb.block(3, Buffer.from([4, 0, 0, 0, 1, 2, 3, 4]));
    expectMoatError(readAll(tempFile(spb.toBuffer())).error, 3005, 'simple packet block at byte 28 refers to interface 0', 'none yet');

    // Interfaces do not carry over into a new section.
    const two = new PcapngBuilder();
    two.section();
    two.addInterface({ linkType: 1 });
    two.section({ bigEndian: true });
    const at2 = two.byteLength;
    two.block(2, Buffer.alloc(20));
    expectMoatError(readAll(tempFile(two.toBuffer())).error, 3005, `packet block at byte ${at2} refers to interface 0, but section 1 declares none yet`);
  });

  it('keeps throwing the same error after a failure and returns false after close', () => {
    const { bytes } = smallPcap();
    const r = PcapReader.open(tempFile(bytes.subarray(0, bytes.length - 1)));
    expect(r.next()).toBe(true);
    expect(r.next()).toBe(true);
    let first: unknown;
    try {
      r.next();
    } catch (e) {
      first = e;
    }
    expectMoatError(first, 3002);
    expect(() => r.next()).toThrow(first as Error);
    r.close();
    const ok = PcapReader.open(tempFile(bytes));
    ok.close();
    expect(ok.next()).toBe(false);
  });
});

// ------------------------------------------------------------------ buffering

describe('the reader buffer', () => {
  it('grows for a record bigger than the buffer, keeps it and reads the rest of the file', () => {
    const big = Buffer.alloc(6 * 1024 * 1024);
    for (let i = 0; i < big.length; i += 4096) big[i] = (i / 4096) & 0xff;
    const small = Uint8Array.of(1, 2, 3);
    const path = tempFile(
      buildPcap(
        [
          { data: small, seconds: 1 },
          { data: big, seconds: 2 },
          { data: small, seconds: 3 },
        ],
        { snapLen: 16 * 1024 * 1024 },
      ),
    );
    const r = PcapReader.open(path);
    expect(r.data.length).toBe(PCAP_READER_BUFFER_SIZE);
    expect(r.next()).toBe(true);
    expect(r.next()).toBe(true);
    expect(r.caplen).toBe(big.length);
    expect(r.data.length).toBeGreaterThanOrEqual(big.length + 16);
    expect(r.data.subarray(r.offset, r.offset + r.caplen).equals(big)).toBe(true);
    expect(r.next()).toBe(true);
    expect([r.tsSec, r.caplen]).toEqual([3, 3]);
    expect(r.next()).toBe(false);
  });

  it('grows for a pcapng block bigger than the buffer', () => {
    const b = new PcapngBuilder();
    b.section();
    b.addInterface({ linkType: 1, snapLen: 8 * 1024 * 1024 });
    const big = new Uint8Array(5 * 1024 * 1024 + 3).fill(0xab);
    b.enhancedPacket(0, big, { seconds: 9 });
    b.enhancedPacket(0, Uint8Array.of(1), { seconds: 10 });
    const { packets, error } = readAll(tempFile(b.toBuffer()));
    expect(error).toBeUndefined();
    expect(packets.map((p) => p.caplen)).toEqual([big.length, 1]);
    expect(packets[0]!.data.equals(big)).toBe(true);
  });

  it('rejects a record above the buffer cap with 3003 without allocating it', () => {
    const header = encodePcapGlobalHeader({ snapLen: 0xffff_ffff });
    const rec = Buffer.alloc(16);
    rec.writeUInt32LE(100 * 1024 * 1024, 8);
    rec.writeUInt32LE(100 * 1024 * 1024, 12);
    const path = tempFile(Buffer.concat([header, rec]));
    expectMoatError(readAll(path).error, 3003, `record at byte 24 claims ${100 * 1024 * 1024} bytes (limit ${64 * 1024 * 1024 - 16})`);
    expectMoatError(readAll(path, { bufferSize: 4096, maxBufferSize: 1 << 20 }).error, 3003, `(limit ${(1 << 20) - 16})`);
  });

  it('reports a record longer than the rest of the file as truncated without growing the buffer for it', () => {
    const header = encodePcapGlobalHeader({ snapLen: 16 * 1024 * 1024 });
    const rec = Buffer.alloc(16 + 100);
    rec.writeUInt32LE(8 * 1024 * 1024, 8);
    rec.writeUInt32LE(8 * 1024 * 1024, 12);
    const path = tempFile(Buffer.concat([header, rec]));
    const r = PcapReader.open(path);
    expect(() => r.next()).toThrow(/record at byte 24 is cut short: it needs 8388624 bytes, the file ends at byte 140/);
    expect(r.bufferSize).toBe(PCAP_READER_BUFFER_SIZE);
  });

  it('reads a 200,000-packet file much bigger than the buffer with the buffer never growing', () => {
    const path = join(dir, 'big.pcap');
    const w = openPcapFile(path, { resolution: 'ns' });
    const frame = Buffer.alloc(100);
    for (let i = 0; i < 200_000; i++) {
      const len = 60 + (i % 41);
      frame.writeUInt32BE(i, 0);
      w.writePacket(frame.subarray(0, len), 1_700_000_000 + Math.floor(i / 1000), (i % 1000) * 1_000_000 + 7);
    }
    w.close();
    expect(w.byteCount).toBeGreaterThan(4 * PCAP_READER_BUFFER_SIZE);
    const r = PcapReader.open(path);
    const initial = r.data;
    let i = 0;
    let offset = 24;
    let wrong = 0;
    while (r.next()) {
      const len = 60 + (i % 41);
      if (
        r.data !== initial ||
        r.caplen !== len ||
        r.data.readUInt32BE(r.offset) !== i ||
        r.fileOffset !== offset ||
        r.tsSec !== 1_700_000_000 + Math.floor(i / 1000) ||
        r.tsNsec !== (i % 1000) * 1_000_000 + 7
      ) {
        wrong++;
      }
      offset += 16 + len;
      i++;
    }
    expect(wrong).toBe(0);
    expect(i).toBe(200_000);
    expect(r.data.length).toBe(PCAP_READER_BUFFER_SIZE);
    expect(r.packets).toBe(200_000);
    // In batches too, across every buffer refill.
    const b = PcapReader.open(path);
    const batch = new PacketBatch(32);
    i = 0;
    offset = 24;
    for (let n = b.nextBatch(batch); n > 0; n = b.nextBatch(batch)) {
      for (let k = 0; k < n; k++) {
        const len = 60 + (i % 41);
        const at = batch.offsets[k]!;
        if (batch.caplens[k] !== len || batch.origLens[k] !== len || b.data.readUInt32BE(at) !== i || batch.tsSec[k] !== 1_700_000_000 + Math.floor(i / 1000) || batch.tsNsec[k] !== (i % 1000) * 1_000_000 + 7) wrong++;
        if (k === n - 1 && b.fileOffset !== offset) wrong++;
        offset += 16 + len;
        i++;
      }
    }
    b.close();
    expect(wrong).toBe(0);
    expect(i).toBe(200_000);
  });

  it('reads a many-block pcapng identically through buffers of several sizes', () => {
    const rng = new Rng(7);
    const b = new PcapngBuilder();
    b.section();
    b.addInterface({ linkType: 1 });
    b.addInterface({ linkType: 101, tsresol: 9 });
    for (let i = 0; i < 3000; i++) {
      const data = Uint8Array.from({ length: 1 + rng.int(300) }, (_, j) => (i + j) & 0xff);
      const pick = rng.int(10);
      if (pick === 0) b.simplePacket(data);
      else if (pick === 1) b.nameResolution([{ ipv4: Uint8Array.of(1, 2, 3, 4), names: ['x'.repeat(rng.int(40))] }]);
      else if (pick === 2) b.obsoletePacket(1, data, { seconds: i, nanoseconds: i });
      else b.enhancedPacket(pick % 2, data, { seconds: 1_700_000_000 + i, nanoseconds: rng.int(1e9) });
    }
    const path = tempFile(b.toBuffer());
    const expected = b.packets.map(fromBuilder);
    const want = expected.map(asExpected);
    for (const bufferSize of [64, 333, 4096, PCAP_READER_BUFFER_SIZE]) {
      const { packets, error } = readAll(path, { bufferSize });
      expect(error).toBeUndefined();
      expect(packets.length).toBe(expected.length);
      expect(packets.map(asExpected)).toEqual(want);
    }
  });
});

// ------------------------------------------------------------------ timestamps

describe('pcapng timestamp conversion', () => {
  it('matches the BigInt reference for every decimal and binary if_tsresol and random 64-bit tick counts', () => {
    const rng = new Rng(20_240_601);
    const resolutions = [...Array.from({ length: 128 }, (_, n) => n), ...Array.from({ length: 128 }, (_, n) => 0x80 | n)];
    const b = new PcapngBuilder();
    b.section();
    for (const tsresol of resolutions) b.addInterface({ linkType: 1, tsresol });
    const u64 = (): bigint => (BigInt(rng.int(2 ** 32)) << 32n) | BigInt(rng.int(2 ** 32));
    const edges = [0n, 1n, (1n << 64n) - 1n, (1n << 53n) - 1n, 1n << 53n, (1n << 53n) + 1n, (1n << 32n) - 1n, 1n << 32n, 1_700_000_000_123_456_789n];
    resolutions.forEach((tsresol, id) => {
      const tps = tsresol & 0x80 ? 1n << BigInt(tsresol & 0x7f) : 10n ** BigInt(tsresol);
      const around = [tps - 1n, tps, tps + 1n, 1_700_000_000n * tps - 1n, 1_700_000_000n * tps].filter((t) => t >= 0n && t < 1n << 64n);
      const ticks = [...edges, ...around, ...Array.from({ length: 20 }, u64)];
      for (const t of ticks) b.enhancedPacket(id, Uint8Array.of(1), { ticks: t });
    });
    const { packets, error } = readAll(tempFile(b.toBuffer()));
    expect(error).toBeUndefined();
    expect(packets.length).toBe(b.packets.length);
    const mismatches: string[] = [];
    packets.forEach((p, i) => {
      const e = b.packets[i]!;
      if (p.tsSec !== e.tsSec || p.tsNsec !== e.tsNsec) mismatches.push(`if ${p.interfaceId}: got ${p.tsSec}.${p.tsNsec}, want ${e.tsSec}.${e.tsNsec}`);
    });
    expect(mismatches.slice(0, 10)).toEqual([]);
  });

  it('converts the common resolutions exactly at second boundaries', () => {
    expect(ticksToTime(1_700_000_000_999_999_999n, 9)).toEqual({ sec: 1_700_000_000, nsec: 999_999_999 });
    const b = new PcapngBuilder();
    b.section();
    b.addInterface({ linkType: 1 });
    b.addInterface({ linkType: 1, tsresol: 9 });
    b.enhancedPacket(0, Uint8Array.of(0), { ticks: 1_700_000_000_999_999n });
    b.enhancedPacket(1, Uint8Array.of(0), { ticks: 1_700_000_000_999_999_999n });
    b.enhancedPacket(1, Uint8Array.of(0), { ticks: 1_700_000_001_000_000_000n });
    const { packets } = readAll(tempFile(b.toBuffer()));
    expect(packets.map((p) => [p.tsSec, p.tsNsec])).toEqual([
      [1_700_000_000, 999_999_000],
      [1_700_000_000, 999_999_999],
      [1_700_000_001, 0],
    ]);
  });
});
