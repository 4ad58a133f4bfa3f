// The decoder fills the network_transit fields from frames of every supported
// link type, leaves what it cannot read absent, flags damage, and never throws.
import { describe, expect, it } from 'vitest';
import {
  decode, FULL_PLAN, LINKTYPE, PacketInfo, planFor, ST_FRAGMENT, ST_IP, ST_MALFORMED, ST_TRUNCATED, ST_UNSUPPORTED_LINK, TRANSIT_SCHEME,
} from '../../src/packet/index.js';
import { buildFrame, buildIpPacket, concatBytes, IPV4_OPTION, TCP, type FrameSpec } from '../support/packet-builder.js';
import { Rng } from '../support/random.js';
import { readContext } from '../support/read-context.js';

const ctx = TRANSIT_SCHEME.newContext();
const info = new PacketInfo();

function run(frame: Uint8Array, linkType: number = LINKTYPE.ETHERNET, plan = FULL_PLAN) {
  ctx.reset();
  info.reset();
  // Decode from an offset inside a larger buffer, as frames sit in a capture buffer.
  const buf = new Uint8Array(frame.length + 11);
  buf.set(frame, 5);
  decode(buf, 5, frame.length, linkType, ctx, info, plan);
  return readContext(ctx);
}

const hex = (s: string) => Uint8Array.from(Buffer.from(s.replace(/\s+/g, ''), 'hex'));
const v4tcp: FrameSpec = { ip: { version: 4, src: '192.0.2.1', dst: '198.51.100.2', ttl: 64 }, l4: { kind: 'tcp', srcPort: 40000, dstPort: 443, flags: TCP.SYN | TCP.ECE | TCP.CWR } };
const v6udp: FrameSpec = { ip: { version: 6, src: '2001:db8::1', dst: '2001:db8::2', hopLimit: 7 }, l4: { kind: 'udp', srcPort: 5353, dstPort: 53, payload: new Uint8Array(12) } };

describe('decoding Ethernet frames', () => {
  it('reads every field of an IPv4 TCP SYN', () => {
    const f = run(buildFrame(v4tcp));
    expect(info.status).toBe(ST_IP);
    expect(f).toMatchObject({
      'ip.src': '192.0.2.1', 'ip.dst': '198.51.100.2', 'ip.proto': 'tcp', 'ip.len': 40, 'ip.hdr_len': 5, 'ip.ttl': 64,
      'tcp.srcport': 40000, 'tcp.dstport': 443, 'tcp.flags': 0xc2, 'tcp.flags.syn': true, 'tcp.flags.ecn': true, 'tcp.flags.cwr': true,
    });
    expect(f['tcp.flags.ack']).toBeUndefined();
    expect(f['ip.opt.type']).toBeUndefined();
    expect(f['udp.dstport']).toBeUndefined();
    expect((f['tcp'] as string).length).toBe(40);
  });

  it('reads an IPv6 UDP datagram: hop limit as ip.ttl, 40 + payload length as ip.len, no ip.hdr_len', () => {
    const f = run(buildFrame(v6udp));
    expect(f).toMatchObject({ 'ip.src': '2001:db8::1', 'ip.dst': '2001:db8::2', 'ip.proto': 'udp', 'ip.len': 60, 'ip.ttl': 7, 'udp.srcport': 5353, 'udp.dstport': 53 });
    expect(f['ip.hdr_len']).toBeUndefined();
  });

  it('reads ICMPv6 type and code into icmp.type and icmp.code, with ip.proto "ipv6-icmp"', () => {
    const f = run(buildFrame({ ip: { version: 6, src: '::1', dst: '::2', hopLimit: 255 }, l4: { kind: 'icmp', type: 135, code: 0, body: new Uint8Array(20) } }));
    expect(f).toMatchObject({ 'ip.proto': 'ipv6-icmp', 'icmp.type': 135, 'icmp.code': 0 });
  });

  it('reads the first IPv4 option type and the header length in words', () => {
    const f = run(buildFrame({ ...v4tcp, ip: { ...v4tcp.ip, options: IPV4_OPTION.routerAlert() } as FrameSpec['ip'] }));
    expect(f).toMatchObject({ 'ip.hdr_len': 6, 'ip.opt.type': 148, 'ip.len': 44, 'tcp.dstport': 443 });
  });

  it('crosses 802.1Q and QinQ tags', () => {
    const frame = buildFrame(v4tcp);
    const tagged = concatBytes(frame.subarray(0, 12), hex('88a8 0064 8100 00c8 9100 0001'), frame.subarray(12));
    const f = run(tagged);
    expect(info.vlanTags).toBe(3);
    expect(f).toMatchObject({ 'ip.src': '192.0.2.1', 'tcp.dstport': 443 });
  });

  it('survives a tower of VLAN tags that fills the frame', () => {
    const tower = concatBytes(new Uint8Array(12), ...Array.from({ length: 400 }, () => hex('8100 0001')));
    run(tower);
    expect(info.status & ST_TRUNCATED).toBe(ST_TRUNCATED);
    expect(info.status & ST_IP).toBe(0);
  });

  it('leaves non-IP frames undecoded and not IP (ARP passes unevaluated)', () => {
    const arp = concatBytes(new Uint8Array(12), hex('0806'), new Uint8Array(28));
    expect(run(arp)).toEqual({});
    expect(info.status).toBe(0);
    expect(info.etherType).toBe(0x0806);
  });

  it('ignores Ethernet padding after a short IP datagram', () => {
    const frame = concatBytes(buildFrame({ ip: v4tcp.ip, l4: { kind: 'udp', srcPort: 1, dstPort: 2 } }), new Uint8Array(18));
    const f = run(frame);
    expect(f['ip.len']).toBe(28);
    expect((f['udp'] as string).length).toBe(16);
    expect((f['ip'] as string).length).toBe(56);
  });
});

