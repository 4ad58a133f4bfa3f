// End to end, in network namespaces (root; runs in CI): `moat daemon` inline
// on the ring engine with two packet workers. What only the ring engine
// promises: each flow, both directions, stays on one worker; a ruleset swap
// during a flood loses and misjudges nothing; the daemon survives a port's link
// going down and forwards again when it returns; frames larger than a ring slot
// are counted, not forwarded and not fatal; nothing forwarded is read back.
// One topology and one daemon for the file.
import { mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ensureBuilt } from '../support/cli.js';
import { exec, gatewayTopology, ip, nodeIn, requireRoot, spawnIn, type GatewayTopology, type NsProcess } from '../support/netns.js';

const RUN = requireRoot(['ping']);
const dir = mkdtempSync(join(tmpdir(), 'moat-ring-e2e-'));
const ACCOUNT = join(dir, 'account.json');
const FLOWS = 16;
/** Frames each side of a flow sends in the fanout test. */
const PER_SIDE = 5;

// Both directions of the 16 test flows (UDP 40000+k <-> 7000+k) are dropped, and so logged with their worker.
const BASE_RULES = [{ id: 'flows', action: 'block', expression: '(udp.dstport >= 7000 and udp.dstport <= 7015) or (udp.srcport >= 7000 and udp.srcport <= 7015)' }];

function deployRules(rules: unknown[]): void {
  writeFileSync(`${ACCOUNT}.tmp`, JSON.stringify({ phase: 'network_transit', version: String(Date.now()), rules }));
  renameSync(`${ACCOUNT}.tmp`, ACCOUNT);
}

