// Classic pcap (libpcap "tcpdump" format) writer: the file format `moat replay`
// and the test harnesses write so that packets can be read back by Moat, tcpdump,
// Wireshark/tshark and capinfos. It is not pcapng.
//
// File layout (every field in the byte order announced by the magic number):
//   global header, 24 bytes:
//     u32 magic      0xa1b2c3d4 (microsecond timestamps) or 0xa1b23c4d (nanosecond)
//     u16 version    2.4
//     i32 thiszone   0 (timestamps are UTC)
//     u32 sigfigs    0
//     u32 snaplen    largest number of bytes stored per packet
//     u32 linktype   LINKTYPE_* of every record (1 = Ethernet)
//   then one record per packet:
//     u32 ts_sec     seconds since the Unix epoch
//     u32 ts_frac    microseconds or nanoseconds, per the magic
//     u32 incl_len   bytes stored in the file (<= snaplen)
//     u32 orig_len   bytes on the wire (>= incl_len)
//     incl_len bytes of packet data
//
// Records are encoded into a reusable batch buffer and handed to a sink when the
// batch fills, on flush() and on close(), so writing a packet allocates nothing.
// A packet larger than the batch is passed to the sink directly.

import { closeSync, openSync, writeSync } from 'node:fs';
import type { Writable } from 'node:stream';
import { MoatError } from '../errors/index.js';
import { LINKTYPE } from '../packet/index.js';

/** Magic number of a pcap file with microsecond timestamps. */
export const PCAP_MAGIC_MICROSECONDS = 0xa1b2c3d4;
/** Magic number of a pcap file with nanosecond timestamps. */
export const PCAP_MAGIC_NANOSECONDS = 0xa1b23c4d;
/** Size in bytes of the global file header. */
export const PCAP_GLOBAL_HEADER_LENGTH = 24;
/** Size in bytes of each per-packet record header. */
export const PCAP_RECORD_HEADER_LENGTH = 16;
/** libpcap's largest snapshot length, used as the default. */
export const PCAP_DEFAULT_SNAPLEN = 262_144;


/** Timestamp resolution of a file: `'us'` (microseconds) or `'ns'` (nanoseconds). */
export type PcapResolution = 'us' | 'ns';

/** Options of a pcap file. Every option has a default. */
export interface PcapWriterOptions {
  /** Link-layer type of every record; default LINKTYPE.ETHERNET. */
  linkType?: number;
  /** Bytes stored per packet at most (1..2^32-1); longer packets are truncated. Default 262144. */
  snapLen?: number;
  /** Timestamp resolution; default `'us'`. */
  resolution?: PcapResolution;
  /** Write big-endian fields instead of little-endian; default false. Readers detect either. */
  bigEndian?: boolean;
  /** Size of the batch buffer in bytes (>= 64); default 65536. */
  batchSize?: number;
}

/** Where encoded bytes go. `write` may be handed a view of the writer's batch buffer. */
export interface PcapSink {
  /**
   * Consume `chunk` now. The writer reuses the chunk's memory once `write` returns,
   * so a sink that keeps the bytes must copy them.
   */
  write(chunk: Uint8Array): void;
  /** Release the underlying resource, if the sink owns one. */
  close?(): void;
}

const U32_MAX = 0xffff_ffff;
const NANOS_PER_MICRO = 1000;

interface ResolvedOptions {
  linkType: number;
  snapLen: number;
  resolution: PcapResolution;
  bigEndian: boolean;
  batchSize: number;
}

function resolveOptions(options: PcapWriterOptions): ResolvedOptions {
  const linkType = options.linkType ?? LINKTYPE.ETHERNET;
  const snapLen = options.snapLen ?? PCAP_DEFAULT_SNAPLEN;
  const resolution = options.resolution ?? 'us';
  const batchSize = options.batchSize ?? 65_536;
  if (!isU32(linkType)) throw new RangeError(`pcap link type must be an integer in 0..2^32-1, got ${linkType}`);
  if (!isU32(snapLen) || snapLen === 0) throw new RangeError(`pcap snaplen must be an integer in 1..2^32-1, got ${snapLen}`);
  if (resolution !== 'us' && resolution !== 'ns') throw new RangeError(`pcap resolution must be 'us' or 'ns', got ${String(resolution)}`);
  if (!Number.isInteger(batchSize) || batchSize < 64) throw new RangeError(`pcap batch size must be an integer >= 64, got ${batchSize}`);
  return { linkType, snapLen, resolution, bigEndian: options.bigEndian ?? false, batchSize };
}

