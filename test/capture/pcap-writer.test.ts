// Unit tests of the classic-pcap writer: exact bytes of headers and records in
// both resolutions and byte orders, truncation at snaplen, batching, and that
// tshark and capinfos (when installed) read the files it writes.

import { peerTool } from '../support/tools.js';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import {
  BufferSink,
  LINKTYPE,
  PcapWriter,
  buildPcap,
  encodePcapGlobalHeader,
  openPcapFile,
  streamSink,
} from '../../src/capture/index.js';
import { buildFrame } from '../support/packet-builder.js';
import { findTshark } from '../support/tshark.js';

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');


const dir = mkdtempSync(join(tmpdir(), 'moat-pcap-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('pcap writer', () => {
  it('writes the microsecond global header in little-endian by default', () => {
    expect(hex(encodePcapGlobalHeader())).toBe(
      'd4c3b2a1' + '0200' + '0400' + '00000000' + '00000000' + '00000400' + '01000000',
    );
  });

  it('writes the nanosecond magic, the snaplen and the link type it is given', () => {
    expect(hex(encodePcapGlobalHeader({ resolution: 'ns', snapLen: 65535, linkType: LINKTYPE.RAW }))).toBe(
      '4d3cb2a1' + '0200' + '0400' + '00000000' + '00000000' + 'ffff0000' + '65000000',
    );
  });

  it('writes every field big-endian when asked', () => {
    expect(hex(encodePcapGlobalHeader({ bigEndian: true, resolution: 'ns' }))).toBe(
      'a1b23c4d' + '0002' + '0004' + '00000000' + '00000000' + '00040000' + '00000001',
    );
  });

  it('encodes a microsecond record header with seconds, microseconds and both lengths', () => {
    const file = buildPcap([{ data: Uint8Array.of(1, 2, 3, 4, 5), seconds: 0x01020304, nanoseconds: 123_456_789 }]);
    expect(file.length).toBe(24 + 16 + 5);
    // 123456789 ns is 123456 us = 0x0001e240.
    expect(hex(file.subarray(24))).toBe('04030201' + '40e20100' + '05000000' + '05000000' + '0102030405');
  });

  it('encodes a nanosecond record header with the full nanoseconds', () => {
    const file = buildPcap([{ data: Uint8Array.of(0xaa), seconds: 1, nanoseconds: 999_999_999 }], { resolution: 'ns' });
    expect(hex(file.subarray(24))).toBe('01000000' + 'ffc99a3b' + '01000000' + '01000000' + 'aa');
  });

  it('truncates packets longer than the snaplen and keeps the original length', () => {
    const data = Uint8Array.from({ length: 10 }, (_, i) => i);
    const file = buildPcap([{ data, seconds: 2, originalLength: 1500 }], { snapLen: 4 });
    expect(hex(file.subarray(16, 20))).toBe('04000000');
    expect(hex(file.subarray(24))).toBe('02000000' + '00000000' + '04000000' + 'dc050000' + '00010203');
  });

  it('rejects an original length shorter than the data and timestamps out of range', () => {
    const w = new PcapWriter(new BufferSink());
    expect(() => w.writePacket(new Uint8Array(8), 0, 0, 4)).toThrow(RangeError);
    expect(() => w.writePacket(new Uint8Array(8), -1)).toThrow(RangeError);
    expect(() => w.writePacket(new Uint8Array(8), 0, 1_000_000_000)).toThrow(RangeError);
    expect(() => new PcapWriter(new BufferSink(), { snapLen: 0 })).toThrow(RangeError);
  });

  it('produces the same bytes whatever the batch size, packets larger than the batch included', () => {
    const packets = Array.from({ length: 50 }, (_, i) => ({
      data: Uint8Array.from({ length: (i * 37) % 300 }, (_, j) => (i + j) & 0xff),
      seconds: 1_700_000_000 + i,
      nanoseconds: i * 1000,
    }));
    const reference = buildPcap(packets);
    for (const batchSize of [64, 100, 257, 4096]) {
      const sink = new BufferSink();
      const w = new PcapWriter(sink, { batchSize });
      for (const p of packets) w.writePacket(p.data, p.seconds, p.nanoseconds);
      w.close();
      expect(w.packetCount).toBe(50);
      expect(w.byteCount).toBe(reference.length);
      expect(sink.toBuffer().equals(reference)).toBe(true);
    }
  });

  it('writes the same bytes to a file descriptor and to a stream', async () => {
    const packets = [{ data: Uint8Array.of(9, 8, 7), seconds: 5, nanoseconds: 6000 }];
    const reference = buildPcap(packets);

    const path = join(dir, 'fd.pcap');
    const w = openPcapFile(path);
    w.writePacket(packets[0]!.data, 5, 6000);
    w.close();
    expect(readFileSync(path).equals(reference)).toBe(true);

    const stream = new PassThrough();
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    const ended = new Promise((resolve) => stream.on('end', resolve));
    const sw = new PcapWriter(streamSink(stream));
    sw.writePacket(packets[0]!.data, 5, 6000);
    sw.close();
    await ended;
    expect(Buffer.concat(chunks).equals(reference)).toBe(true);
  });

  const tshark = findTshark();
  const capinfos = peerTool('capinfos');

  it.skipIf(!tshark)('writes files that tshark reads back with the same frames and timestamps', () => {
    for (const resolution of ['us', 'ns'] as const) {
      const path = join(dir, `read-${resolution}.pcap`);
      const w = openPcapFile(path, { resolution });
      w.writePacket(
        buildFrame({ ip: { version: 4, src: '10.0.0.1', dst: '10.0.0.2', ttl: 64 }, l4: { kind: 'udp', srcPort: 1000, dstPort: 2000 } }),
        1_700_000_000,
        123_456_789,
      );
      w.writePacket(
        buildFrame({ ip: { version: 6, src: '2001:db8::1', dst: '2001:db8::2', hopLimit: 9 }, l4: { kind: 'tcp', srcPort: 1, dstPort: 2, flags: 0x12 } }),
        1_700_000_001,
        5_000,
      );
      w.close();
      const out = execFileSync(
        tshark!,
        ['-n', '-r', path, '-T', 'fields', '-E', 'separator=,', '-e', 'frame.time_epoch', '-e', 'frame.len', '-e', 'frame.protocols'],
        // An empty private configuration directory: Wireshark's defaults, not the user's profile.
        { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], env: { ...process.env, WIRESHARK_CONFIG_DIR: dir } },
      );
      const frac = resolution === 'ns' ? ['123456789', '000005000'] : ['123456000', '000005000'];
      expect(out.trim().split('\n')).toEqual([
        `1700000000.${frac[0]},42,eth:ethertype:ip:udp`,
        `1700000001.${frac[1]},74,eth:ethertype:ipv6:tcp`,
      ]);
    }
  }, 30_000);

  it.skipIf(!capinfos)('writes files that capinfos reports with the right type, resolution and count', () => {
    const path = join(dir, 'capinfos.pcap');
    const w = openPcapFile(path, { resolution: 'ns', snapLen: 1500 });
    for (let i = 0; i < 3; i++) w.writePacket(new Uint8Array(60), 1_700_000_000 + i, 0);
    w.close();
    const out = execFileSync(capinfos!, ['-t', '-c', '-l', '-E', '-a', path], { encoding: 'utf8' });
    expect(out).toMatch(/File type:\s+Wireshark\/tcpdump\/\.\.\. - nanosecond pcap/);
    expect(out).toMatch(/Number of packets:\s+3/);
    expect(out).toMatch(/Packet size limit:\s+file hdr: 1500 bytes/);
    expect(out).toMatch(/File encapsulation:\s+Ethernet/);
  }, 30_000);
});
