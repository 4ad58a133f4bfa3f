// A drop log line carries the packet (addresses, protocol, ports, the interface
// it came in on, and inline the way it was going) with the rule's id and
// description; in monitor mode, where nothing is dropped, it says "would drop".
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { validateDaemonConfig } from '../../src/config/index.js';
import { Daemon } from '../../src/daemon/index.js';
import { FrameInspector } from '../../src/engine/index.js';
import { MemorySource } from '../support/memory-source.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-drop-log-'));
const ACCOUNT = join(dir, 'account.json');
writeFileSync(ACCOUNT, JSON.stringify({ rules: [
  { id: 'block-ssh', action: 'block', expression: 'tcp.dstport == 22', description: 'admin ports' },
  { action: 'block', expression: 'udp.dstport == 53', description: '' },
] }));
const ssh = Buffer.from(buildFrame({ ip: { version: 4, src: '192.0.2.1', dst: '198.51.100.7', ttl: 64 }, l4: { kind: 'tcp', srcPort: 40000, dstPort: 22, flags: TCP.SYN } }));
const dns6 = Buffer.from(buildFrame({ ip: { version: 6, src: '2001:db8::1', dst: '2001:db8::53', hopLimit: 64 }, l4: { kind: 'udp', srcPort: 5353, dstPort: 53 } }));

async function run(mode: 'monitor' | 'inline') {
  const logs: Array<Record<string, unknown>> = [];
  const log = pino({ level: 'info' }, { write: (s: string) => logs.push(JSON.parse(s)) });
  const interfaces = mode === 'inline' ? ['ga', 'gb'] : ['ga'];
  const config = validateDaemonConfig({ mode, interfaces, rules: { account: ACCOUNT }, metrics: { enabled: false }, watch: false, log: { drops: true } }, join(dir, 'd.jsonc'));
  const sources = new Map<string, MemorySource>();
  const d = new Daemon(config, log, (iface) => {
    const s = new MemorySource(iface);
    sources.set(iface, s);
    return s;
  });
  await d.start();
  sources.get('ga')!.deliver(ssh);
  sources.get('ga')!.deliver(dns6);
  await d.stop();
  return logs.filter((l) => l.rule !== undefined && l.interface !== undefined);
}

describe('drop log lines', () => {
  it('carry the packet, the direction and the rule; inline says "dropped"', async () => {
    const lines = await run('inline');
    expect(lines).toMatchObject([
      {
        msg: 'dropped tcp 192.0.2.1:40000 -> 198.51.100.7:22 on ga by rule block-ssh "admin ports"',
        action: 'drop', interface: 'ga', direction: 'ga -> gb', src: '192.0.2.1', dst: '198.51.100.7', protocol: 'tcp', srcPort: 40000, dstPort: 22,
        rule: 'block-ssh', ruleset: 'account', description: 'admin ports',
      },
      { msg: 'dropped udp [2001:db8::1]:5353 -> [2001:db8::53]:53 on ga by rule account#1', src: '2001:db8::1', dst: '2001:db8::53', protocol: 'udp', rule: 'account#1' },
    ]);
    // An empty description is left out.
    expect('description' in lines[1]!).toBe(false);
  });

  it('say "would drop" in monitor mode, where nothing is dropped', async () => {
    const lines = await run('monitor');
    expect(lines.map((l) => [l.msg, l.action, 'direction' in l])).toEqual([
      ['would drop tcp 192.0.2.1:40000 -> 198.51.100.7:22 on ga by rule block-ssh "admin ports"', 'would_drop', false],
      ['would drop udp [2001:db8::1]:5353 -> [2001:db8::53]:53 on ga by rule account#1', 'would_drop', false],
    ]);
  });

  it('a frame that is not IP has no summary', () => {
    const arp = Buffer.alloc(60);
    arp.writeUInt16BE(0x0806, 12);
    expect(new FrameInspector().describe(arp, arp.length, 1)).toBeUndefined();
  });
});
