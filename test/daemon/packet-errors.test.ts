// An exception while judging one packet is counted, handled per `onError`, and
// never stops the daemon. The packet path never throws by design, so the fault
// is injected: frames come from a real capture file through an in-process
// source, and one frame's evaluation is made to throw.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { validateDaemonConfig } from '../../src/config/index.js';
import { Daemon } from '../../src/daemon/index.js';
import { MemorySource } from '../support/memory-source.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-daemon-'));
writeFileSync(join(dir, 'rules.json'), JSON.stringify({ rules: [{ id: 'block-22', action: 'block', expression: 'tcp.dstport == 22' }] }));
const frame = (port: number) => Buffer.from(buildFrame({ ip: { version: 4, src: '192.0.2.1', dst: '192.0.2.2', ttl: 64 }, l4: { kind: 'tcp', srcPort: 1000, dstPort: port, flags: TCP.SYN } }));

async function run(onError: 'pass' | 'drop') {
  const config = validateDaemonConfig({ mode: 'inline', interfaces: ['x0', 'x1'], rules: { account: join(dir, 'rules.json') }, metrics: { enabled: false }, watch: false, onError }, join(dir, 'd.jsonc'));
  const sources = new Map<string, MemorySource>();
  const d = new Daemon(config, pino({ level: 'silent' }), (iface) => {
    const s = new MemorySource(iface);
    sources.set(iface, s);
    return s;
  });
  await d.start();
  const a = sources.get('x0')!;
  const b = sources.get('x1')!;
  const port = d.ports[0]!;
  const path = port.path!;
  const real = path.process.bind(path);
  let calls = 0;
  path.process = (...args) => {
    if (++calls === 2) throw new Error('injected fault');
    return real(...args);
  };
  a.deliver(frame(80)); // passes
  a.deliver(frame(81)); // throws: handled per onError
  a.deliver(frame(22)); // blocked by the rule
  a.deliver(frame(443)); // passes: the daemon goes on
  await d.stop();
  return { d, forwarded: b.sentFrames.map((f) => (f[36]! << 8) | f[37]!) };
}

describe('a packet whose evaluation throws', () => {
  it('is counted and passed with onError "pass", and the daemon goes on', async () => {
    const { d, forwarded } = await run('pass');
    expect(d.packetErrors).toBe(1);
    expect(forwarded).toEqual([80, 81, 443]);
    expect(d.state).toBe('stopped');
  });

  it('is counted and dropped with onError "drop"', async () => {
    const { d, forwarded } = await run('drop');
    expect(d.packetErrors).toBe(1);
    expect(forwarded).toEqual([80, 443]);
  });
});