describe('decoding other link types', () => {
  const ipPkt = buildIpPacket(v4tcp);
  const ip6Pkt = buildIpPacket(v6udp);
  it.each([
    ['RAW', LINKTYPE.RAW, ipPkt, '192.0.2.1'],
    ['RAW (old 12)', LINKTYPE.RAW_OLD_12, ip6Pkt, '2001:db8::1'],
    ['IPV4', LINKTYPE.IPV4, ipPkt, '192.0.2.1'],
    ['IPV6', LINKTYPE.IPV6, ip6Pkt, '2001:db8::1'],
    ['LINUX_SLL', LINKTYPE.LINUX_SLL, concatBytes(hex('0000 0001 0006 020000000001 0000 0800'), ipPkt), '192.0.2.1'],
    ['LINUX_SLL2', LINKTYPE.LINUX_SLL2, concatBytes(hex('86dd 0000 00000002 0001 00 06 020000000001 0000'), ip6Pkt), '2001:db8::1'],
    ['NULL (little-endian AF_INET)', LINKTYPE.NULL, concatBytes(hex('02000000'), ipPkt), '192.0.2.1'],
    ['NULL (big-endian AF_INET6 = 30)', LINKTYPE.NULL, concatBytes(hex('0000001e'), ip6Pkt), '2001:db8::1'],
    ['LOOP (AF_INET6 = 24)', LINKTYPE.LOOP, concatBytes(hex('00000018'), ip6Pkt), '2001:db8::1'],
  ])('finds the IP packet behind %s', (_name, lt, frame, src) => {
    const f = run(frame, lt);
    expect(info.status & ST_IP).toBe(ST_IP);
    expect(f['ip.src']).toBe(src);
  });

  it('flags an unsupported link type and decodes nothing', () => {
    expect(run(ipPkt, 147)).toEqual({});
    expect(info.status).toBe(ST_UNSUPPORTED_LINK);
  });
});

