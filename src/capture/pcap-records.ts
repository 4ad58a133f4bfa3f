// The classic pcap parser of the capture-file reader: the 24-byte file header
// and the 16-byte record headers, one packet at a time or a buffered run of them.
// The reader (pcap-reader.ts) picks it by the file's magic, over a FileCursor.

import { be32, le32, type FileCursor } from './file-cursor.js';
import { PCAP_MAX_STANDARD_PACKET_LENGTH, type CaptureInterface, type CurrentPacket, type PacketBatch } from './reader-types.js';

const MAGIC_US = 0xa1b2c3d4;
const MAGIC_NS = 0xa1b23c4d;
const MAGIC_US_SWAPPED = 0xd4c3b2a1;
const MAGIC_NS_SWAPPED = 0x4d3cb2a1;
/** The "modified" magic of Kuznetzov's patched libpcap (longer record headers): rejected rather than misread. */
export const PCAP_MAGIC_MODIFIED = 0xa1b2cd34;
export const PCAP_MAGIC_MODIFIED_SWAPPED = 0x34cdb2a1;

/** libpcap's LT_LINKTYPE mask: the upper bits of the link-type field hold FCS information. */
const LINKTYPE_MASK = 0x03ff_ffff;

/** Whether a big-endian read of a file's first 4 bytes is a classic pcap magic (either byte order, either resolution). */
export function isClassicPcapMagic(magic: number): boolean {
  return magic === MAGIC_US || magic === MAGIC_NS || magic === MAGIC_US_SWAPPED || magic === MAGIC_NS_SWAPPED;
}

// Whole seconds in a nanosecond count that the writer did not normalise
// (carried into the seconds).
function carriedSeconds(nsec: number): number {
  return nsec >= 1_000_000_000 ? Math.floor(nsec / 1_000_000_000) : 0;
}

/**
 * Classic pcap (libpcap "tcpdump" format): magic 0xa1b2c3d4 (microsecond
 * timestamps) or 0xa1b23c4d (nanosecond), in either byte order, then records of a
 * 16-byte header and the packet bytes. The link-type field carries FCS information
 * in its upper bits, which is masked off (LT_LINKTYPE).
 */
export class ClassicRecords {
  /** Byte order of the file. */
  readonly le: boolean;
  readonly linkType: number;
  readonly snapLen: number;
  readonly nanos: boolean;
  /** Largest record accepted: the snaplen, at least the standard maximum, within the buffer cap. */
  readonly limit: number;

  /**
   * Reads the file header at byte 0 of `c`, whose first 4 bytes are buffered and
   * pass {@link isClassicPcapMagic}; leaves the cursor at the first record.
   */
  constructor(
    private readonly c: FileCursor,
    private readonly p: CurrentPacket,
    magic: number,
  ) {
    this.le = magic === MAGIC_US_SWAPPED || magic === MAGIC_NS_SWAPPED;
    this.nanos = magic === MAGIC_NS || magic === MAGIC_NS_SWAPPED;
    if (!c.fill(24)) throw c.truncated('the 24-byte pcap file header', 0, 24);
    const b = c.buf;
    const major = this.le ? b.readUInt16LE(4) : b.readUInt16BE(4);
    const minor = this.le ? b.readUInt16LE(6) : b.readUInt16BE(6);
    if (major !== 2) throw c.fail('CAPTURE_BAD_MAGIC', `unsupported pcap version ${major}.${minor} in the file header at byte 0 (only 2.x exists)`);
    this.snapLen = this.le ? le32(b, 16) : be32(b, 16);
    this.linkType = (this.le ? le32(b, 20) : be32(b, 20)) & LINKTYPE_MASK;
    this.limit = Math.min(Math.max(this.snapLen, PCAP_MAX_STANDARD_PACKET_LENGTH), c.maxBufferSize - 16);
    c.start = 24;
  }

  interfaceInfo(): CaptureInterface {
    return { linkType: this.linkType, snapLen: this.snapLen, resolution: { base: 10, exponent: this.nanos ? 9 : 6 } };
  }

  /** Reads the next record into the current packet; false at the clean end of the file. */
  next(): boolean {
    const c = this.c;
    let at = c.start;
    if (c.end - at < 16) {
      if (!c.fill(16)) {
        if (c.end === c.start) return false;
        throw c.truncated('the pcap record', c.base + c.start, 16);
      }
      at = c.start;
    }
    const b = c.buf;
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
    if (incl > this.limit) {
      throw c.fail('CAPTURE_BAD_LENGTH', `record at byte ${c.base + at} claims ${incl} bytes (limit ${this.limit})`);
    }
    const total = 16 + incl;
    if (c.end - at < total) {
      if (!c.fill(total)) throw c.truncated('the pcap record', c.base + c.start, total);
      at = c.start;
    }
    const p = this.p;
    const nsec = this.nanos ? frac : frac * 1000;
    const carry = carriedSeconds(nsec);
    p.tsSec = sec + carry;
    p.tsNsec = nsec - carry * 1_000_000_000;
    p.caplen = incl;
    p.origLen = orig;
    p.offset = at + 16;
    p.fileOffset = c.base + at;
    c.start = at + total;
    return true;
  }

  /**
   * Reads into batch slots 1.. the complete records already buffered after the one
   * next() just read (in slot 0), in one loop, without refilling; a record next()
   * would reject ends the run before it. Leaves the current packet describing the
   * last one and returns the batch's count.
   */
  nextBuffered(batch: PacketBatch): number {
    const c = this.c;
    const offsets = batch.offsets;
    const caplens = batch.caplens;
    const origLens = batch.origLens;
    const tsSec = batch.tsSec;
    const tsNsec = batch.tsNsec;
    const b = c.buf;
    const end = c.end;
    const le = this.le;
    const micros = !this.nanos;
    const limit = this.limit;
    const n = batch.capacity;
    let k = 1;
    let p = c.start;
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
      const cur = this.p;
      c.start = p;
      cur.offset = offsets[k - 1]!;
      cur.caplen = caplens[k - 1]!;
      cur.origLen = origLens[k - 1]!;
      cur.tsSec = tsSec[k - 1]!;
      cur.tsNsec = tsNsec[k - 1]!;
      cur.fileOffset = c.base + last;
    }
    return k;
  }
}
