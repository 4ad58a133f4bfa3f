// Which frames an inline daemon judges, driven through memory sources: those
// arriving on the outside port; those from inside are forwarded unjudged and
// counted, unless judge is "both". Monitor mode judges every frame and says
// so. judge and interfaces are restart-only: a reload that changes them says
// so (5013) and keeps the running sides. (The same through real interfaces:
// direction.e2e.test.ts.)
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { loadDaemonConfig } from '../../src/config/index.js';
import { Daemon } from '../../src/daemon/index.js';
import { MemorySource } from '../support/memory-source.js';
import { buildFrame, TCP } from '../support/packet-builder.js';

const dir = mkdtempSync(join(tmpdir(), 'moat-direction-'));
const ACCOUNT = join(dir, 'account.json');
writeFileSync(ACCOUNT, JSON.stringify({ rules: [{ id: 'block-ssh', action: 'block', expression: 'tcp.dstport == 22' }] }));
const ssh = Buffer.from(buildFrame({ ip: { version: 4, src: '192.0.2.1', dst: '198.51.100.7', ttl: 64 }, l4: { kind: 'tcp', srcPort: 40000, dstPort: 22, flags: TCP.SYN } }));

async function daemon(settings: Record<string, unknown>) {
  const logs: Array<Record<string, unknown>> = [];
  const log = pino({ level: 'info' }, { write: (s: string) => logs.push(JSON.parse(s) as Record<string, unknown>) });
  const file = join(dir, `d${Math.random().toString(36).slice(2)}.jsonc`);
  const write = (s: Record<string, unknown>) => writeFileSync(file, JSON.stringify({ rules: { account: ACCOUNT }, metrics: { enabled: false }, watch: false, log: { drops: true }, ...s }));
  write(settings);
  const sources = new Map<string, MemorySource>();
  const d = new Daemon(loadDaemonConfig(file), log, (iface) => {
    const s = new MemorySource(iface);
    sources.set(iface, s);
    return s;
  }, undefined, { configFile: file, loader: 'in-thread' });
  await d.start();
  return { d, logs, write, source: (name: string) => sources.get(name)! };
}

describe('the direction an inline daemon judges', () => {
  it('judges frames from outside and forwards those from inside unjudged, counting them, by default', async () => {
    const { d, logs, source } = await daemon({ mode: 'inline', interfaces: { outside: 'up0', inside: 'lan0' } });
    source('up0').deliver(ssh);
    expect(source('lan0').sentFrames.length).toBe(0);
    source('lan0').deliver(ssh);
    source('lan0').deliver(ssh);
    expect(source('up0').sentFrames.length).toBe(2);
    const [up, lan] = d.ports;
    expect([up!.name, up!.side, up!.judged, lan!.name, lan!.side, lan!.judged]).toEqual(['up0', 'outside', true, 'lan0', 'inside', false]);
    expect([up!.counters.dropped, up!.passedUnjudged, lan!.counters.packets, lan!.passedUnjudged, lan!.passedUnjudgedBytes]).toEqual([1, 0, 0, 2, 2 * ssh.length]);
    expect(logs.find((l) => l.judge !== undefined && l.outside !== undefined && l.mode === undefined)?.msg).toBe('judging frames arriving on up0 (outside); frames from lan0 (inside) are forwarded unjudged (judge: "both" judges them too)');
    expect(logs.find((l) => l.action === 'drop')).toMatchObject({ interface: 'up0', direction: 'up0 -> lan0', from: 'outside' });
    await d.stop();
  });

  it('takes the first of a list of two as outside', async () => {
    const { d, source } = await daemon({ mode: 'inline', interfaces: ['lan0', 'up0'] });
    source('lan0').deliver(ssh);
    source('up0').deliver(ssh);
    expect([source('up0').sentFrames.length, source('lan0').sentFrames.length]).toEqual([0, 1]);
    expect(d.ports.map((p) => [p.name, p.side])).toEqual([['lan0', 'outside'], ['up0', 'inside']]);
    await d.stop();
  });

  it('with judge "both", judges the inside\'s frames too, and the drop log says they came from inside', async () => {
    const { d, logs, source } = await daemon({ mode: 'inline', interfaces: { outside: 'up0', inside: 'lan0' }, judge: 'both' });
    source('lan0').deliver(ssh);
    expect(source('up0').sentFrames.length).toBe(0);
    expect([d.ports[1]!.counters.dropped, d.ports[1]!.passedUnjudged]).toEqual([1, 0]);
    expect(logs.find((l) => l.action === 'drop')).toMatchObject({ interface: 'lan0', direction: 'lan0 -> up0', from: 'inside' });
    await d.stop();
  });

  it('keeps the running sides on a reload that changes judge or interfaces, saying they need a restart (5013)', async () => {
    const { d, logs, write, source } = await daemon({ mode: 'inline', interfaces: { outside: 'up0', inside: 'lan0' } });
    write({ mode: 'inline', interfaces: { outside: 'lan0', inside: 'up0' }, judge: 'both' });
    expect((await d.reload('test')).applied).toBe(true);
    const warned = logs.find((l) => l.code === 5013);
    expect(warned?.keys).toEqual(['interfaces', 'judge']);
    source('lan0').deliver(ssh);
    expect(source('up0').sentFrames.length).toBe(1);
    expect(d.config.judge).toBe('inbound');
    await d.stop();
  });

  it('in monitor mode judges every frame it sees and says why', async () => {
    const { d, logs, source } = await daemon({ mode: 'monitor', interfaces: ['span0', 'span1'] });
    source('span1').deliver(ssh);
    expect(d.ports.map((p) => [p.side, p.judged])).toEqual([['mirror', true], ['mirror', true]]);
    expect(d.ports[1]!.counters.dropped).toBe(1);
    expect(logs.some((l) => l.msg === 'monitor: judging every frame seen, in both directions (a mirror port does not say which side a frame came from)')).toBe(true);
    await d.stop();
  });
});