describe('fragments and extension headers', () => {
  it('gives a non-first IPv4 fragment no transport fields', () => {
    const pkt = buildIpPacket(v4tcp);
    pkt[6] = 0x00;
    pkt[7] = 0x05; // offset 5 * 8 bytes
    const f = run(concatBytes(hex('020000000002 020000000001 0800'), pkt));
    expect(info.status & ST_FRAGMENT).toBe(ST_FRAGMENT);
    expect(f['ip.proto']).toBe('tcp');
    expect(f['tcp.dstport']).toBeUndefined();
    expect(f['tcp']).toBeUndefined();
  });

  it('reads the transport header of a first fragment (MF set, offset 0)', () => {
    const pkt = buildIpPacket(v4tcp);
    pkt[6] = 0x20;
    expect(run(pkt, LINKTYPE.RAW)['tcp.dstport']).toBe(443);
  });

  it('walks hop-by-hop, routing, destination options, fragment and AH headers to the upper layer', () => {
    const base = buildIpPacket(v6udp); // 40-byte header + 20-byte UDP
    const udp = base.subarray(40);
    const ext = hex(
      '2b00 0000 0000 0000' + // hop-by-hop (8 bytes) -> routing (43)
      '3c00 0000 0000 0000' + // routing (8 bytes) -> dest opts (60)
      '2c00 0000 0000 0000' + // dest opts (8 bytes) -> fragment (44)
      '3300 0001 0000 0001' + // fragment, offset 0, M=1 -> AH (51)
      '1101 0000 00000001 00000001', // AH: payload len 1 -> (1+2)*4 = 12 bytes -> UDP (17)
    );
    const hdr = base.slice(0, 40);
    hdr[6] = 0; // first next header: hop-by-hop
    const len = ext.length + udp.length;
    hdr[4] = len >> 8;
    hdr[5] = len & 255;
    const f = run(concatBytes(hdr, ext, udp), LINKTYPE.RAW);
    expect(f).toMatchObject({ 'ip.proto': 'udp', 'udp.dstport': 53, 'ip.len': 40 + len });
    expect(info.status).toBe(ST_IP);
  });

  it('gives a non-first IPv6 fragment its protocol but no ports', () => {
    const base = buildIpPacket(v6udp);
    const hdr = base.slice(0, 40);
    hdr[6] = 44;
    const frag = hex('1100 0010 0000 0001'); // offset 2 (in 8-byte units), next header UDP
    const body = base.subarray(40);
    hdr[4] = 0;
    hdr[5] = frag.length + body.length;
    const f = run(concatBytes(hdr, frag, body), LINKTYPE.RAW);
    expect(info.status & ST_FRAGMENT).toBe(ST_FRAGMENT);
    expect(f['ip.proto']).toBe('udp');
    expect(f['udp.dstport']).toBeUndefined();
  });
});