function isU32(n: number): boolean {
  return Number.isInteger(n) && n >= 0 && n <= U32_MAX;
}

/** Encodes the 24-byte global header of a pcap file with these options. */
export function encodePcapGlobalHeader(options: PcapWriterOptions = {}): Buffer {
  const o = resolveOptions(options);
  const out = Buffer.alloc(PCAP_GLOBAL_HEADER_LENGTH);
  writeGlobalHeader(out, o);
  return out;
}

function writeGlobalHeader(out: Buffer, o: ResolvedOptions): void {
  const le = !o.bigEndian;
  const magic = o.resolution === 'ns' ? PCAP_MAGIC_NANOSECONDS : PCAP_MAGIC_MICROSECONDS;
  if (le) {
    out.writeUInt32LE(magic, 0);
    out.writeUInt16LE(2, 4);
    out.writeUInt16LE(4, 6);
    out.writeInt32LE(0, 8);
    out.writeUInt32LE(0, 12);
    out.writeUInt32LE(o.snapLen, 16);
    out.writeUInt32LE(o.linkType, 20);
  } else {
    out.writeUInt32BE(magic, 0);
    out.writeUInt16BE(2, 4);
    out.writeUInt16BE(4, 6);
    out.writeInt32BE(0, 8);
    out.writeUInt32BE(0, 12);
    out.writeUInt32BE(o.snapLen, 16);
    out.writeUInt32BE(o.linkType, 20);
  }
}

/**
 * Streams pcap records to a sink. The global header is written on construction.
 *
 * ```ts
 * const w = openPcapFile('/tmp/out.pcap', { resolution: 'ns' });
 * w.writePacket(frame, 1_700_000_000, 123_456_789);
 * w.close();
 * ```
 */
export class PcapWriter {
  private readonly sink: PcapSink;
  private readonly options: ResolvedOptions;
  private readonly batch: Buffer;
  private used = 0;
  private closed = false;
  private packets = 0;
  private bytes = 0;

  constructor(sink: PcapSink, options: PcapWriterOptions = {}) {
    this.sink = sink;
    this.options = resolveOptions(options);
    this.batch = Buffer.allocUnsafe(this.options.batchSize);
    writeGlobalHeader(this.batch, this.options);
    this.used = PCAP_GLOBAL_HEADER_LENGTH;
    this.bytes = PCAP_GLOBAL_HEADER_LENGTH;
  }

  /** Link type, snaplen and resolution of this file. */
  get linkType(): number {
    return this.options.linkType;
  }
  get snapLen(): number {
    return this.options.snapLen;
  }
  get resolution(): PcapResolution {
    return this.options.resolution;
  }
  /** Records written so far. */
  get packetCount(): number {
    return this.packets;
  }
  /** Bytes of file produced so far (global header included), flushed or not. */
  get byteCount(): number {
    return this.bytes;
  }

  /**
   * Appends one record.
   * @param data       the packet, starting at the link-layer header; bytes beyond snaplen are dropped
   * @param seconds    timestamp, whole seconds since the Unix epoch (0..2^32-1)
   * @param nanoseconds fraction of the second in nanoseconds (0..999999999); truncated to
   *                   microseconds in a microsecond file
   * @param originalLength length on the wire, default `data.length`; must be >= data.length
   */
  writePacket(data: Uint8Array, seconds: number, nanoseconds = 0, originalLength: number = data.length): void {
    if (this.closed) throw new Error('pcap writer is closed');
    if (!isU32(seconds)) throw new RangeError(`pcap timestamp seconds must be an integer in 0..2^32-1, got ${seconds}`);
    if (!Number.isInteger(nanoseconds) || nanoseconds < 0 || nanoseconds > 999_999_999) {
      throw new RangeError(`pcap timestamp nanoseconds must be an integer in 0..999999999, got ${nanoseconds}`);
    }
    if (!isU32(originalLength) || originalLength < data.length) {
      throw new RangeError(`pcap original length ${originalLength} is smaller than the ${data.length} bytes given or out of range`);
    }
    const included = data.length < this.options.snapLen ? data.length : this.options.snapLen;
    const fraction = this.options.resolution === 'ns' ? nanoseconds : Math.floor(nanoseconds / NANOS_PER_MICRO);

    if (this.used + PCAP_RECORD_HEADER_LENGTH > this.batch.length) this.flush();
    const b = this.batch;
    const at = this.used;
    if (this.options.bigEndian) {
      b.writeUInt32BE(seconds, at);
      b.writeUInt32BE(fraction, at + 4);
      b.writeUInt32BE(included, at + 8);
      b.writeUInt32BE(originalLength, at + 12);
    } else {
      b.writeUInt32LE(seconds, at);
      b.writeUInt32LE(fraction, at + 4);
      b.writeUInt32LE(included, at + 8);
      b.writeUInt32LE(originalLength, at + 12);
    }
    this.used = at + PCAP_RECORD_HEADER_LENGTH;

    if (this.used + included <= b.length) {
      b.set(included === data.length ? data : data.subarray(0, included), this.used);
      this.used += included;
    } else {
      // Too large for the space left: emit what is batched, then the packet as it is.
      this.flush();
      if (included <= b.length) {
        b.set(data.subarray(0, included), 0);
        this.used = included;
      } else {
        this.sink.write(data.subarray(0, included));
      }
    }
    this.packets += 1;
    this.bytes += PCAP_RECORD_HEADER_LENGTH + included;
  }

