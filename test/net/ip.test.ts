// IP parsing is strict and agrees with ipaddr.js on what it accepts.
import fc from 'fast-check';
import ipaddr from 'ipaddr.js';
import { describe, expect, it } from 'vitest';
import { formatIp, IpRangeSet, parseCidr, parseIp, parseIpRange } from '../../src/net/index.js';

describe('parseIp', () => {
  it('round-trips every IPv4 address through text', () => {
    fc.assert(
      fc.property(fc.ipV4(), (text) => {
        const a = parseIp(text);
        expect(a?.family).toBe(4);
        expect(formatIp(a!)).toBe(text);
      }),
    );
  });

  it('reads every IPv6 address as ipaddr.js does', () => {
    fc.assert(
      fc.property(fc.ipV6(), (text) => {
        const a = parseIp(text);
        expect(a?.family).toBe(6);
        expect(formatIp(a!)).toBe(ipaddr.IPv6.parse(text).toString());
      }),
    );
  });

  it('rejects leading zeros, short forms and zone ids', () => {
    for (const bad of ['1.1.1.01', '10.1', '1.2.3.256', '0x7f.0.0.1', 'fe80::1%eth0', '1:2:3:4:5:6:7:8:9', '', '::g']) {
      expect(parseIp(bad), bad).toBeUndefined();
    }
  });

  it('keeps IPv4-mapped IPv6 addresses in the IPv6 family', () => {
    expect(parseIp('::ffff:10.1.2.3')).toEqual({ family: 6, words: [0, 0, 0xffff, 0x0a010203] });
  });
});

describe('parseCidr and IP ranges', () => {
  it('rejects host bits and names the network meant', () => {
    expect(parseCidr('10.1.2.3/24')).toEqual({ ok: false, reason: 'host-bits', network: '10.1.2.0/24' });
    expect(parseCidr('2001:db8::1/32')).toEqual({ ok: false, reason: 'host-bits', network: '2001:db8::/32' });
    expect(parseCidr('10.0.0.0/33')).toEqual({ ok: false, reason: 'length' });
  });

  it('builds sets whose members are exactly the addresses of their entries', () => {
    const set = IpRangeSet.fromStrings(['10.0.0.0/8', '192.0.2.10..192.0.2.20', '2001:db8::/127', '0.0.0.0/32']);
    expect(set.contains4(0x0a000000)).toBe(true);
    expect(set.contains4(0x0affffff)).toBe(true);
    expect(set.contains4(0x0b000000)).toBe(false);
    expect(set.contains4(0xc000020a)).toBe(true);
    expect(set.contains4(0xc0000215)).toBe(false);
    expect(set.contains4(0)).toBe(true);
    expect(set.contains6(0x20010db8, 0, 0, 1)).toBe(true);
    expect(set.contains6(0x20010db8, 0, 0, 2)).toBe(false);
  });

  it('explains a bad entry', () => {
    expect(parseIpRange('10.0.0.9..10.0.0.1')).toMatch(/ends before it starts/);
    expect(parseIpRange('10.0.0.1..::1')).toMatch(/mixes IPv4 and IPv6/);
    expect(parseIpRange('10.0.0.1/8')).toMatch(/did you mean 10.0.0.0\/8/);
  });
});
