// The pcapng parser of the capture-file reader: sections, interface descriptions
// and packet blocks, and the exact BigInt-free conversion of each interface's
// timestamp ticks to seconds and nanoseconds.

import { MoatError } from '../errors/index.js';
import { be32, hex32, le32, type FileCursor } from './file-cursor.js';
import { PCAP_MAX_STANDARD_PACKET_LENGTH, type CaptureInterface, type CurrentPacket } from './reader-types.js';

/** Block type of a Section Header Block, also the pcapng file magic (the same in both byte orders). */
export const PCAPNG_SHB = 0x0a0d0d0a;
const PCAPNG_BOM = 0x1a2b3c4d;
const PCAPNG_BOM_SWAPPED = 0x4d3c2b1a;
const PCAPNG_IDB = 1;
const PCAPNG_PB = 2;
const PCAPNG_SPB = 3;
const PCAPNG_EPB = 6;
const OPT_ENDOFOPT = 0;
const OPT_IF_TSRESOL = 9;

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

function pad4(n: number): number {
  return (n + 3) & ~3;
}

/**
 * pcapng (IETF draft-ietf-opsawg-pcapng): a file is one or more sections, each
 * starting with a Section Header Block whose byte-order magic decides the byte
 * order of the whole section. Interface Description Blocks declare interfaces (link
 * type, snaplen, if_tsresol: 10^-n or 2^-n seconds per tick, microseconds by
 * default); interface numbers restart in every section. Packets come in Enhanced
 * Packet Blocks, Simple Packet Blocks (no timestamp, interface 0) and the obsolete
 * Packet Block. Every other block (name resolution, statistics, decryption secrets,
 * custom...) is checked and skipped.
 */
export class PcapngBlocks {
  /** Byte order of the current section. */
  le = true;
  /** Sections seen before the current one. */
  section = 0;

  // the interfaces of the current section, in parallel arrays
  private readonly ifLinkType: number[] = [];
  private readonly ifSnapLen: number[] = [];
  private readonly ifTsMode: number[] = [];
  private readonly ifTsExponent: number[] = [];
  /** TS_DECIMAL: 10^n; TS_BINARY: 2^n. */
  private readonly ifTsDivisor: number[] = [];
  /** TS_DECIMAL: 10^(9-n); TS_BINARY: 2^|n-9|. */
  private readonly ifTsFactor: number[] = [];

  // results of setTimestamp and scratch results of divmod64 (no allocation per packet)
  private tsSec = 0;
  private tsNsec = 0;
  private qHi = 0;
  private qLo = 0;
  private readonly digits = new Float64Array(10);

  /**
   * Reads the Section Header Block at byte 0 of `c`, whose first 4 bytes are
   * buffered and are {@link PCAPNG_SHB}; leaves the cursor at the next block.
   */
  constructor(
    private readonly c: FileCursor,
    private readonly p: CurrentPacket,
  ) {
    if (!c.fill(12)) throw c.truncated('the pcapng section header block', 0, 12);
    const bom = c.buf.readUInt32LE(8);
    if (bom !== PCAPNG_BOM && bom !== PCAPNG_BOM_SWAPPED) {
      throw c.fail('CAPTURE_BAD_MAGIC', `not a pcapng file: the section header block at byte 0 has byte-order magic ${hex32(bom)}, not 0x1a2b3c4d`);
    }
    this.le = bom === PCAPNG_BOM;
    const len = this.blockLength(0, true);
    this.sectionHeader(0, len);
    this.section = 0;
    c.start = len;
  }

  /** Interfaces declared so far in the current section. */
  get interfaceCount(): number {
    return this.ifLinkType.length;
  }

  interfaceInfo(id: number): CaptureInterface | undefined {
    if (!(id >= 0 && id < this.ifLinkType.length)) return undefined;
    const mode = this.ifTsMode[id]!;
    return {
      linkType: this.ifLinkType[id]!,
      snapLen: this.ifSnapLen[id]!,
      resolution: { base: mode === TS_BINARY || mode === TS_BINARY_FINE ? 2 : 10, exponent: this.ifTsExponent[id]! },
    };
  }

