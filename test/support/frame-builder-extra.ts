// Test support, beyond packet-builder.ts: link-layer encapsulations (802.1Q/QinQ
// tags, Linux cooked v1/v2, BSD NULL/LOOP), IPv6 extension headers, IPv4 and IPv6
// fragment trains, and a pcapng writer that also records what a correct reader must
// report for every packet it wrote (the "truth" of the fixture manifest, computed
// with BigInt independently of the reader's arithmetic).

import { internetChecksum } from './packet-builder.js';

// ---------------------------------------------------------------- link layers

/** One 802.1Q/802.1ad tag: TPID 0x8100 (C-tag) or 0x88a8 (S-tag). */
export interface VlanTag {
  tpid: number;
  vid: number;
  pcp?: number;
  dei?: boolean;
}

/** Inserts VLAN tags (outermost first) after the MAC addresses of an Ethernet II frame. */
export function withVlanTags(frame: Uint8Array, tags: VlanTag[]): Uint8Array {
  const out = new Uint8Array(frame.length + 4 * tags.length);
  out.set(frame.subarray(0, 12), 0);
  let at = 12;
  for (const t of tags) {
    const tci = ((t.pcp ?? 0) << 13) | (t.dei ? 0x1000 : 0) | (t.vid & 0x0fff);
    out[at] = t.tpid >> 8;
    out[at + 1] = t.tpid & 0xff;
    out[at + 2] = tci >> 8;
    out[at + 3] = tci & 0xff;
    at += 4;
  }
  out.set(frame.subarray(12), at);
  return out;
}

/** The EtherType of an IP packet, from its version nibble. */
export function etherTypeOf(ipPacket: Uint8Array): number {
  return ipPacket[0]! >> 4 === 6 ? 0x86dd : 0x0800;
}

/** Linux cooked capture v1 (LINKTYPE_LINUX_SLL, 16 bytes) around an IP packet. */
export function sllFrame(ipPacket: Uint8Array, opts: { packetType?: number; arphrd?: number; address?: Uint8Array } = {}): Uint8Array {
  const addr = opts.address ?? Uint8Array.of(0x02, 0, 0, 0, 0, 0x01);
  const out = new Uint8Array(16 + ipPacket.length);
  const v = new DataView(out.buffer);
  v.setUint16(0, opts.packetType ?? 0);
  v.setUint16(2, opts.arphrd ?? 1);
  v.setUint16(4, addr.length);
  out.set(addr.subarray(0, 8), 6);
  v.setUint16(14, etherTypeOf(ipPacket));
  out.set(ipPacket, 16);
  return out;
}

/** Linux cooked capture v2 (LINKTYPE_LINUX_SLL2, 20 bytes) around an IP packet. */
export function sll2Frame(
  ipPacket: Uint8Array,
  opts: { packetType?: number; arphrd?: number; ifindex?: number; address?: Uint8Array } = {},
): Uint8Array {
  const addr = opts.address ?? Uint8Array.of(0x02, 0, 0, 0, 0, 0x01);
  const out = new Uint8Array(20 + ipPacket.length);
  const v = new DataView(out.buffer);
  v.setUint16(0, etherTypeOf(ipPacket));
  v.setUint16(2, 0);
  v.setUint32(4, opts.ifindex ?? 2);
  v.setUint16(8, opts.arphrd ?? 1);
  out[10] = opts.packetType ?? 0;
  out[11] = addr.length;
  out.set(addr.subarray(0, 8), 12);
  out.set(ipPacket, 20);
  return out;
}

/** Address families seen in NULL/LOOP headers. IPv6 differs per BSD. */
export const BSD_AF = Object.freeze({ INET: 2, INET6_BSD: 24, INET6_FREEBSD: 28, INET6_DARWIN: 30 });

/** LINKTYPE_NULL: a 4-byte address family in the byte order of the capturing host. */
export function nullFrame(ipPacket: Uint8Array, af: number, littleEndianHost: boolean): Uint8Array {
  const out = new Uint8Array(4 + ipPacket.length);
  new DataView(out.buffer).setUint32(0, af, littleEndianHost);
  out.set(ipPacket, 4);
  return out;
}

/** LINKTYPE_LOOP: a 4-byte address family in network byte order. */
export function loopFrame(ipPacket: Uint8Array, af: number): Uint8Array {
  return nullFrame(ipPacket, af, false);
}

// ---------------------------------------------------------------- payloads

/** A well-formed DNS query (RD set) for `name`, type A, class IN: a UDP payload Wireshark dissects cleanly. */
export function dnsQuery(name: string, id: number): Uint8Array {
  const labels = name.split('.').flatMap((l) => [l.length, ...new TextEncoder().encode(l)]);
  return Uint8Array.of(id >> 8, id & 0xff, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, ...labels, 0, 0, 1, 0, 1);
}

