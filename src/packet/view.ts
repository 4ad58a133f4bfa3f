// PacketInfo: what decoding learnt about a packet besides the field values
// (which go straight into the execution context): status flags and offsets.
// One instance is preallocated and reused; every field is set on each decode.

/** The frame carries an IPv4 or IPv6 packet (rules are evaluated). */
export const ST_IP = 0x01;
/** A header was cut short by the capture length; fields past the cut are absent. */
export const ST_TRUNCATED = 0x02;
/** A header is invalid (bad IHL, lengths that contradict each other). */
export const ST_MALFORMED = 0x04;
/** A non-first fragment: it has no transport header, so no transport fields. */
export const ST_FRAGMENT = 0x08;
/** The link type is not one the decoder knows. */
export const ST_UNSUPPORTED_LINK = 0x10;

/** Decoding results other than field values. */
export class PacketInfo {
  /** ST_* bits. */
  status = 0;
  /** 4, 6, or 0 when the frame is not IP. */
  ipVersion = 0;
  /** EtherType of the layer-3 payload (0 when unknown). */
  etherType = 0;
  /** Offset of the IP header in the buffer, -1 when none. */
  l3Offset = -1;
  /** Offset of the transport header, -1 when none. */
  l4Offset = -1;
  /** End of the IP datagram within the capture (bounded by the IP length). */
  l3End = 0;
  /** Transport protocol number, -1 when unknown. */
  protocol = -1;
  /** Number of VLAN tags crossed. */
  vlanTags = 0;

  reset(): void {
    this.status = 0;
    this.ipVersion = 0;
    this.etherType = 0;
    this.l3Offset = -1;
    this.l4Offset = -1;
    this.l3End = 0;
    this.protocol = -1;
    this.vlanTags = 0;
  }

  /** True when the frame was cut or invalid somewhere. */
  get damaged(): boolean {
    return (this.status & (ST_TRUNCATED | ST_MALFORMED)) !== 0;
  }
}