  /** Hands every batched byte to the sink. */
  flush(): void {
    if (this.used === 0) return;
    this.sink.write(this.batch.subarray(0, this.used));
    this.used = 0;
  }

  /** Flushes and closes the sink. Further writes throw; closing twice is a no-op. */
  close(): void {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    this.sink.close?.();
  }
}

/**
 * A sink writing to a file descriptor with synchronous writes. A failed write
 * (a full disk: ENOSPC, /dev/full) is MoatError 3008 naming `name`; a reader
 * that went away (EPIPE) is passed on as it is, for the CLI to stop quietly.
 * @param ownsFd close the descriptor when the writer closes (default false)
 * @param name the file in error messages (default "file descriptor N")
 */
export function fdSink(fd: number, ownsFd = false, name = `file descriptor ${fd}`): PcapSink {
  return {
    write(chunk: Uint8Array): void {
      let offset = 0;
      try {
        while (offset < chunk.length) offset += writeSync(fd, chunk, offset, chunk.length - offset);
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        if (e.code === 'EPIPE') throw err;
        throw new MoatError('CAPTURE_WRITE', `${name}: cannot write: ${e.code === 'ENOSPC' ? 'no space left on device' : e.code ?? e.message}`, { file: name, cause: err });
      }
    },
    close(): void {
      if (ownsFd) closeSync(fd);
    },
  };
}

/**
 * A sink writing to a Node.js stream. Each batch is copied, because the stream may
 * hold on to it; closing the writer ends the stream. Back-pressure is the caller's
 * concern (watch `stream.writableNeedDrain`).
 */
export function streamSink(stream: Writable): PcapSink {
  return {
    write(chunk: Uint8Array): void {
      stream.write(Buffer.from(chunk));
    },
    close(): void {
      stream.end();
    },
  };
}

/** A sink that collects the file in memory; `toBuffer()` returns it. */
export class BufferSink implements PcapSink {
  private readonly chunks: Buffer[] = [];
  private length = 0;

  write(chunk: Uint8Array): void {
    this.chunks.push(Buffer.from(chunk));
    this.length += chunk.length;
  }

  /** Everything written so far, as one buffer. */
  toBuffer(): Buffer {
    return Buffer.concat(this.chunks, this.length);
  }
}

/** Creates (or truncates) `path` and returns a writer that owns the file. */
export function openPcapFile(path: string, options: PcapWriterOptions = {}): PcapWriter {
  const fd = openSync(path, 'w');
  try {
    return new PcapWriter(fdSink(fd, true, path), options);
  } catch (err) {
    closeSync(fd);
    throw err;
  }
}

/** One packet for {@link buildPcap}. */
export interface PcapPacket {
  data: Uint8Array;
  /** Whole seconds since the Unix epoch; default 0. */
  seconds?: number;
  /** Fraction of the second in nanoseconds; default 0. */
  nanoseconds?: number;
  /** Length on the wire; default `data.length`. */
  originalLength?: number;
}

/** Encodes a whole pcap file in memory. */
export function buildPcap(packets: Iterable<PcapPacket>, options: PcapWriterOptions = {}): Buffer {
  const sink = new BufferSink();
  const writer = new PcapWriter(sink, options);
  for (const p of packets) writer.writePacket(p.data, p.seconds ?? 0, p.nanoseconds ?? 0, p.originalLength ?? p.data.length);
  writer.close();
  return sink.toBuffer();
}
