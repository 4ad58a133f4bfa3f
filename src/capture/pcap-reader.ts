// Streaming reader for capture files: classic pcap and pcapng.
//
// Classic pcap (libpcap "tcpdump" format):
//   magic 0xa1b2c3d4 (microsecond timestamps) or 0xa1b23c4d (nanosecond), in either
//   byte order; the "modified" magic 0xa1b2cd34 (Kuznetzov's patched libpcap, with
//   longer record headers) is rejected rather than misread. The link-type field
//   carries FCS information in its upper bits, which is masked off (LT_LINKTYPE).
//
// pcapng (IETF draft-ietf-opsawg-pcapng):
//   a file is one or more sections, each starting with a Section Header Block whose
//   byte-order magic decides the byte order of the whole section. Interface
//   Description Blocks declare interfaces (link type, snaplen, if_tsresol: 10^-n or
//   2^-n seconds per tick, microseconds by default); interface numbers restart in
//   every section. Packets come in Enhanced Packet Blocks, Simple Packet Blocks (no
//   timestamp, interface 0) and the obsolete Packet Block. Every other block (name
//   resolution, statistics, decryption secrets, custom...) is checked and skipped.
//
// Memory is constant whatever the file size: the file is read with fs.readSync into
// one reused buffer (4 MiB by default). The buffer grows only when a single record or
// block is larger than it, up to a hard cap (64 MiB by default); a length above the
// cap, or a packet above its snaplen limit, is an error rather than an allocation.
//
// The API is a pull cursor that allocates nothing per packet:
//
//   const r = PcapReader.open('trace.pcap');
//   try {
//     while (r.next()) handle(r.data, r.offset, r.caplen, r.linkType, r.tsSec, r.tsNsec);
//   } finally {
//     r.close();
//   }
//
// Every damaged input is a MoatError whose message names the file and the byte offset
// of the faulty record or block, and next() reports it only after it has returned
// every good packet that precedes it:
//   3001 CAPTURE_BAD_MAGIC          not pcap/pcapng (also: modified pcap, gzip, bad first SHB byte-order magic)
//   3002 CAPTURE_TRUNCATED          the file ends inside its header, a record or a block (an empty file too)
//   3003 CAPTURE_BAD_LENGTH         a length above the limits (packet above its snaplen limit, block above the cap)
//   3004 CAPTURE_BAD_BLOCK          a malformed pcapng block (length < 12 or not a multiple of 4, trailing length
//                                   differs, too short for its type, packet or option overrunning the block...)
//   3005 CAPTURE_UNKNOWN_INTERFACE  a packet for an interface its section did not declare
//   3006 CAPTURE_READ               the file cannot be opened or read

import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { MoatError, type ErrorName } from '../errors/index.js';

/** Initial size of the read buffer. */
export const PCAP_READER_BUFFER_SIZE = 4 * 1024 * 1024;
/** Hard cap of the read buffer, hence of one record or block. */
export const PCAP_READER_MAX_BUFFER_SIZE = 64 * 1024 * 1024;
/** Packet length always accepted whatever the snaplen says (libpcap's and Wireshark's maximum snaplen). */
export const PCAP_MAX_STANDARD_PACKET_LENGTH = 262_144;

/** Format of a capture file. */
export type CaptureFormat = 'pcap' | 'pcapng';

/** Timestamp resolution: one tick is `base`^-`exponent` seconds. */
export interface TimestampResolution {
  readonly base: 10 | 2;
  readonly exponent: number;
}

/** What a capture declares about one interface (the single implicit one of a classic pcap). */
export interface CaptureInterface {
  readonly linkType: number;
  /** 0 when the file says "no limit". */
  readonly snapLen: number;
  readonly resolution: TimestampResolution;
}

/** Options of {@link PcapReader.open}. */
export interface PcapReaderOptions {
  /** Initial read-buffer size in bytes (>= 64); default 4 MiB. */
  bufferSize?: number;
  /** Largest the read buffer may grow to (>= bufferSize); default 64 MiB. */
  maxBufferSize?: number;
}

const PCAPNG_SHB = 0x0a0d0d0a;
const PCAPNG_BOM = 0x1a2b3c4d;
const PCAPNG_BOM_SWAPPED = 0x4d3c2b1a;
const PCAPNG_IDB = 1;
const PCAPNG_PB = 2;
const PCAPNG_SPB = 3;
const PCAPNG_EPB = 6;
const OPT_ENDOFOPT = 0;
const OPT_IF_TSRESOL = 9;

const MAGIC_US = 0xa1b2c3d4;
const MAGIC_NS = 0xa1b23c4d;
const MAGIC_US_SWAPPED = 0xd4c3b2a1;
const MAGIC_NS_SWAPPED = 0x4d3cb2a1;
const MAGIC_MODIFIED = 0xa1b2cd34;
const MAGIC_MODIFIED_SWAPPED = 0x34cdb2a1;

