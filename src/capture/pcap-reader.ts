// Streaming reader for capture files, classic pcap and pcapng: the public cursor
// that picks the format by its magic number and hands each record to that format's
// parser (pcap-records.ts, pcapng-blocks.ts) over one buffered file (file-cursor.ts).

import { MoatError } from '../errors/index.js';
import { FileCursor, hex32 } from './file-cursor.js';
import { ClassicRecords, PCAP_MAGIC_MODIFIED, PCAP_MAGIC_MODIFIED_SWAPPED, isClassicPcapMagic } from './pcap-records.js';
import { PCAPNG_SHB, PcapngBlocks } from './pcapng-blocks.js';
import { PacketBatch, type CaptureFormat, type CaptureInterface, type CurrentPacket } from './reader-types.js';

export { PCAP_READER_BUFFER_SIZE, PCAP_READER_MAX_BUFFER_SIZE } from './file-cursor.js';
export { PCAP_MAX_STANDARD_PACKET_LENGTH, PacketBatch, type CaptureFormat, type CaptureInterface, type TimestampResolution } from './reader-types.js';

/** Options of {@link PcapReader.open}. */
export interface PcapReaderOptions {
  /** Initial read-buffer size in bytes (>= 64); default 4 MiB. */
  bufferSize?: number;
  /** Largest the read buffer may grow to (>= bufferSize); default 64 MiB. */
  maxBufferSize?: number;
}

const STATE_OPEN = 0;
const STATE_DONE = 1;
const STATE_FAILED = 2;

/**
 * A cursor over the packets of a pcap or pcapng file. Read-only fields describe the
 * current packet after next() returned true; they are overwritten by the next call.
 *
 * It allocates nothing per packet:
 *
 *   const r = PcapReader.open('trace.pcap');
 *   try {
 *     while (r.next()) handle(r.data, r.offset, r.caplen, r.linkType, r.tsSec, r.tsNsec);
 *   } finally {
 *     r.close();
 *   }
 *
 * Memory is constant whatever the file size (one reused buffer, 4 MiB by default,
 * grown only for a record larger than it, up to 64 MiB by default). Every damaged
 * input is a MoatError whose message names the file and the byte offset of the faulty
 * record or block, and next() reports it only after it has returned every good packet
 * that precedes it:
 *   3001 CAPTURE_BAD_MAGIC          not pcap/pcapng (also: modified pcap, gzip, bad first SHB byte-order magic)
 *   3002 CAPTURE_TRUNCATED          the file ends inside its header, a record or a block (an empty file too)
 *   3003 CAPTURE_BAD_LENGTH         a length above the limits (packet above its snaplen limit, block above the cap)
 *   3004 CAPTURE_BAD_BLOCK          a malformed pcapng block (length < 12 or not a multiple of 4, trailing length
 *                                   differs, too short for its type, packet or option overrunning the block...)
 *   3005 CAPTURE_UNKNOWN_INTERFACE  a packet for an interface its section did not declare
 *   3006 CAPTURE_READ               the file cannot be opened or read
 */
export class PcapReader implements CurrentPacket {
  /** Path of the file, as given to open(); every error message starts with it. */
  readonly path: string;
  /** 'pcap' or 'pcapng'. */
  readonly format: CaptureFormat;

  // ---- the current packet (valid after next() returned true, until the next call) ----
  /** The reader's internal buffer holding the packet bytes. Valid until the next next() call. */
  data: Buffer;
  /** Start of the packet bytes in {@link data}. */
  offset = 0;
  /** Bytes captured (stored in the file). */
  caplen = 0;
  /** Length of the packet on the wire. */
  origLen = 0;
  /** LINKTYPE_* of the packet's interface. */
  linkType = 0;
  /** Interface of the packet within its pcapng section; always 0 in a classic pcap. */
  interfaceId = 0;
  /** Timestamp, whole seconds since the Unix epoch; -1 when the record has none (pcapng SPB). */
  tsSec = 0;
  /** Timestamp, nanoseconds within the second (0..999999999); -1 when the record has none. */
  tsNsec = 0;
  /** Byte offset in the file of the packet's record header or block. */
  fileOffset = 0;
  /** Packets returned so far. */
  packets = 0;
  /** pcapng section of the current packet (0 for the first, and always 0 in a classic pcap). */
  section = 0;

  private readonly cursor: FileCursor;
  // The format's parser, chosen once at open: exactly one is set, and each call site sees one class.
  private readonly records: ClassicRecords | null = null;
  private readonly blocks: PcapngBlocks | null = null;
  private state = STATE_OPEN;
  private failure: MoatError | undefined;