describe.runIf(RUN)('moat daemon inline on the ring engine with two packet workers', () => {
  let topo: GatewayTopology;
  let daemon: NsProcess;

  async function fetchText(path: string): Promise<string> {
    return (await exec(topo.gateway.ns, process.execPath, ['-e', `fetch('http://127.0.0.1:9490${path}').then(r => r.text()).then(t => process.stdout.write(t))`])).stdout;
  }

  function metric(text: string, name: string, labels: string): number {
    const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
    return line === undefined ? NaN : Number(line.split(' ').pop());
  }

  // A UDP sender that sends `count` datagrams (every `everyMs`) from local port lport+k to port rport+k of `host`, for each flow k.
  function udpFlows(ns: string, host: string, lport: number, rport: number, count: number, everyMs: number): NsProcess {
    return nodeIn(
      ns,
      `import dgram from 'node:dgram';
       const socks = [];
       for (let k = 0; k < ${FLOWS}; k++) { const s = dgram.createSocket('udp4'); s.bind(${lport} + k); socks.push(s); }
       let sent = 0;
       const t = setInterval(() => {
         const k = sent % ${FLOWS};
         socks[k].send(Buffer.from('flow ' + k), ${rport} + k, ${JSON.stringify(host)});
         if (++sent === ${FLOWS * count}) { clearInterval(t); setTimeout(() => { console.log('done'); process.exit(0); }, 100); }
       }, ${everyMs});`,
    );
  }

  beforeAll(async () => {
    ensureBuilt();
    topo = await gatewayTopology({ staticNeighbors: true });
    deployRules(BASE_RULES);
    writeFileSync(
      join(dir, 'daemon.jsonc'),
      JSON.stringify({
        mode: 'inline',
        interfaces: { outside: topo.gateway.portA, inside: topo.gateway.portB },
        judge: 'both',
        rules: { account: ACCOUNT },
        // 1 KiB slots: a 1,400-byte ping does not fit (the oversized-frame test).
        capture: { engine: 'ring', workers: 2, ringBytes: 8 << 20, slotBytes: 1024 },
        metrics: { listen: '127.0.0.1:9490' },
        log: { drops: true },
      }),
    );
    daemon = spawnIn(topo.gateway.ns, process.execPath, [BIN, 'daemon', '--config', join(dir, 'daemon.jsonc')]);
    const running = JSON.parse(await daemon.waitForLine(/"msg":"daemon running"/, 20_000)) as { engine: string; workers: number };
    expect([running.engine, running.workers]).toEqual(['ring', 2]);
  }, 120_000);

  afterAll(async () => {
    await topo?.destroy();
  }, 60_000);

  it('keeps each flow, in both directions, on one worker (16 flows, the kernel\'s symmetric fanout hash), and uses both workers', async () => {
    const from = daemon.lines.length;
    // 25 frames a second from each side: under the drop log's 100 a second, and the workers' sample budget.
    const a = udpFlows(topo.a.ns, topo.b.ipv4, 40000, 7000, PER_SIDE, 40);
    const b = udpFlows(topo.b.ns, topo.a.ipv4, 7000, 40000, PER_SIDE, 40);
    await Promise.all([a.waitForLine(/done/, 20_000), b.waitForLine(/done/, 20_000)]);
    await new Promise((r) => setTimeout(r, 300));
    const drops = daemon.lines.slice(from).filter((l) => l.includes('"action":"drop"')).map((l) => JSON.parse(l) as { srcPort: number; dstPort: number; worker: number; interface: string });
    const byFlow = new Map<number, { workers: Set<number>; ga: number; gb: number }>();
    for (const d of drops) {
      const k = d.dstPort >= 7000 && d.dstPort < 7000 + FLOWS ? d.dstPort - 7000 : d.srcPort - 7000;
      const f = byFlow.get(k) ?? { workers: new Set<number>(), ga: 0, gb: 0 };
      f.workers.add(d.worker);
      if (d.interface === topo.gateway.portA) f.ga++;
      else f.gb++;
      byFlow.set(k, f);
    }
    expect(byFlow.size).toBe(FLOWS);
    for (const [k, f] of byFlow) {
      expect({ flow: k, ga: f.ga, gb: f.gb }).toEqual({ flow: k, ga: PER_SIDE, gb: PER_SIDE });
      expect({ flow: k, workers: f.workers.size }).toEqual({ flow: k, workers: 1 });
    }
    // 16 flows all on one of two workers: 1 chance in 2^15 with a working hash.
    expect(new Set([...byFlow.values()].map((f) => [...f.workers][0])).size).toBe(2);
    const m = await fetchText('/metrics');
    expect(metric(m, 'moat_worker_frames_total', 'worker="0"')).toBeGreaterThan(0);
    expect(metric(m, 'moat_worker_frames_total', 'worker="1"')).toBeGreaterThan(0);
  }, 60_000);

  it('swaps the ruleset during a flood of allowed frames, one flow wrapping its worker\'s ring twice: every frame arrives, and then the new rule applies', async () => {
    const receiver = nodeIn(
      topo.b.ns,
      `import dgram from 'node:dgram';
       const seen = new Set(); let idle;
       const s = dgram.createSocket({ type: 'udp4', recvBufferSize: 4 << 20 });
       s.on('message', (m) => { seen.add(m.readUInt32BE(0)); clearTimeout(idle); idle = setTimeout(() => console.log('got ' + seen.size), 1500); });
       s.bind(9100, () => console.log('ready'));`,
    );
    await receiver.waitForLine(/ready/);
    const m0 = await fetchText('/metrics');
    // About 5,000 frames a second until told to stop, each numbered: one flow, so one worker.
    const sender = nodeIn(
      topo.a.ns,
      `import dgram from 'node:dgram';
       const s = dgram.createSocket('udp4'); let n = 0;
       const t = setInterval(() => { for (let i = 0; i < 6; i++) { const b = Buffer.alloc(64); b.writeUInt32BE(n++, 0); s.send(b, 9100, ${JSON.stringify(topo.b.ipv4)}); } }, 1);
       process.on('SIGTERM', () => { clearInterval(t); setTimeout(() => { console.log('sent ' + n); process.exit(0); }, 50); });
       console.log('sending');`,
    );
    await sender.waitForLine(/sending/);
    await new Promise((r) => setTimeout(r, 400));
    const from = daemon.lines.length;
    deployRules([...BASE_RULES, { id: 'block-9101', action: 'block', expression: 'udp.dstport == 9101' }]);
    await daemon.waitForLine(/"msg":"ruleset swapped"/, 10_000, from);
    await new Promise((r) => setTimeout(r, 1500));
    sender.kill('SIGTERM');
    const sent = Number((await sender.waitForLine(/^sent /, 5_000)).slice(5));
    const got = Number((await receiver.waitForLine(/^got /, 10_000)).slice(4));
    // Each worker's ring on ga: 8 MiB / 2 workers in 1 KiB slots, 4,096 slots (fewer after the kernel's block headers).
    expect(sent).toBeGreaterThan(2 * 4096);
    expect(got).toBe(sent);
    const m1 = await fetchText('/metrics');
    expect(metric(m1, 'moat_ring_drops_total', `interface="${topo.gateway.portA}"`)).toBe(0);
    // No forwarding loop: gb read (almost) nothing while gb sent the flood; ga read the flood once.
    const readGb = metric(m1, 'moat_capture_packets_total', `interface="${topo.gateway.portB}"`) - metric(m0, 'moat_capture_packets_total', `interface="${topo.gateway.portB}"`);
    const sentGb = metric(m1, 'moat_capture_sent_total', `interface="${topo.gateway.portB}"`) - metric(m0, 'moat_capture_sent_total', `interface="${topo.gateway.portB}"`);
    expect(sentGb).toBeGreaterThanOrEqual(sent);
    expect(readGb).toBeLessThan(50);
    // The new rule judges now: 9101 is dropped, 9100 still passes.
    const probe = (port: number) =>
      exec(topo.a.ns, process.execPath, ['-e', `const s = require('node:dgram').createSocket('udp4'); s.send(Buffer.alloc(64), ${port}, ${JSON.stringify(topo.b.ipv4)}, () => s.close());`]);
    const before = metric(m1, 'moat_packets_total', `interface="${topo.gateway.portA}",verdict="drop"`);
    await probe(9101);
    await new Promise((r) => setTimeout(r, 300));
    const m2 = await fetchText('/metrics');
    expect(metric(m2, 'moat_packets_total', `interface="${topo.gateway.portA}",verdict="drop"`)).toBe(before + 1);
    expect(metric(m2, 'moat_rule_hits_total', 'ruleset="account",rule="block-9101",action="block"')).toBe(1);
    await receiver.stop();
  }, 60_000);

  it('counts a frame larger than a ring slot as truncated and never forwards it, and goes on', async () => {
    const big = await exec(topo.a.ns, 'ping', ['-c', '2', '-i', '0.2', '-W', '1', '-s', '1400', topo.b.ipv4], { check: false });
    expect(big.stdout).toContain('2 packets transmitted, 0 received');
    await new Promise((r) => setTimeout(r, 300));
    expect(metric(await fetchText('/metrics'), 'moat_truncated_frames_total', `interface="${topo.gateway.portA}"`)).toBe(2);
    const small = await exec(topo.a.ns, 'ping', ['-c', '2', '-i', '0.2', '-W', '2', topo.b.ipv4], { check: false });
    expect(small.stdout).toContain('2 packets transmitted, 2 received');
  }, 30_000);

  it('survives the outside link going down during traffic: logs it, reports it in /health and metrics, and forwards again when it returns', async () => {
    const pinger = spawnIn(topo.a.ns, 'ping', ['-i', '0.1', '-W', '1', topo.b.ipv4]);
    await pinger.waitForLine(/bytes from/, 5_000);
    const from = daemon.lines.length;
    await ip(['-n', topo.gateway.ns, 'link', 'set', topo.gateway.portA, 'down']);
    const down = JSON.parse(await daemon.waitForLine(/"msg":"link down on /, 10_000, from)) as { level: number; interface: string };
    expect([down.level, down.interface]).toEqual([40, topo.gateway.portA]);
    expect((JSON.parse(await fetchText('/health')) as { links: Record<string, string> }).links).toEqual({ [topo.gateway.portA]: 'down', [topo.gateway.portB]: 'up' });
    expect(metric(await fetchText('/metrics'), 'moat_link_up', `interface="${topo.gateway.portA}"`)).toBe(0);
    await new Promise((r) => setTimeout(r, 500));
    await ip(['-n', topo.gateway.ns, 'link', 'set', topo.gateway.portA, 'up']);
    await daemon.waitForLine(/"msg":"link up on /, 10_000, from);
    const seen = pinger.lines.length;
    await pinger.waitForLine(/bytes from/, 10_000, seen);
    await pinger.stop();
    expect(daemon.done).toBe(false);
    expect((JSON.parse(await fetchText('/health')) as { status: string; links: Record<string, string> })).toMatchObject({ status: 'ok', links: { [topo.gateway.portA]: 'up' } });
    expect(metric(await fetchText('/metrics'), 'moat_link_up', `interface="${topo.gateway.portA}"`)).toBe(1);
  }, 60_000);

  it('stops cleanly on SIGTERM', async () => {
    daemon.kill('SIGTERM');
    expect((await daemon.exited).code).toBe(0);
  }, 30_000);
});
