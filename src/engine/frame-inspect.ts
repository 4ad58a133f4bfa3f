// Reading one frame outside the packet path, for what is rare by design: a
// drop log line's addresses and ports (the packet path decodes only what the
// rules read), and the daemon's sampled TCP/UDP checksum check. One inspector
// reuses its decoder state; it allocates only the summary it returns.

import type { ExecutionContext } from '../expr/index.js';
import { formatIpv4, formatIpv6 } from '../net/index.js';
import { clearDecoded, decodeGeneral, FULL_PLAN, PacketInfo, PROTO_NAMES, ST_FRAGMENT, ST_IP, TRANSIT_SCHEME } from '../packet/index.js';

/** What a log line says of a packet. */
export interface FrameSummary {
  src: string;
  dst: string;
  protocol: string;
  srcPort?: number;
  dstPort?: number;
}

const TCP = 6;
const UDP = 17;

/** Decodes frames one at a time for logs and checks; not for the per-packet path. */
export class FrameInspector {
  private readonly ctx: ExecutionContext = TRANSIT_SCHEME.newContext();
  private readonly info = new PacketInfo();

  private decode(frame: Uint8Array, length: number, linkType: number): PacketInfo {
    clearDecoded(this.ctx, this.info);
    this.info.reset();
    decodeGeneral(frame, 0, length, linkType, this.ctx, this.info, FULL_PLAN);
    return this.info;
  }

  /** Addresses, protocol and ports of an IP frame; undefined for one that is not IP. */
  describe(frame: Uint8Array, length: number, linkType: number): FrameSummary | undefined {
    const info = this.decode(frame, length, linkType);
    if ((info.status & ST_IP) === 0 || info.l3Offset < 0) return undefined;
    const b = frame;
    const p = info.l3Offset;
    const w = (at: number) => ((b[at]! << 24) | (b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!) >>> 0;
    const v4 = info.ipVersion === 4;
    const src = v4 ? formatIpv4(w(p + 12)) : formatIpv6(w(p + 8), w(p + 12), w(p + 16), w(p + 20));
    const dst = v4 ? formatIpv4(w(p + 16)) : formatIpv6(w(p + 24), w(p + 28), w(p + 32), w(p + 36));
    const s: FrameSummary = { src, dst, protocol: info.protocol >= 0 ? PROTO_NAMES[info.protocol]! : 'unknown' };
    const l4 = info.l4Offset;
    if ((info.protocol === TCP || info.protocol === UDP) && l4 >= 0 && l4 + 4 <= length) {
      s.srcPort = (b[l4]! << 8) | b[l4 + 1]!;
      s.dstPort = (b[l4 + 2]! << 8) | b[l4 + 3]!;
    }
    return s;
  }

  /**
   * Verifies the TCP or UDP checksum of a frame: true or false when it can be
   * verified, undefined when it cannot (not TCP/UDP, a fragment, cut by the
   * capture, IPv6 with extension headers, UDP over IPv4 without a checksum).
   */
  checksumOk(frame: Uint8Array, length: number, linkType: number): boolean | undefined {
    const info = this.decode(frame, length, linkType);
    if ((info.status & ST_IP) === 0 || (info.status & ST_FRAGMENT) !== 0) return undefined;
    if (info.protocol !== TCP && info.protocol !== UDP) return undefined;
    const b = frame;
    const p = info.l3Offset;
    const l4 = info.l4Offset;
    const end = info.l3End;
    if (l4 < 0 || end > length || end - l4 < (info.protocol === TCP ? 20 : 8)) return undefined;
    let sum = 0;
    if (info.ipVersion === 4) {
      if ((((b[p + 6]! << 8) | b[p + 7]!) & 0x3fff) !== 0) return undefined; // MF or an offset: a fragment
      if (info.protocol === UDP && b[l4 + 6] === 0 && b[l4 + 7] === 0) return undefined;
      for (let i = p + 12; i < p + 20; i += 2) sum += (b[i]! << 8) | b[i + 1]!;
    } else {
      if (l4 !== p + 40) return undefined;
      for (let i = p + 8; i < p + 40; i += 2) sum += (b[i]! << 8) | b[i + 1]!;
    }
    const len = end - l4;
    sum += info.protocol + (len >>> 16) + (len & 0xffff);
    let i = l4;
    for (; i + 1 < end; i += 2) sum += (b[i]! << 8) | b[i + 1]!;
    if (i < end) sum += b[i]! << 8;
    while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
    return sum === 0xffff;
  }
}