// ---------------------------------------------------------------- IPv6 extension headers

export type Ipv6Extension =
  | { kind: 'hop-by-hop' | 'destination'; options: Uint8Array }
  | { kind: 'routing'; routingType: number; segmentsLeft: number; data: Uint8Array }
  | { kind: 'fragment'; offset: number; more: boolean; id: number }
  | { kind: 'ah'; spi: number; seq: number; icv: Uint8Array };

/** IPv6 option encoders for hop-by-hop and destination options headers. */
export const IPV6_OPTION = Object.freeze({
  /** Router Alert (type 5), value 0 (MLD). */
  routerAlert: (): Uint8Array => Uint8Array.of(5, 2, 0, 0),
  /** PadN carrying `n` zero bytes. */
  padN: (n: number): Uint8Array => {
    const o = new Uint8Array(2 + n);
    o[0] = 1;
    o[1] = n;
    return o;
  },
  /** An unknown option type that a node may skip (high bits 00). */
  experimental: (value: Uint8Array): Uint8Array => Uint8Array.of(0x1e, value.length, ...value),
});

const EXT_NUMBER = { 'hop-by-hop': 0, destination: 60, routing: 43, fragment: 44, ah: 51 } as const;

function encodeExtension(ext: Ipv6Extension, next: number): Uint8Array {
  switch (ext.kind) {
    case 'hop-by-hop':
    case 'destination': {
      // Pad the options so the header is a multiple of 8 bytes.
      const body = 2 + ext.options.length;
      const total = (body + 7) & ~7;
      const out = new Uint8Array(total);
      out[0] = next;
      out[1] = total / 8 - 1;
      out.set(ext.options, 2);
      const pad = total - body;
      if (pad === 1) out[body] = 0;
      else if (pad > 1) out.set(IPV6_OPTION.padN(pad - 2), body);
      return out;
    }
    case 'routing': {
      const total = (4 + ext.data.length + 7) & ~7;
      const out = new Uint8Array(total);
      out[0] = next;
      out[1] = total / 8 - 1;
      out[2] = ext.routingType;
      out[3] = ext.segmentsLeft;
      out.set(ext.data, 4);
      return out;
    }
    case 'fragment': {
      const out = new Uint8Array(8);
      const v = new DataView(out.buffer);
      out[0] = next;
      v.setUint16(2, ((ext.offset & 0x1fff) << 3) | (ext.more ? 1 : 0));
      v.setUint32(4, ext.id >>> 0);
      return out;
    }
    case 'ah': {
      const total = (12 + ext.icv.length + 7) & ~7;
      const out = new Uint8Array(total);
      const v = new DataView(out.buffer);
      out[0] = next;
      out[1] = total / 4 - 2;
      v.setUint32(4, ext.spi >>> 0);
      v.setUint32(8, ext.seq >>> 0);
      out.set(ext.icv, 12);
      return out;
    }
  }
}

/**
 * Inserts extension headers (in the given order) between the fixed header of an IPv6
 * packet and its upper-layer segment. The upper-layer checksum stays valid: its
 * pseudo-header uses the final destination, so routing headers here keep segments
 * left at 0 (or carry the original destination last).
 */
export function withIpv6Extensions(ipv6Packet: Uint8Array, exts: Ipv6Extension[]): Uint8Array {
  if (ipv6Packet[0]! >> 4 !== 6) throw new Error('withIpv6Extensions needs an IPv6 packet');
  const upper = ipv6Packet[6]!;
  const encoded: Uint8Array[] = [];
  for (let i = exts.length - 1, next = upper; i >= 0; i--) {
    const e = exts[i]!;
    encoded.unshift(encodeExtension(e, next));
    next = EXT_NUMBER[e.kind];
  }
  const extLen = encoded.reduce((n, e) => n + e.length, 0);
  const payload = ipv6Packet.subarray(40);
  const out = new Uint8Array(40 + extLen + payload.length);
  out.set(ipv6Packet.subarray(0, 40), 0);
  new DataView(out.buffer).setUint16(4, extLen + payload.length);
  out[6] = exts.length > 0 ? EXT_NUMBER[exts[0]!.kind] : upper;
  let at = 40;
  for (const e of encoded) {
    out.set(e, at);
    at += e.length;
  }
  out.set(payload, at);
  return out;
}

// ---------------------------------------------------------------- fragments

