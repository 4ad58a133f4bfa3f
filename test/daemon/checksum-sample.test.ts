// The inline daemon verifies the TCP/UDP checksum of 1 in `checksumSample`
// forwarded frames and counts the bad ones in a metric (what a veth lab with
// transmit checksum offload on an end host looks like: TCP fails with no sign).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { validateDaemonConfig } from '../../src/config/index.js';
import { Daemon, daemonMetrics } from '../../src/daemon/index.js';
import { FrameInspector } from '../../src/engine/index.js';
import { MemorySource } from '../support/memory-source.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-checksum-'));
writeFileSync(join(dir, 'account.json'), JSON.stringify({ rules: [{ action: 'block', expression: 'tcp.dstport == 22' }] }));

const tcp4 = () => Buffer.from(buildFrame({ ip: { version: 4, src: '192.0.2.1', dst: '198.51.100.7', ttl: 64 }, l4: { kind: 'tcp', srcPort: 40000, dstPort: 80, flags: TCP.SYN, payload: new Uint8Array([1, 2, 3]) } }));
const udp6 = () => Buffer.from(buildFrame({ ip: { version: 6, src: '2001:db8::1', dst: '2001:db8::2', hopLimit: 64 }, l4: { kind: 'udp', srcPort: 5000, dstPort: 53, payload: new Uint8Array([9, 8, 7, 6, 5]) } }));
const udp4 = () => Buffer.from(buildFrame({ ip: { version: 4, src: '192.0.2.1', dst: '198.51.100.7', ttl: 64 }, l4: { kind: 'udp', srcPort: 5000, dstPort: 53 } }));
// The transport checksum field: TCP at 16, UDP at 6, after Ethernet (14) and the IP header.
const corrupt = (f: Buffer, at: number) => {
  f[at] = f[at]! ^ 0xff;
  return f;
};
const TCP4_SUM = 14 + 20 + 16;
const UDP6_SUM = 14 + 40 + 6;
const UDP4_SUM = 14 + 20 + 6;

describe('sampled checksum check', () => {
  it('FrameInspector verifies TCP and UDP checksums over IPv4 and IPv6', () => {
    const x = new FrameInspector();
    const ok = (f: Buffer) => x.checksumOk(f, f.length, 1);
    expect([ok(tcp4()), ok(udp6()), ok(udp4())]).toEqual([true, true, true]);
    expect([ok(corrupt(tcp4(), TCP4_SUM)), ok(corrupt(udp6(), UDP6_SUM)), ok(corrupt(udp4(), UDP4_SUM))]).toEqual([false, false, false]);
    // A damaged payload byte, not only the field.
    const t = tcp4();
    t[t.length - 1] = t[t.length - 1]! ^ 1;
    expect(ok(t)).toBe(false);
    // UDP over IPv4 with checksum 0 has none; an ICMP frame is not checked.
    const none = udp4();
    none.writeUInt16BE(0, UDP4_SUM);
    expect(ok(none)).toBeUndefined();
    const icmp = Buffer.from(buildFrame({ ip: { version: 4, src: '192.0.2.1', dst: '192.0.2.2', ttl: 64 }, l4: { kind: 'icmp', type: 8, code: 0 } }));
    expect(ok(icmp)).toBeUndefined();
  });

  it('counts a forwarded frame with a bad checksum in moat_bad_checksum_sampled_total, and says so once', async () => {
    const logs: Array<{ level: number; msg: string }> = [];
    const log = pino({ level: 'info' }, { write: (s: string) => logs.push(JSON.parse(s)) });
    const config = validateDaemonConfig(
      { mode: 'inline', interfaces: ['ga', 'gb'], rules: { account: join(dir, 'account.json') }, metrics: { enabled: false }, watch: false, checksumSample: 2 },
      join(dir, 'd.jsonc'),
    );
    const sources = new Map<string, MemorySource>();
    const d = new Daemon(config, log, (iface) => {
      const s = new MemorySource(iface);
      sources.set(iface, s);
      return s;
    });
    await d.start();
    const ga = sources.get('ga')!;
    // 1 in 2: the 2nd, 4th, 6th... forwarded frames are checked.
    ga.deliver(corrupt(tcp4(), TCP4_SUM)); // not sampled
    ga.deliver(tcp4()); // sampled, good
    ga.deliver(tcp4());
    ga.deliver(corrupt(udp6(), UDP6_SUM)); // sampled, bad
    ga.deliver(tcp4());
    ga.deliver(corrupt(tcp4(), TCP4_SUM)); // sampled, bad
    expect(sources.get('gb')!.sentFrames.length).toBe(6); // counted, still forwarded
    const text = await daemonMetrics(d).metrics();
    expect(text).toContain('moat_checksum_sampled_total{interface="ga"} 3');
    expect(text).toContain('moat_bad_checksum_sampled_total{interface="ga"} 2');
    expect(text).toContain('moat_bad_checksum_sampled_total{interface="gb"} 0');
    const warnings = logs.filter((l) => l.level === 40 && l.msg.includes('bad udp checksum'));
    expect(warnings.length).toBe(1);
    expect(warnings[0]!.msg).toContain('ethtool -K IF tx off');
    await d.stop();
  });
});