  private constructor(cursor: FileCursor) {
    this.path = cursor.path;
    this.cursor = cursor;
    this.data = cursor.buf;
    if (!cursor.fill(4)) {
      if (cursor.end === 0) throw cursor.fail('CAPTURE_TRUNCATED', 'the file is empty (0 bytes); a pcap or pcapng file starts with a 4-byte magic number at byte 0');
      throw cursor.truncated('the magic number', 0, 4);
    }
    const b = cursor.buf;
    const magic = b.readUInt32BE(0);
    if (magic === PCAPNG_SHB) {
      this.blocks = new PcapngBlocks(cursor, this);
      this.format = 'pcapng';
    } else if (isClassicPcapMagic(magic)) {
      this.records = new ClassicRecords(cursor, this, magic);
      this.linkType = this.records.linkType;
      this.format = 'pcap';
    } else if (magic === PCAP_MAGIC_MODIFIED || magic === PCAP_MAGIC_MODIFIED_SWAPPED) {
      throw cursor.fail(
        'CAPTURE_BAD_MAGIC',
        `the magic number at byte 0 is ${hex32(PCAP_MAGIC_MODIFIED)}, the "modified" pcap format of Kuznetzov's patched libpcap, which is not supported; convert it with \`editcap -F pcap\``,
      );
    } else if (b[0] === 0x1f && b[1] === 0x8b) {
      throw cursor.fail('CAPTURE_BAD_MAGIC', 'the file is gzip-compressed (magic 1f 8b at byte 0); decompress it first');
    } else {
      throw cursor.fail('CAPTURE_BAD_MAGIC', `not a pcap or pcapng file: the magic number at byte 0 is ${hex32(magic)}`);
    }
    this.data = cursor.buf;
  }

  /**
   * Opens a capture file and reads its header.
   * @throws MoatError 3006 if the file cannot be read, 3001 if it is not pcap or pcapng,
   *   3002 if it ends inside its header, 3003/3004 if its first pcapng block is damaged
   */
  static open(path: string, options: PcapReaderOptions = {}): PcapReader {
    const cursor = FileCursor.open(path, options.bufferSize, options.maxBufferSize);
    try {
      return new PcapReader(cursor);
    } catch (err) {
      cursor.close();
      throw err;
    }
  }

  /** Byte order of the file (classic pcap) or of the current section (pcapng). */
  get bigEndian(): boolean {
    return this.records !== null ? !this.records.le : !this.blocks!.le;
  }

  /** Size of the internal buffer (grows only for a record larger than it). */
  get bufferSize(): number {
    return this.cursor.buf.length;
  }

  /** Interfaces declared so far in the current section (1 for a classic pcap). */
  get interfaceCount(): number {
    return this.records !== null ? 1 : this.blocks!.interfaceCount;
  }

  /** What the current section declares about an interface; undefined if it declared no such interface. */
  interfaceInfo(id: number): CaptureInterface | undefined {
    if (this.records !== null) return id === 0 ? this.records.interfaceInfo() : undefined;
    return this.blocks!.interfaceInfo(id);
  }

  /**
   * Advances to the next packet. Returns false at the clean end of the file. On damage,
   * throws a MoatError after having returned every good packet before it; the reader is
   * then closed, and further calls throw the same error.
   */
  next(): boolean {
    if (this.state !== STATE_OPEN) {
      if (this.state === STATE_FAILED) throw this.failure!;
      return false;
    }
    try {
      const ok = this.records !== null ? this.records.next() : this.blocks!.next();
      // The buffer is replaced when it grows for a large record.
      this.data = this.cursor.buf;
      if (ok) {
        this.packets += 1;
      } else {
        this.state = STATE_DONE;
        this.cursor.close();
      }
      return ok;
    } catch (err) {
      this.state = STATE_FAILED;
      this.failure = err instanceof MoatError ? err : this.cursor.readError(err);
      this.cursor.close();
      throw this.failure;
    }
  }

  /**
   * Reads up to `batch.capacity` packets at once into `batch` and returns how
   * many (0 at the end of the file, as next() returns false). The first is
   * what next() would return (it may refill the buffer or throw); the others
   * are the complete classic pcap records already in the buffer after it,
   * read in one loop. A record next() would reject ends the batch before it,
   * so the next call throws for it, after every good packet. Their bytes are
   * in {@link data} at `batch.offsets[k]`, valid until the next read; the
   * reader's own fields (offset, fileOffset...) describe the last packet.
   * Cheaper per packet than next() and the reader's fields (measured:
   * bench/pipeline.bench.ts). pcapng files: one packet per batch.
   */
  nextBatch(batch: PacketBatch): number {
    if (!this.next()) {
      batch.count = 0;
      return 0;
    }
    batch.offsets[0] = this.offset;
    batch.caplens[0] = this.caplen;
    batch.origLens[0] = this.origLen;
    batch.tsSec[0] = this.tsSec;
    batch.tsNsec[0] = this.tsNsec;
    let k = 1;
    if (this.records !== null) {
      k = this.records.nextBuffered(batch);
      this.packets += k - 1;
    }
    batch.count = k;
    return k;
  }

  /** Closes the file. Idempotent; next() returns false afterwards (or rethrows an earlier error). */
  close(): void {
    if (this.state === STATE_OPEN) this.state = STATE_DONE;
    this.cursor.close();
  }
}

/**
 * Reads every packet of a capture file, calling `onPacket(reader)` for each; the reader's
 * fields describe the packet and its buffer is reused after the callback returns.
 * Returns the number of packets. Throws like {@link PcapReader.next}.
 */
export function readCapture(path: string, onPacket: (reader: PcapReader) => void, options: PcapReaderOptions = {}): number {
  const r = PcapReader.open(path, options);
  try {
    while (r.next()) onPacket(r);
    return r.packets;
  } finally {
    r.close();
  }
}