/** libpcap's LT_LINKTYPE mask: the upper bits of the link-type field hold FCS information. */
const LINKTYPE_MASK = 0x03ff_ffff;
/** More interfaces than this in one section is treated as a malformed file. */
const MAX_INTERFACES = 65_536;

const TWO_32 = 4_294_967_296;
/** 10^9 = 2^9 * 1953125: lets binary fractions become nanoseconds exactly in doubles. */
const NS_ODD_FACTOR = 1_953_125;

// Timestamp conversion modes of a pcapng interface.
const TS_DECIMAL_QUICK = 4; // 10^-n, 4 <= n <= 9 (microseconds, nanoseconds...)
const TS_DECIMAL = 0; // 10^-n, n <= 3
const TS_DECIMAL_FINE = 1; // 10^-n, n > 9
const TS_BINARY = 2; // 2^-n, n <= 32
const TS_BINARY_FINE = 3; // 2^-n, n > 32

const STATE_OPEN = 0;
const STATE_DONE = 1;
const STATE_FAILED = 2;

function pad4(n: number): number {
  return (n + 3) & ~3;
}

// Unsigned 32-bit reads without Buffer's argument validation (callers keep offsets in bounds).
// Whole seconds in a nanosecond count that the writer did not normalise
// (carried into the seconds).
function carriedSeconds(nsec: number): number {
  return nsec >= 1_000_000_000 ? Math.floor(nsec / 1_000_000_000) : 0;
}

/** Packets read at once by {@link PcapReader.nextBatch}: their places in the reader's buffer, lengths and timestamps. */
export class PacketBatch {
  /** Start of each packet's bytes in the reader's `data`. */
  readonly offsets: Int32Array;
  readonly caplens: Int32Array;
  readonly origLens: Int32Array;
  /** Timestamps as PcapReader.tsSec and tsNsec. */
  readonly tsSec: Float64Array;
  readonly tsNsec: Float64Array;
  /** Packets of the last nextBatch() call. */
  count = 0;

  constructor(readonly capacity = 32) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`a packet batch holds at least 1 packet, got ${capacity}`);
    this.offsets = new Int32Array(capacity);
    this.caplens = new Int32Array(capacity);
    this.origLens = new Int32Array(capacity);
    this.tsSec = new Float64Array(capacity);
    this.tsNsec = new Float64Array(capacity);
  }
}

function le32(b: Buffer, o: number): number {
  return (b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16)) + b[o + 3]! * 0x100_0000;
}