  private u32(o: number): number {
    return this.le ? le32(this.c.buf, o) : be32(this.c.buf, o);
  }

  private u16(o: number): number {
    return this.le ? this.c.buf.readUInt16LE(o) : this.c.buf.readUInt16BE(o);
  }

  /**
   * Validates the total length of the block at buf[at] (its 8-byte header is buffered) and
   * makes the whole block available. `at` may move when buffering compacts: read c.start after.
   */
  private blockLength(at: number, first: boolean): number {
    const c = this.c;
    const fileAt = c.base + at;
    const len = this.u32(at + 4);
    if (len % 4 !== 0 || len < 12) {
      throw c.fail('CAPTURE_BAD_BLOCK', `block at byte ${fileAt} has total length ${len}, which is not a multiple of 4 of at least 12`);
    }
    if (len > c.maxBufferSize) {
      throw c.fail('CAPTURE_BAD_LENGTH', `block at byte ${fileAt} claims ${len} bytes (limit ${c.maxBufferSize})`);
    }
    if (!c.fill(len)) throw c.truncated(first ? 'the pcapng section header block' : 'the pcapng block', fileAt, len);
    const s = c.start;
    const trailer = this.u32(s + len - 4);
    if (trailer !== len) {
      throw c.fail('CAPTURE_BAD_BLOCK', `block at byte ${fileAt} starts with total length ${len} but ends with ${trailer}`);
    }
    return len;
  }

