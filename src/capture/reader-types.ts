// What the capture-file reader's parts share: what a file declares about an
// interface, the current-packet fields a format parser fills in, and the
// PacketBatch that nextBatch() fills.

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

/** The current packet as a format parser writes it: PcapReader's public fields of the same names. */
export interface CurrentPacket {
  offset: number;
  caplen: number;
  origLen: number;
  linkType: number;
  interfaceId: number;
  tsSec: number;
  tsNsec: number;
  fileOffset: number;
  section: number;
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