describe('damaged frames', () => {
  it('flags a bad IHL as malformed and reads no transport fields', () => {
    const pkt = buildIpPacket(v4tcp);
    pkt[0] = 0x43;
    const f = run(pkt, LINKTYPE.RAW);
    expect(info.status & ST_MALFORMED).toBe(ST_MALFORMED);
    expect(f['ip.src']).toBe('192.0.2.1');
    expect(f['tcp.dstport']).toBeUndefined();
  });

  it('flags a total length longer than the capture as truncated and keeps what is there', () => {
    const pkt = buildIpPacket(v4tcp).slice(0, 30);
    const f = run(pkt, LINKTYPE.RAW);
    expect(info.status & ST_TRUNCATED).toBe(ST_TRUNCATED);
    expect(f).toMatchObject({ 'ip.len': 40, 'tcp.srcport': 40000, 'tcp.dstport': 443 });
    expect(f['tcp.flags']).toBeUndefined();
  });

  it('flags an IPv4 total length below the header length as malformed', () => {
    const pkt = buildIpPacket(v4tcp);
    pkt[2] = 0;
    pkt[3] = 12;
    run(pkt, LINKTYPE.RAW);
    expect(info.status & ST_MALFORMED).toBe(ST_MALFORMED);
  });

  it('stops at an endless chain of IPv6 extension headers', () => {
    const hdr = buildIpPacket(v6udp).slice(0, 40);
    hdr[6] = 60;
    const chain = concatBytes(...Array.from({ length: 40 }, () => hex('3c00 0000 0000 0000')));
    hdr[4] = chain.length >> 8;
    hdr[5] = chain.length & 255;
    const f = run(concatBytes(hdr, chain), LINKTYPE.RAW);
    expect(info.status & ST_MALFORMED).toBe(ST_MALFORMED);
    expect(f['ip.proto']).toBeUndefined();
  });

  it('decodes every prefix of every test frame without throwing, reading only what each prefix holds', () => {
    const frames = [buildFrame(v4tcp), buildFrame(v6udp), buildFrame({ ...v4tcp, ip: { ...v4tcp.ip, options: IPV4_OPTION.timestamp(3) } as FrameSpec['ip'] })];
    for (const frame of frames) {
      const full = run(frame);
      for (let n = 0; n <= frame.length; n++) {
        const f = run(frame.subarray(0, n));
        // A prefix never invents a value: each field it has equals the full frame's (raw fields are prefixes).
        for (const [k, v] of Object.entries(f)) {
          if (typeof v === 'string' && ['ip', 'tcp', 'udp', 'icmp'].includes(k)) expect((full[k] as string).startsWith(v)).toBe(true);
          else if (k !== 'ip.len') expect(v, `${k} at prefix ${n}`).toEqual(full[k]);
        }
        if (n < frame.length) expect(info.status & (ST_TRUNCATED | ST_MALFORMED), `prefix ${n}`).not.toBe(0);
      }
    }
  });

  it('decodes random bytes on every link type without throwing', () => {
    const r = new Rng(7);
    const lts = [0, 1, 12, 14, 101, 108, 113, 228, 229, 276];
    let ip = 0;
    for (let i = 0; i < 20_000; i++) {
      const frame = Uint8Array.from({ length: r.int(120) }, () => r.int(256));
      // Make many of them look like IP so the deeper decoders are reached.
      if (frame.length > 14 && r.chance(0.5)) {
        frame[12] = 0x08;
        frame[13] = 0;
        frame[14] = 0x45;
      }
      run(frame, r.pick(lts));
      if (info.status & ST_IP) ip++;
    }
    expect(ip).toBeGreaterThan(5_000);
  });
});

describe('decode plans', () => {
  it('skips the layers no rule reads', () => {
    const plan = planFor(['ip.src', 'udp.dstport']);
    const f = run(buildFrame(v4tcp), LINKTYPE.ETHERNET, plan);
    expect(f['ip.src']).toBe('192.0.2.1');
    expect(f['tcp.dstport']).toBeUndefined();
    expect(f['tcp']).toBeUndefined();
  });

  it('reads sip only when asked and recognises a SIP request line', () => {
    const sip = new TextEncoder().encode('INVITE sip:bob@example.com SIP/2.0\r\nVia: x\r\n\r\n');
    const frame = buildFrame({ ip: v4tcp.ip, l4: { kind: 'udp', srcPort: 5060, dstPort: 5060, payload: sip } });
    expect(run(frame, LINKTYPE.ETHERNET, planFor(['sip']))['sip']).toBe(true);
    expect(run(frame, LINKTYPE.ETHERNET, planFor(['udp.dstport']))['sip']).toBeUndefined();
    const notSip = buildFrame({ ip: v4tcp.ip, l4: { kind: 'udp', srcPort: 5060, dstPort: 5060, payload: new TextEncoder().encode('HELLO world\r\n') } });
    expect(run(notSip, LINKTYPE.ETHERNET, planFor(['sip']))['sip']).toBeUndefined();
  });
});