  /** Reads blocks until one holds a packet, into the current packet; false at the clean end of the file. */
  next(): boolean {
    const c = this.c;
    for (;;) {
      if (c.end - c.start < 12) {
        if (!c.fill(12)) {
          if (c.end === c.start) return false;
          throw c.truncated('the pcapng block', c.base + c.start, 12);
        }
      }
      let at = c.start;
      const fileAt = c.base + at;
      let type: number;
      if (le32(c.buf, at) === PCAPNG_SHB) {
        const bom = le32(c.buf, at + 8);
        if (bom === PCAPNG_BOM) this.le = true;
        else if (bom === PCAPNG_BOM_SWAPPED) this.le = false;
        else throw c.fail('CAPTURE_BAD_BLOCK', `section header block at byte ${fileAt} has byte-order magic ${hex32(bom)}, not 0x1a2b3c4d`);
        type = PCAPNG_SHB;
      } else {
        type = this.u32(at);
      }
      const len = this.blockLength(at, false);
      at = c.start;
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
        this.p.section = this.section;
      }
      // Anything else (NRB, ISB, DSB, custom, unknown) is skipped.
      c.start = at + len;
    }
  }

  /** Parses an SHB whose byte order is already set; starts a new, interface-less section. */
  private sectionHeader(at: number, len: number): void {
    const c = this.c;
    const fileAt = c.base + at;
    if (len < 28) throw c.fail('CAPTURE_BAD_BLOCK', `section header block at byte ${fileAt} is ${len} bytes, shorter than the 28-byte minimum`);
    const major = this.u16(at + 12);
    if (major !== 1) {
      throw c.fail('CAPTURE_BAD_BLOCK', `section header block at byte ${fileAt} has version ${major}.${this.u16(at + 14)}; only 1.x is supported`);
    }
    this.ifLinkType.length = 0;
    this.ifSnapLen.length = 0;
    this.ifTsMode.length = 0;
    this.ifTsExponent.length = 0;
    this.ifTsDivisor.length = 0;
    this.ifTsFactor.length = 0;
  }

  private interfaceBlock(at: number, len: number): void {
    const c = this.c;
    const fileAt = c.base + at;
    if (len < 20) throw c.fail('CAPTURE_BAD_BLOCK', `interface description block at byte ${fileAt} is ${len} bytes, shorter than the 20-byte minimum`);
    if (this.ifLinkType.length >= MAX_INTERFACES) {
      throw c.fail('CAPTURE_BAD_BLOCK', `interface description block at byte ${fileAt} declares more than ${MAX_INTERFACES} interfaces in one section`);
    }
    const linkType = this.u16(at + 8);
    const snapLen = this.u32(at + 12);
    let base = 10;
    let exponent = 6;
    const endOpts = at + len - 4;
    for (let o = at + 16; o < endOpts; ) {
      if (o + 4 > endOpts) throw c.fail('CAPTURE_BAD_BLOCK', `interface description block at byte ${fileAt} has an option header cut by the block end at byte ${c.base + o}`);
      const code = this.u16(o);
      const olen = this.u16(o + 2);
      if (code === OPT_ENDOFOPT) break;
      if (o + 4 + olen > endOpts) {
        throw c.fail('CAPTURE_BAD_BLOCK', `interface description block at byte ${fileAt} has option ${code} at byte ${c.base + o} of ${olen} bytes overrunning the block`);
      }
      if (code === OPT_IF_TSRESOL && olen >= 1) {
        const v = c.buf[o + 4]!;
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
    return this.c.fail('CAPTURE_UNKNOWN_INTERFACE', `${what} at byte ${fileAt} refers to interface ${id}, but section ${this.section} declares ${declared}`);
  }

  private packetLimit(id: number): number {
    const snap = this.ifSnapLen[id]!;
    return snap > PCAP_MAX_STANDARD_PACKET_LENGTH ? snap : PCAP_MAX_STANDARD_PACKET_LENGTH;
  }

  /** EPB (type 6) or obsolete PB (type 2): same layout, 32- or 16-bit interface id. */
  private packetBlock(type: number, at: number, len: number): void {
    const c = this.c;
    const fileAt = c.base + at;
    const what = type === PCAPNG_EPB ? 'enhanced packet block' : 'packet block';
    if (len < 32) throw c.fail('CAPTURE_BAD_BLOCK', `${what} at byte ${fileAt} is ${len} bytes, shorter than the 32-byte minimum`);
    const id = type === PCAPNG_EPB ? this.u32(at + 8) : this.u16(at + 8);
    if (id >= this.ifLinkType.length) throw this.unknownInterface(what, fileAt, id);
    const caplen = this.u32(at + 20);
    const limit = this.packetLimit(id);
    if (caplen > limit) throw c.fail('CAPTURE_BAD_LENGTH', `${what} at byte ${fileAt} claims ${caplen} bytes (limit ${limit})`);
    if (32 + pad4(caplen) > len) {
      throw c.fail('CAPTURE_BAD_BLOCK', `${what} at byte ${fileAt} claims ${caplen} captured bytes, more than its ${len}-byte block holds`);
    }
    this.setTimestamp(this.u32(at + 12), this.u32(at + 16), id);
    const p = this.p;
    p.tsSec = this.tsSec;
    p.tsNsec = this.tsNsec;
    p.caplen = caplen;
    p.origLen = this.u32(at + 24);
    p.interfaceId = id;
    p.linkType = this.ifLinkType[id]!;
    p.offset = at + 28;
    p.fileOffset = fileAt;
    c.start = at + len;
  }

  private simplePacketBlock(at: number, len: number): void {
    const c = this.c;
    const fileAt = c.base + at;
    if (len < 16) throw c.fail('CAPTURE_BAD_BLOCK', `simple packet block at byte ${fileAt} is ${len} bytes, shorter than the 16-byte minimum`);
    if (this.ifLinkType.length === 0) throw this.unknownInterface('simple packet block', fileAt, 0);
    const orig = this.u32(at + 8);
    const snap = this.ifSnapLen[0]!;
    // The stored length is the original length cut at the snaplen, if there is one.
    const caplen = snap !== 0 && snap < orig ? snap : orig;
    const limit = this.packetLimit(0);
    if (caplen > limit) throw c.fail('CAPTURE_BAD_LENGTH', `simple packet block at byte ${fileAt} claims ${caplen} bytes (limit ${limit})`);
    if (16 + pad4(caplen) > len) {
      throw c.fail('CAPTURE_BAD_BLOCK', `simple packet block at byte ${fileAt} claims ${caplen} captured bytes, more than its ${len}-byte block holds`);
    }
    const p = this.p;
    p.tsSec = -1;
    p.tsNsec = -1;
    p.caplen = caplen;
    p.origLen = orig;
    p.interfaceId = 0;
    p.linkType = this.ifLinkType[0]!;
    p.offset = at + 12;
    p.fileOffset = fileAt;
    c.start = at + len;
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