/**
 * Splits an IPv4 packet into fragments carrying at most `maxPayload` bytes of its
 * payload each (rounded down to a multiple of 8). Options are copied into the first
 * fragment only; header checksums are recomputed.
 */
export function fragmentIpv4(packet: Uint8Array, maxPayload: number): Uint8Array[] {
  const ihl = (packet[0]! & 0x0f) * 4;
  const payload = packet.subarray(ihl);
  const step = maxPayload & ~7;
  if (step <= 0) throw new Error('fragment payload must be at least 8 bytes');
  const out: Uint8Array[] = [];
  for (let off = 0; off < payload.length; off += step) {
    const chunk = payload.subarray(off, Math.min(payload.length, off + step));
    const first = off === 0;
    const hl = first ? ihl : 20;
    const f = new Uint8Array(hl + chunk.length);
    f.set(packet.subarray(0, hl), 0);
    f[0] = 0x40 | (hl / 4);
    const v = new DataView(f.buffer);
    v.setUint16(2, f.length);
    const more = off + step < payload.length;
    v.setUint16(6, (more ? 0x2000 : 0) | (off / 8));
    v.setUint16(10, 0);
    v.setUint16(10, internetChecksum(f.subarray(0, hl)));
    f.set(chunk, hl);
    out.push(f);
  }
  return out;
}

/** Splits an IPv6 packet without extension headers into fragments (fragment header per RFC 8200). */
export function fragmentIpv6(packet: Uint8Array, maxPayload: number, id: number): Uint8Array[] {
  const upper = packet[6]!;
  const payload = packet.subarray(40);
  const step = maxPayload & ~7;
  if (step <= 0) throw new Error('fragment payload must be at least 8 bytes');
  const out: Uint8Array[] = [];
  for (let off = 0; off < payload.length; off += step) {
    const chunk = payload.subarray(off, Math.min(payload.length, off + step));
    const frag = encodeExtension({ kind: 'fragment', offset: off / 8, more: off + step < payload.length, id }, upper);
    const f = new Uint8Array(40 + 8 + chunk.length);
    f.set(packet.subarray(0, 40), 0);
    new DataView(f.buffer).setUint16(4, 8 + chunk.length);
    f[6] = EXT_NUMBER.fragment;
    f.set(frag, 40);
    f.set(chunk, 48);
    out.push(f);
  }
  return out;
}

// ---------------------------------------------------------------- pcapng

/** What a correct reader reports for one packet (tsSec/tsNsec -1: no timestamp). */
export interface ExpectedPacket {
  tsSec: number;
  tsNsec: number;
  caplen: number;
  origLen: number;
  linkType: number;
  interfaceId: number;
  section: number;
  /** Byte offset of the record or block in the file. */
  offset: number;
  /** The captured bytes. */
  data: Uint8Array;
}

/** One pcapng option: code and raw value (numbers in values are the caller's job). */
export interface PcapngOption {
  code: number;
  value: Uint8Array;
}

/** Interface of a pcapng section. `tsresol` is the raw if_tsresol byte (omitted: microseconds). */
export interface PcapngInterface {
  linkType: number;
  snapLen?: number;
  tsresol?: number;
  name?: string;
}

/** A timestamp for a packet block: ticks of the interface, or seconds + nanoseconds converted to ticks (truncating). */
export type PcapngTime = { ticks: bigint } | { seconds: number; nanoseconds?: number };

export const PCAPNG_BLOCK = Object.freeze({ SHB: 0x0a0d0d0a, IDB: 1, PB: 2, SPB: 3, NRB: 4, ISB: 5, EPB: 6, DSB: 10, CUSTOM: 0x00000bad, CUSTOM_COPY: 0x40000bad });

const utf8 = new TextEncoder();

/** Ticks per second of an if_tsresol byte (undefined: the default, microseconds). */
export function ticksPerSecond(tsresol: number | undefined): bigint {
  if (tsresol === undefined) return 1_000_000n;
  return tsresol & 0x80 ? 1n << BigInt(tsresol & 0x7f) : 10n ** BigInt(tsresol);
}

/** Reference conversion of ticks to seconds + nanoseconds (BigInt, truncating like Wireshark). */
export function ticksToTime(ticks: bigint, tsresol: number | undefined): { sec: number; nsec: number } {
  const tps = ticksPerSecond(tsresol);
  return { sec: Number(ticks / tps), nsec: Number(((ticks % tps) * 1_000_000_000n) / tps) };
}

/**
 * Writes a pcapng file block by block, in the byte order of the current section, and
 * keeps the list of packets a reader must return.
 */