function be32(b: Buffer, o: number): number {
  return b[o]! * 0x100_0000 + ((b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!);
}

function hex32(n: number): string {
  return `0x${n.toString(16).padStart(8, '0')}`;
}

/**
 * A cursor over the packets of a pcap or pcapng file. Read-only fields describe the
 * current packet after next() returned true; they are overwritten by the next call.
 */
export class PcapReader {
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

  private fd: number;
  private readonly positional: boolean;
  private readonly fileSize: number;
  private readonly maxBufferSize: number;
  private buf: Buffer;
  /** File offset of buf[0]. */
  private base = 0;
  /** Window of unread bytes: buf[start, end). */
  private start = 0;
  private end = 0;
  private eof = false;
  private state = STATE_OPEN;
  private failure: MoatError | undefined;
  /** Byte order of the file (classic) or of the current section (pcapng). */
  private le = true;

  // classic pcap
  private classicLinkType = 0;
  private classicSnapLen = 0;
  private classicNanos = false;
  private classicLimit = 0;

  // pcapng interfaces of the current section, in parallel arrays
  private readonly ifLinkType: number[] = [];
  private readonly ifSnapLen: number[] = [];
  private readonly ifTsMode: number[] = [];
  private readonly ifTsExponent: number[] = [];
  /** TS_DECIMAL: 10^n; TS_BINARY: 2^n. */
  private readonly ifTsDivisor: number[] = [];
  /** TS_DECIMAL: 10^(9-n); TS_BINARY: 2^|n-9|. */
  private readonly ifTsFactor: number[] = [];

  // scratch results of divmod64 (no allocation per packet)
  private qHi = 0;
  private qLo = 0;
  private readonly digits = new Float64Array(10);

  private constructor(path: string, fd: number, options: PcapReaderOptions) {
    this.path = path;
    this.fd = fd;
    const size = options.bufferSize ?? PCAP_READER_BUFFER_SIZE;
    const max = options.maxBufferSize ?? Math.max(PCAP_READER_MAX_BUFFER_SIZE, size);
    if (!Number.isInteger(size) || size < 64) throw new RangeError(`pcap reader buffer size must be an integer >= 64, got ${size}`);
    if (!Number.isInteger(max) || max < size) throw new RangeError(`pcap reader maximum buffer size must be an integer >= the buffer size ${size}, got ${max}`);
    this.maxBufferSize = max;
    let stat;
    try {
      stat = fstatSync(fd);
    } catch (cause) {
      throw this.readError(cause);
    }
    if (stat.isDirectory()) throw new MoatError('CAPTURE_READ', `${path}: cannot read capture file: it is a directory`, { file: path });
    this.positional = stat.isFile();
    this.fileSize = stat.isFile() ? stat.size : Infinity;
    this.buf = Buffer.allocUnsafe(size);
    this.data = this.buf;
    this.format = this.readFileHeader();
  }

  /**
   * Opens a capture file and reads its header.
   * @throws MoatError 3006 if the file cannot be read, 3001 if it is not pcap or pcapng,
   *   3002 if it ends inside its header, 3003/3004 if its first pcapng block is damaged
   */
  static open(path: string, options: PcapReaderOptions = {}): PcapReader {
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch (cause) {
      throw new MoatError('CAPTURE_READ', `${path}: cannot open capture file: ${(cause as Error).message}`, { file: path, cause });
    }
    try {
      return new PcapReader(path, fd, options);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /** Byte order of the file (classic pcap) or of the current section (pcapng). */
  get bigEndian(): boolean {
    return !this.le;
  }

  /** Size of the internal buffer (grows only for a record larger than it). */
  get bufferSize(): number {
    return this.buf.length;
  }

  /** Interfaces declared so far in the current section (1 for a classic pcap). */
  get interfaceCount(): number {
    return this.format === 'pcap' ? 1 : this.ifLinkType.length;
  }

  /** What the current section declares about an interface; undefined if it declared no such interface. */
  interfaceInfo(id: number): CaptureInterface | undefined {
    if (this.format === 'pcap') {
      if (id !== 0) return undefined;
      return { linkType: this.classicLinkType, snapLen: this.classicSnapLen, resolution: { base: 10, exponent: this.classicNanos ? 9 : 6 } };
    }
    if (!(id >= 0 && id < this.ifLinkType.length)) return undefined;
    const mode = this.ifTsMode[id]!;
    return {
      linkType: this.ifLinkType[id]!,
      snapLen: this.ifSnapLen[id]!,
      resolution: { base: mode === TS_BINARY || mode === TS_BINARY_FINE ? 2 : 10, exponent: this.ifTsExponent[id]! },
    };
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
      const ok = this.format === 'pcap' ? this.nextClassic() : this.nextBlock();
      if (ok) {
        this.packets += 1;
      } else {
        this.state = STATE_DONE;
        this.release();
      }
      return ok;
    } catch (err) {
      this.state = STATE_FAILED;
      this.failure = err instanceof MoatError ? err : this.readError(err);
      this.release();
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
   * Reading each packet through next() and the reader's fields cost ~20 ns
   * per packet more: pipeline benchmark, 50 rules, alternating single-build
   * processes, CPU per packet 348 -> 321 and 334 -> 318 ns (6 and 4 pairs);
   * one rule, 127 -> 106 ns. (Two packet paths in one process, one reading
   * each way, measured the full ruleset the other way round, +25 ns: there the
   * two loops share process()'s type feedback.) pcapng files: one packet per
   * batch.
   */
  nextBatch(batch: PacketBatch): number {
    if (!this.next()) {
      batch.count = 0;
      return 0;
    }
    const offsets = batch.offsets;
    const caplens = batch.caplens;
    const origLens = batch.origLens;
    const tsSec = batch.tsSec;
    const tsNsec = batch.tsNsec;
    offsets[0] = this.offset;
    caplens[0] = this.caplen;
    origLens[0] = this.origLen;
    tsSec[0] = this.tsSec;
    tsNsec[0] = this.tsNsec;
    let k = 1;
    if (this.format === 'pcap') {
      const b = this.buf;
      const end = this.end;
      const le = this.le;
      const micros = !this.classicNanos;
      const limit = this.classicLimit;
      const n = batch.capacity;
      let p = this.start;
      let last = -1;
      while (k < n && end - p >= 16) {
        const incl = le ? le32(b, p + 8) : be32(b, p + 8);
        if (incl > limit || end - p < 16 + incl) break;
        const frac = le ? le32(b, p + 4) : be32(b, p + 4);
        const nsec = micros ? frac * 1000 : frac;
        const carry = carriedSeconds(nsec);
        tsSec[k] = (le ? le32(b, p) : be32(b, p)) + carry;
        tsNsec[k] = nsec - carry * 1_000_000_000;
        origLens[k] = le ? le32(b, p + 12) : be32(b, p + 12);
        offsets[k] = p + 16;
        caplens[k] = incl;
        last = p;
        p += 16 + incl;
        k++;
      }
      if (last >= 0) {
        this.start = p;
        this.packets += k - 1;
        this.offset = offsets[k - 1]!;
        this.caplen = caplens[k - 1]!;
        this.origLen = origLens[k - 1]!;
        this.tsSec = tsSec[k - 1]!;
        this.tsNsec = tsNsec[k - 1]!;
        this.fileOffset = this.base + last;
      }
    }
    batch.count = k;
    return k;
  }

  /**
   * Where the next packets already buffered are, without advancing: for as
   * many of the packets the next next() calls will return as fit from index
   * `at` of the arrays, the start of their bytes in {@link data} into
   * offsets[at + k] and their captured length into caplens[at + k]; returns
   * how many (0 for pcapng, at the end, on damage, or when
   * the next record is not wholly buffered). A look-ahead for callers that
   * batch work across packets (PacketPath.lookAhead): the bytes are those
   * next() will return, valid until the next next() call, and the returned
   * packets share the current link type.
   */
  ahead(offsets: Int32Array, caplens: Int32Array, at: number): number {
    if (this.state !== STATE_OPEN || this.format !== 'pcap') return 0;
    const b = this.buf;
    const end = this.end;
    const limit = Math.min(offsets.length, caplens.length);
    let p = this.start;
    let k = at;
    while (k < limit && end - p >= 16) {
      const incl = this.le ? le32(b, p + 8) : be32(b, p + 8);
      if (incl > this.classicLimit || end - p < 16 + incl) break;
      offsets[k] = p + 16;
      caplens[k] = incl;
      k++;
      p += 16 + incl;
    }
    return k - at;
  }

  /** Closes the file. Idempotent; next() returns false afterwards (or rethrows an earlier error). */
  close(): void {
    if (this.state === STATE_OPEN) this.state = STATE_DONE;
    this.release();
  }

  private release(): void {
    if (this.fd >= 0) {
      const fd = this.fd;
      this.fd = -1;
      closeSync(fd);
    }
  }

  // ---------------------------------------------------------------- buffering

  /**
   * Makes sure buf[start, start+n) holds file bytes, compacting, growing (for n larger than
   * the buffer; callers check n against the cap first) and reading as needed. Returns false
   * if the file ends first; what is there stays in buf[start, end).
   */
  private fill(n: number): boolean {
    if (this.end - this.start >= n) return true;
    if (this.eof) return false;
    const kept = this.end - this.start;
    if (n > this.buf.length) {
      // Do not allocate for a record the file cannot hold.
      if (this.positional && this.base + this.start + n > this.currentFileSize()) return false;
      const grown = Buffer.allocUnsafe(Math.min(this.maxBufferSize, Math.max(n, this.buf.length * 2)));
      this.buf.copy(grown, 0, this.start, this.end);
      this.buf = grown;
      this.data = grown;
    } else if (this.start > 0) {
      this.buf.copyWithin(0, this.start, this.end);
    }
    this.base += this.start;
    this.start = 0;
    this.end = kept;
    while (this.end < n) {
      const got = this.read(this.end, this.buf.length - this.end);
      if (got === 0) {
        this.eof = true;
        return false;
      }
      this.end += got;
    }
    return true;
  }

  private read(at: number, length: number): number {
    try {
      return readSync(this.fd, this.buf, at, length, this.positional ? this.base + at : null);
    } catch (cause) {
      throw this.readError(cause);
    }
  }

  private currentFileSize(): number {
    try {
      return fstatSync(this.fd).size;
    } catch {
      return this.fileSize;
    }
  }

  // ---------------------------------------------------------------- errors

  private fail(name: ErrorName, text: string): MoatError {
    return new MoatError(name, `${this.path}: ${text}`, { file: this.path });
  }

  private readError(cause: unknown): MoatError {
    const why = cause instanceof Error ? cause.message : String(cause);
    return new MoatError('CAPTURE_READ', `${this.path}: cannot read capture file at byte ${this.base + this.end}: ${why}`, { file: this.path, cause });
  }

  /** The file ends inside the `what` at file offset `at` that needs `need` bytes. */
  private truncated(what: string, at: number, need: number): MoatError {
    const ends = this.positional ? `the file ends at byte ${this.currentFileSize()}` : `the input ends after ${this.base + this.end - at} of them`;
    return this.fail('CAPTURE_TRUNCATED', `${what} at byte ${at} is cut short: it needs ${need} bytes, ${ends}`);
  }

  // ---------------------------------------------------------------- file header

  private readFileHeader(): CaptureFormat {
    if (!this.fill(4)) {
      if (this.end === 0) throw this.fail('CAPTURE_TRUNCATED', 'the file is empty (0 bytes); a pcap or pcapng file starts with a 4-byte magic number at byte 0');
      throw this.truncated('the magic number', 0, 4);
    }
    const b = this.buf;
    const magic = b.readUInt32BE(0);
    if (magic === PCAPNG_SHB) {
      this.readFirstSectionHeader();
      return 'pcapng';
    }
    if (magic === MAGIC_US || magic === MAGIC_NS) this.le = false;
    else if (magic === MAGIC_US_SWAPPED || magic === MAGIC_NS_SWAPPED) this.le = true;
    else if (magic === MAGIC_MODIFIED || magic === MAGIC_MODIFIED_SWAPPED) {
      throw this.fail(
        'CAPTURE_BAD_MAGIC',
        `the magic number at byte 0 is ${hex32(MAGIC_MODIFIED)}, the "modified" pcap format of Kuznetzov's patched libpcap, which is not supported; convert it with \`editcap -F pcap\``,
      );
    } else if (b[0] === 0x1f && b[1] === 0x8b) {
      throw this.fail('CAPTURE_BAD_MAGIC', 'the file is gzip-compressed (magic 1f 8b at byte 0); decompress it first');
    } else {
      throw this.fail('CAPTURE_BAD_MAGIC', `not a pcap or pcapng file: the magic number at byte 0 is ${hex32(magic)}`);
    }
    this.classicNanos = magic === MAGIC_NS || magic === MAGIC_NS_SWAPPED;
    if (!this.fill(24)) throw this.truncated('the 24-byte pcap file header', 0, 24);
    const major = this.u16(4);
    const minor = this.u16(6);
    if (major !== 2) throw this.fail('CAPTURE_BAD_MAGIC', `unsupported pcap version ${major}.${minor} in the file header at byte 0 (only 2.x exists)`);
    this.classicSnapLen = this.u32(16);
    this.classicLinkType = this.u32(20) & LINKTYPE_MASK;
    this.classicLimit = Math.min(Math.max(this.classicSnapLen, PCAP_MAX_STANDARD_PACKET_LENGTH), this.maxBufferSize - 16);
    this.linkType = this.classicLinkType;
    this.start = 24;
    return 'pcap';
  }

  private readFirstSectionHeader(): void {
    if (!this.fill(12)) throw this.truncated('the pcapng section header block', 0, 12);
    const bom = this.buf.readUInt32LE(8);
    if (bom !== PCAPNG_BOM && bom !== PCAPNG_BOM_SWAPPED) {
      throw this.fail('CAPTURE_BAD_MAGIC', `not a pcapng file: the section header block at byte 0 has byte-order magic ${hex32(bom)}, not 0x1a2b3c4d`);
    }
    this.le = bom === PCAPNG_BOM;
    const len = this.blockLength(0, true);
    this.sectionHeader(0, len);
    this.section = 0;
    this.start = len;
  }

  // ---------------------------------------------------------------- classic pcap

  private nextClassic(): boolean {
    let at = this.start;
    if (this.end - at < 16) {
      if (!this.fill(16)) {
        if (this.end === this.start) return false;
        throw this.truncated('the pcap record', this.base + this.start, 16);
      }
      at = this.start;
    }
    const b = this.buf;
    let sec: number;
    let frac: number;
    let incl: number;
    let orig: number;
    if (this.le) {
      sec = le32(b, at);
      frac = le32(b, at + 4);
      incl = le32(b, at + 8);
      orig = le32(b, at + 12);
    } else {
      sec = be32(b, at);
      frac = be32(b, at + 4);
      incl = be32(b, at + 8);
      orig = be32(b, at + 12);
    }
    if (incl > this.classicLimit) {
      throw this.fail('CAPTURE_BAD_LENGTH', `record at byte ${this.base + at} claims ${incl} bytes (limit ${this.classicLimit})`);
    }
    const total = 16 + incl;
    if (this.end - at < total) {
      if (!this.fill(total)) throw this.truncated('the pcap record', this.base + this.start, total);
      at = this.start;
    }
    const nsec = this.classicNanos ? frac : frac * 1000;
    const carry = carriedSeconds(nsec);
    this.tsSec = sec + carry;
    this.tsNsec = nsec - carry * 1_000_000_000;
    this.caplen = incl;
    this.origLen = orig;
    this.offset = at + 16;
    this.fileOffset = this.base + at;
    this.start = at + total;
    return true;
  }

  // ---------------------------------------------------------------- pcapng

  private u32(o: number): number {
    return this.le ? le32(this.buf, o) : be32(this.buf, o);
  }

  private u16(o: number): number {
    return this.le ? this.buf.readUInt16LE(o) : this.buf.readUInt16BE(o);
  }

  /**
   * Validates the total length of the block at buf[at] (its 8-byte header is buffered) and
   * makes the whole block available. `at` may move when buffering compacts: read this.start after.
   */
  private blockLength(at: number, first: boolean): number {
    const fileAt = this.base + at;
    const len = this.u32(at + 4);
    if (len % 4 !== 0 || len < 12) {
      throw this.fail('CAPTURE_BAD_BLOCK', `block at byte ${fileAt} has total length ${len}, which is not a multiple of 4 of at least 12`);
    }
    if (len > this.maxBufferSize) {
      throw this.fail('CAPTURE_BAD_LENGTH', `block at byte ${fileAt} claims ${len} bytes (limit ${this.maxBufferSize})`);
    }
    if (!this.fill(len)) throw this.truncated(first ? 'the pcapng section header block' : 'the pcapng block', fileAt, len);
    const s = this.start;
    const trailer = this.u32(s + len - 4);
    if (trailer !== len) {
      throw this.fail('CAPTURE_BAD_BLOCK', `block at byte ${fileAt} starts with total length ${len} but ends with ${trailer}`);
    }
    return len;
  }

  /** Reads blocks until one holds a packet; false at the clean end of the file. */
  private nextBlock(): boolean {
    for (;;) {
      if (this.end - this.start < 12) {
        if (!this.fill(12)) {
          if (this.end === this.start) return false;
          throw this.truncated('the pcapng block', this.base + this.start, 12);
        }
      }
      let at = this.start;
      const fileAt = this.base + at;
      let type: number;
      if (le32(this.buf, at) === PCAPNG_SHB) {
        const bom = le32(this.buf, at + 8);
        if (bom === PCAPNG_BOM) this.le = true;
        else if (bom === PCAPNG_BOM_SWAPPED) this.le = false;
        else throw this.fail('CAPTURE_BAD_BLOCK', `section header block at byte ${fileAt} has byte-order magic ${hex32(bom)}, not 0x1a2b3c4d`);
        type = PCAPNG_SHB;
      } else {
        type = this.u32(at);
      }
      const len = this.blockLength(at, false);
      at = this.start;
      if (type === PCAPNG_EPB || type === PCAPNG_PB) {
        this.packetBlock(type, at, len);
        return true;
      }
      if (type === PCAPNG_SPB) {
        this.simplePacketBlock(at, len);
        return true;
      }
      if (type === PCAPNG_IDB) this.interfaceBlock(at, len);
      else if (type === PCAPNG_SHB) {
        this.sectionHeader(at, len);
        this.section += 1;
      }
      // Anything else (NRB, ISB, DSB, custom, unknown) is skipped.
      this.start = at + len;
    }
  }

  /** Parses an SHB whose byte order is already set; starts a new, interface-less section. */
  private sectionHeader(at: number, len: number): void {
    const fileAt = this.base + at;
    if (len < 28) throw this.fail('CAPTURE_BAD_BLOCK', `section header block at byte ${fileAt} is ${len} bytes, shorter than the 28-byte minimum`);
    const major = this.u16(at + 12);
    if (major !== 1) {
      throw this.fail('CAPTURE_BAD_BLOCK', `section header block at byte ${fileAt} has version ${major}.${this.u16(at + 14)}; only 1.x is supported`);
    }
    this.ifLinkType.length = 0;
    this.ifSnapLen.length = 0;
    this.ifTsMode.length = 0;
    this.ifTsExponent.length = 0;
    this.ifTsDivisor.length = 0;
    this.ifTsFactor.length = 0;
  }

  private interfaceBlock(at: number, len: number): void {
    const fileAt = this.base + at;
    if (len < 20) throw this.fail('CAPTURE_BAD_BLOCK', `interface description block at byte ${fileAt} is ${len} bytes, shorter than the 20-byte minimum`);
    if (this.ifLinkType.length >= MAX_INTERFACES) {
      throw this.fail('CAPTURE_BAD_BLOCK', `interface description block at byte ${fileAt} declares more than ${MAX_INTERFACES} interfaces in one section`);
    }
    const linkType = this.u16(at + 8);
    const snapLen = this.u32(at + 12);
    let base = 10;
    let exponent = 6;
    const endOpts = at + len - 4;
    for (let o = at + 16; o < endOpts; ) {
      if (o + 4 > endOpts) throw this.fail('CAPTURE_BAD_BLOCK', `interface description block at byte ${fileAt} has an option header cut by the block end at byte ${this.base + o}`);
      const code = this.u16(o);
      const olen = this.u16(o + 2);
      if (code === OPT_ENDOFOPT) break;
      if (o + 4 + olen > endOpts) {
        throw this.fail('CAPTURE_BAD_BLOCK', `interface description block at byte ${fileAt} has option ${code} at byte ${this.base + o} of ${olen} bytes overrunning the block`);
      }
      if (code === OPT_IF_TSRESOL && olen >= 1) {
        const v = this.buf[o + 4]!;
        base = v & 0x80 ? 2 : 10;
        exponent = v & 0x7f;
      }
      o += 4 + pad4(olen);
    }
    let mode: number;
    let divisor = 0;
    let factor = 0;
    if (base === 10) {
      mode = exponent <= 3 ? TS_DECIMAL : exponent <= 9 ? TS_DECIMAL_QUICK : TS_DECIMAL_FINE;
      if (exponent <= 9) {
        divisor = 10 ** exponent;
        factor = 10 ** (9 - exponent);
      }
    } else {
      mode = exponent <= 32 ? TS_BINARY : TS_BINARY_FINE;
      divisor = 2 ** exponent;
      factor = 2 ** Math.abs(exponent - 9);
    }
    this.ifLinkType.push(linkType);
    this.ifSnapLen.push(snapLen);
    this.ifTsMode.push(mode);
    this.ifTsExponent.push(exponent);
    this.ifTsDivisor.push(divisor);
    this.ifTsFactor.push(factor);
  }

  private unknownInterface(what: string, fileAt: number, id: number): MoatError {
    const n = this.ifLinkType.length;
    const declared = n === 0 ? 'none yet' : n === 1 ? 'only interface 0' : `interfaces 0..${n - 1}`;
    return this.fail('CAPTURE_UNKNOWN_INTERFACE', `${what} at byte ${fileAt} refers to interface ${id}, but section ${this.section} declares ${declared}`);
  }

  private packetLimit(id: number): number {
    const snap = this.ifSnapLen[id]!;
    return snap > PCAP_MAX_STANDARD_PACKET_LENGTH ? snap : PCAP_MAX_STANDARD_PACKET_LENGTH;
  }

  /** EPB (type 6) or obsolete PB (type 2): same layout, 32- or 16-bit interface id. */
  private packetBlock(type: number, at: number, len: number): void {
    const fileAt = this.base + at;
    const what = type === PCAPNG_EPB ? 'enhanced packet block' : 'packet block';
    if (len < 32) throw this.fail('CAPTURE_BAD_BLOCK', `${what} at byte ${fileAt} is ${len} bytes, shorter than the 32-byte minimum`);
    const id = type === PCAPNG_EPB ? this.u32(at + 8) : this.u16(at + 8);
    if (id >= this.ifLinkType.length) throw this.unknownInterface(what, fileAt, id);
    const caplen = this.u32(at + 20);
    const limit = this.packetLimit(id);
    if (caplen > limit) throw this.fail('CAPTURE_BAD_LENGTH', `${what} at byte ${fileAt} claims ${caplen} bytes (limit ${limit})`);
    if (32 + pad4(caplen) > len) {
      throw this.fail('CAPTURE_BAD_BLOCK', `${what} at byte ${fileAt} claims ${caplen} captured bytes, more than its ${len}-byte block holds`);
    }
    this.setTimestamp(this.u32(at + 12), this.u32(at + 16), id);
    this.caplen = caplen;
    this.origLen = this.u32(at + 24);
    this.interfaceId = id;
    this.linkType = this.ifLinkType[id]!;
    this.offset = at + 28;
    this.fileOffset = fileAt;
    this.start = at + len;
  }

  private simplePacketBlock(at: number, len: number): void {
    const fileAt = this.base + at;
    if (len < 16) throw this.fail('CAPTURE_BAD_BLOCK', `simple packet block at byte ${fileAt} is ${len} bytes, shorter than the 16-byte minimum`);
    if (this.ifLinkType.length === 0) throw this.unknownInterface('simple packet block', fileAt, 0);
    const orig = this.u32(at + 8);
    const snap = this.ifSnapLen[0]!;
    // The stored length is the original length cut at the snaplen, if there is one.
    const caplen = snap !== 0 && snap < orig ? snap : orig;
    const limit = this.packetLimit(0);
    if (caplen > limit) throw this.fail('CAPTURE_BAD_LENGTH', `simple packet block at byte ${fileAt} claims ${caplen} bytes (limit ${limit})`);
    if (16 + pad4(caplen) > len) {
      throw this.fail('CAPTURE_BAD_BLOCK', `simple packet block at byte ${fileAt} claims ${caplen} captured bytes, more than its ${len}-byte block holds`);
    }
    this.tsSec = -1;
    this.tsNsec = -1;
    this.caplen = caplen;
    this.origLen = orig;
    this.interfaceId = 0;
    this.linkType = this.ifLinkType[0]!;
    this.offset = at + 12;
    this.fileOffset = fileAt;
    this.start = at + len;
  }

  // ---------------------------------------------------------------- timestamps

  /**
   * Sets tsSec/tsNsec from a 64-bit tick count (hi, lo) of interface `id`, exactly and
   * without BigInt: 16-bit long division for decimal resolutions, exact power-of-two
   * scaling in doubles for binary ones. Seconds are exact up to 2^53.
   */
  private setTimestamp(hi: number, lo: number, id: number): void {
    const mode = this.ifTsMode[id]!;
    if (mode === TS_DECIMAL_QUICK) {
      // One division in doubles: the quotient of the rounded tick count is off by at
      // most one (rounding error <= 1024 ticks < d). The exact remainder modulo 2^32
      // (Math.imul) tells which way, since the true remainder lies in [-d, 2d) and 2d < 2^31.
      const d = this.ifTsDivisor[id]!;
      let s = Math.floor((hi * TWO_32 + lo) / d);
      let r = (lo - Math.imul(s, d)) >>> 0;
      if (r >= 0x8000_0000) {
        s -= 1;
        r = r - TWO_32 + d;
      } else if (r >= d) {
        s += 1;
        r -= d;
      }
      this.tsSec = s;
      this.tsNsec = r * this.ifTsFactor[id]!;
    } else if (mode === TS_DECIMAL) {
      const d = this.ifTsDivisor[id]!;
      if (hi < 0x20_0000) {
        // The tick count fits in 53 bits: one division, corrected for rounding.
        const t = hi * TWO_32 + lo;
        let s = Math.floor(t / d);
        let r = t - s * d;
        if (r < 0) {
          s -= 1;
          r += d;
        } else if (r >= d) {
          s += 1;
          r -= d;
        }
        this.tsSec = s;
        this.tsNsec = r * this.ifTsFactor[id]!;
      } else {
        const r = this.divmod64(hi, lo, d);
        this.tsSec = this.qHi * TWO_32 + this.qLo;
        this.tsNsec = r * this.ifTsFactor[id]!;
      }
    } else if (mode === TS_BINARY) {
      const n = this.ifTsExponent[id]!;
      const d = this.ifTsDivisor[id]!; // 2^n, n <= 32
      const q = Math.floor(lo / d);
      const r = lo - q * d; // < 2^32, so r * 1953125 < 2^53
      this.tsSec = hi * (TWO_32 / d) + q;
      this.tsNsec = n >= 9 ? Math.floor((r * NS_ODD_FACTOR) / this.ifTsFactor[id]!) : r * NS_ODD_FACTOR * this.ifTsFactor[id]!;
    } else if (mode === TS_DECIMAL_FINE) {
      this.fineDecimal(hi, lo, this.ifTsExponent[id]!);
    } else {
      this.fineBinary(hi, lo, this.ifTsExponent[id]!);
    }
  }

  /**
   * (hi * 2^32 + lo) divided by d (1 <= d < 2^32): quotient in qHi/qLo (32-bit halves),
   * remainder returned. Long division in one 32-bit and two 16-bit digits, every
   * intermediate below 2^48, so each step is exact in doubles.
   */
  private divmod64(hi: number, lo: number, d: number): number {
    const q2 = Math.floor(hi / d);
    let r = hi - q2 * d;
    let x = r * 65536 + (lo >>> 16);
    const q1 = Math.floor(x / d);
    r = x - q1 * d;
    x = r * 65536 + (lo & 0xffff);
    const q0 = Math.floor(x / d);
    r = x - q0 * d;
    this.qHi = q2;
    this.qLo = q1 * 65536 + q0;
    return r;
  }

  /** 10^-n with n > 9: divide down to nanoseconds in steps of at most 10^9, then split. */
  private fineDecimal(hi: number, lo: number, n: number): void {
    let h = hi;
    let l = lo;
    for (let k = n - 9; k > 0 && (h !== 0 || l !== 0); ) {
      const step = k > 9 ? 9 : k;
      this.divmod64(h, l, 10 ** step);
      h = this.qHi;
      l = this.qLo;
      k -= step;
    }
    const r = this.divmod64(h, l, 1_000_000_000);
    this.tsSec = this.qHi * TWO_32 + this.qLo;
    this.tsNsec = r;
  }

  /** 2^-n with n > 32: seconds by shifting; nanoseconds = floor(rem * 1953125 / 2^(n-9)) in 16-bit digits. */
  private fineBinary(hi: number, lo: number, n: number): void {
    let remHi: number;
    if (n >= 64) {
      this.tsSec = 0;
      remHi = hi;
    } else {
      const d = 2 ** (n - 32);
      const q = Math.floor(hi / d);
      this.tsSec = q;
      remHi = hi - q * d;
    }
    // P = rem * 1953125 as little-endian 16-bit digits (P < 2^85: six digits).
    const p = this.digits;
    p.fill(0);
    p[0] = lo & 0xffff;
    p[1] = lo >>> 16;
    p[2] = remHi & 0xffff;
    p[3] = remHi >>> 16;
    let carry = 0;
    for (let i = 0; i < p.length; i++) {
      const v = p[i]! * NS_ODD_FACTOR + carry;
      p[i] = v % 65536;
      carry = Math.floor(v / 65536);
    }
    // floor(P / 2^s), s = n - 9 <= 118: the result is below 10^9 < 2^30, so three digits suffice.
    const s = n - 9;
    const j = s >> 4;
    const b = s & 15;
    this.tsNsec = Math.floor(p[j]! / 2 ** b) + p[j + 1]! * 2 ** (16 - b) + p[j + 2]! * 2 ** (32 - b);
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