export class PcapngBuilder {
  private readonly chunks: Buffer[] = [];
  private length = 0;
  private le = true;
  private interfaces: PcapngInterface[] = [];
  private sectionIndex = -1;
  /** Every packet written, in order, as a correct reader reports it. */
  readonly packets: ExpectedPacket[] = [];
  /** Byte offset of every block written, in order. */
  readonly blocks: number[] = [];
  /** Byte order and interfaces of every section written. */
  readonly sections: Array<{ bigEndian: boolean; interfaces: PcapngInterface[] }> = [];

  /** Bytes written so far. */
  get byteLength(): number {
    return this.length;
  }

  private u16(n: number): Buffer {
    const b = Buffer.alloc(2);
    if (this.le) b.writeUInt16LE(n);
    else b.writeUInt16BE(n);
    return b;
  }

  private u32(n: number): Buffer {
    const b = Buffer.alloc(4);
    if (this.le) b.writeUInt32LE(n >>> 0);
    else b.writeUInt32BE(n >>> 0);
    return b;
  }

  /** Encodes options (each padded to 4 bytes) followed by opt_endofopt; empty list: nothing. */
  encodeOptions(options: PcapngOption[]): Buffer {
    if (options.length === 0) return Buffer.alloc(0);
    const parts: Buffer[] = [];
    for (const o of options) {
      parts.push(this.u16(o.code), this.u16(o.value.length), Buffer.from(o.value), Buffer.alloc(((o.value.length + 3) & ~3) - o.value.length));
    }
    parts.push(Buffer.alloc(4));
    return Buffer.concat(parts);
  }

  /** A string option (comments, names). */
  static text(code: number, text: string): PcapngOption {
    return { code, value: utf8.encode(text) };
  }

  /** Appends a block of `type` with `body` (padded to 4 bytes); returns its offset. */
  block(type: number, body: Uint8Array): number {
    const padded = (body.length + 3) & ~3;
    const total = 12 + padded;
    const at = this.length;
    this.blocks.push(at);
    this.raw(Buffer.concat([this.u32(type), this.u32(total), Buffer.from(body), Buffer.alloc(padded - body.length), this.u32(total)]));
    return at;
  }

  /** Appends raw bytes as they are (for damaged files). */
  raw(bytes: Uint8Array): void {
    const b = Buffer.from(bytes);
    this.chunks.push(b);
    this.length += b.length;
  }

  /** Starts a section (SHB) in the given byte order; interfaces restart at 0. */
  section(opts: { bigEndian?: boolean; options?: PcapngOption[] } = {}): this {
    this.le = !opts.bigEndian;
    this.interfaces = [];
    this.sectionIndex += 1;
    this.sections.push({ bigEndian: !this.le, interfaces: this.interfaces });
    const body = Buffer.concat([
      this.u32(0x1a2b3c4d),
      this.u16(1),
      this.u16(0),
      Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]), // section length: unknown
      this.encodeOptions(opts.options ?? []),
    ]);
    this.block(PCAPNG_BLOCK.SHB, body);
    return this;
  }

  /** Declares an interface (IDB); returns its id in the section. */
  addInterface(spec: PcapngInterface, extraOptions: PcapngOption[] = []): number {
    const options: PcapngOption[] = [];
    if (spec.name !== undefined) options.push(PcapngBuilder.text(2, spec.name));
    if (spec.tsresol !== undefined) options.push({ code: 9, value: Uint8Array.of(spec.tsresol) });
    options.push(...extraOptions);
    const body = Buffer.concat([this.u16(spec.linkType), this.u16(0), this.u32(spec.snapLen ?? 0), this.encodeOptions(options)]);
    this.block(PCAPNG_BLOCK.IDB, body);
    this.interfaces.push(spec);
    return this.interfaces.length - 1;
  }

  private iface(id: number): PcapngInterface {
    const i = this.interfaces[id];
    if (i === undefined) throw new Error(`interface ${id} is not declared in this section`);
    return i;
  }

  private ticksOf(id: number, time: PcapngTime): bigint {
    if ('ticks' in time) return time.ticks;
    const tps = ticksPerSecond(this.iface(id).tsresol);
    return BigInt(time.seconds) * tps + (BigInt(time.nanoseconds ?? 0) * tps) / 1_000_000_000n;
  }

  private captured(id: number, data: Uint8Array): Uint8Array {
    const snap = this.iface(id).snapLen ?? 0;
    return snap !== 0 && data.length > snap ? data.subarray(0, snap) : data;
  }

  private timestampFields(ticks: bigint): Buffer {
    return Buffer.concat([this.u32(Number(ticks >> 32n)), this.u32(Number(ticks & 0xffff_ffffn))]);
  }

  /** Enhanced Packet Block: `data` is cut at the interface's snaplen; origLen defaults to data.length. */
  enhancedPacket(id: number, data: Uint8Array, time: PcapngTime, opts: { origLen?: number; options?: PcapngOption[] } = {}): this {
    const iface = this.iface(id);
    const ticks = this.ticksOf(id, time);
    const cap = this.captured(id, data);
    const origLen = opts.origLen ?? data.length;
    const body = Buffer.concat([
      this.u32(id),
      this.timestampFields(ticks),
      this.u32(cap.length),
      this.u32(origLen),
      Buffer.from(cap),
      Buffer.alloc(((cap.length + 3) & ~3) - cap.length),
      this.encodeOptions(opts.options ?? []),
    ]);
    const offset = this.block(PCAPNG_BLOCK.EPB, body);
    const t = ticksToTime(ticks, iface.tsresol);
    this.packets.push({ tsSec: t.sec, tsNsec: t.nsec, caplen: cap.length, origLen, linkType: iface.linkType, interfaceId: id, section: this.sectionIndex, offset, data: cap });
    return this;
  }

  /** Obsolete Packet Block (type 2): 16-bit interface id and a drops count. */
  obsoletePacket(id: number, data: Uint8Array, time: PcapngTime, opts: { drops?: number; origLen?: number } = {}): this {
    const iface = this.iface(id);
    const ticks = this.ticksOf(id, time);
    const cap = this.captured(id, data);
    const origLen = opts.origLen ?? data.length;
    const body = Buffer.concat([
      this.u16(id),
      this.u16(opts.drops ?? 0),
      this.timestampFields(ticks),
      this.u32(cap.length),
      this.u32(origLen),
      Buffer.from(cap),
    ]);
    const offset = this.block(PCAPNG_BLOCK.PB, body);
    const t = ticksToTime(ticks, iface.tsresol);
    this.packets.push({ tsSec: t.sec, tsNsec: t.nsec, caplen: cap.length, origLen, linkType: iface.linkType, interfaceId: id, section: this.sectionIndex, offset, data: cap });
    return this;
  }

  /** Simple Packet Block: interface 0, no timestamp; stored bytes are the packet cut at the snaplen. */
  simplePacket(data: Uint8Array, origLen: number = data.length): this {
    const iface = this.iface(0);
    const cap = this.captured(0, data);
    const offset = this.block(PCAPNG_BLOCK.SPB, Buffer.concat([this.u32(origLen), Buffer.from(cap)]));
    this.packets.push({ tsSec: -1, tsNsec: -1, caplen: cap.length, origLen, linkType: iface.linkType, interfaceId: 0, section: this.sectionIndex, offset, data: cap });
    return this;
  }

  /** Name Resolution Block with IPv4 records (address, names). */
  nameResolution(records: Array<{ ipv4: Uint8Array; names: string[] }>): this {
    const parts: Buffer[] = [];
    for (const r of records) {
      const value = Buffer.concat([Buffer.from(r.ipv4), ...r.names.map((n) => Buffer.concat([Buffer.from(utf8.encode(n)), Buffer.alloc(1)]))]);
      parts.push(this.u16(1), this.u16(value.length), value, Buffer.alloc(((value.length + 3) & ~3) - value.length));
    }
    parts.push(Buffer.alloc(4)); // nrb_record_end
    this.block(PCAPNG_BLOCK.NRB, Buffer.concat(parts));
    return this;
  }

  /** Interface Statistics Block with isb_ifrecv and isb_ifdrop. */
  interfaceStatistics(id: number, time: PcapngTime, received: number, dropped: number): this {
    const u64 = (n: number): Uint8Array => {
      const b = Buffer.alloc(8);
      if (this.le) b.writeBigUInt64LE(BigInt(n));
      else b.writeBigUInt64BE(BigInt(n));
      return b;
    };
    const body = Buffer.concat([
      this.u32(id),
      this.timestampFields(this.ticksOf(id, time)),
      this.encodeOptions([
        { code: 4, value: u64(received) },
        { code: 5, value: u64(dropped) },
      ]),
    ]);
    this.block(PCAPNG_BLOCK.ISB, body);
    return this;
  }

  /** Custom Block with a Private Enterprise Number and opaque data. */
  custom(pen: number, data: Uint8Array, copyable = false): this {
    this.block(copyable ? PCAPNG_BLOCK.CUSTOM_COPY : PCAPNG_BLOCK.CUSTOM, Buffer.concat([this.u32(pen), Buffer.from(data)]));
    return this;
  }

  /** The whole file. */
  toBuffer(): Buffer {
    return Buffer.concat(this.chunks, this.length);
  }
}
