// The veth trap, end to end: with transmit checksum offload on at an end host,
// its TCP segments carry unfinished checksums; forwarded through the inline
// daemon, the receiver drops them and TCP fails with no sign. The daemon's
// sampled checksum check makes it visible: a metric and a warning naming the fix.
// With offload off (as README says), the same connection works and nothing is counted.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ensureBuilt } from '../support/cli.js';
import { exec, gatewayTopology, requireRoot, spawnIn, type GatewayTopology, type NsProcess } from '../support/netns.js';

const RUN = requireRoot(['ethtool']);
const dir = mkdtempSync(join(tmpdir(), 'moat-offload-'));

describe.runIf(RUN)('sampled checksum check on a veth lab', () => {
  let topo: GatewayTopology;
  let daemon: NsProcess;
  let server: NsProcess;

  async function tcp(): Promise<string> {
    const script = `
      const s = require('node:net').connect({ host: '10.77.1.2', port: 7070 });
      const t = setTimeout(() => { console.log('failed'); process.exit(0); }, 1500);
      s.on('connect', () => s.write('x'.repeat(200)));
      s.on('data', () => { clearTimeout(t); console.log('ok'); process.exit(0); });
      s.on('error', (e) => { clearTimeout(t); console.log('error ' + e.code); process.exit(0); });`;
    return (await exec(topo.a.ns, process.execPath, ['-e', script], { check: false })).stdout.trim();
  }

  async function bad(): Promise<number> {
    const r = await exec(topo.gateway.ns, process.execPath, ['-e', "fetch('http://127.0.0.1:9490/metrics').then(r => r.text()).then(t => process.stdout.write(t))"]);
    return r.stdout.split('\n').filter((l) => l.startsWith('moat_bad_checksum_sampled_total{')).reduce((n, l) => n + Number(l.split(' ').pop()), 0);
  }

  beforeAll(async () => {
    ensureBuilt();
    topo = await gatewayTopology();
    writeFileSync(join(dir, 'account.json'), JSON.stringify({ rules: [{ action: 'block', expression: 'tcp.dstport == 9' }] }));
    writeFileSync(join(dir, 'daemon.jsonc'), JSON.stringify({ mode: 'inline', interfaces: ['ga', 'gb'], rules: { account: join(dir, 'account.json') }, capture: { ringBytes: 64 << 20 }, checksumSample: 1, watch: false }));
    server = spawnIn(topo.b.ns, process.execPath, ['-e', "require('node:net').createServer((s) => s.pipe(s)).listen(7070, () => console.log('ready'))"]);
    await server.waitForLine(/ready/);
    daemon = spawnIn(topo.gateway.ns, process.execPath, [BIN, 'daemon', '--config', join(dir, 'daemon.jsonc')]);
    await daemon.waitForLine(/"msg":"daemon running"/, 20_000);
  }, 120_000);

  afterAll(async () => {
    await topo?.destroy();
  }, 60_000);

  it('with offload off on the end hosts, TCP works and no bad checksum is counted', async () => {
    expect(await tcp()).toBe('ok');
    expect(await bad()).toBe(0);
  }, 30_000);

  it('with transmit offload on at host A, TCP fails through the bridge, and the metric and a warning say why', async () => {
    await exec(topo.a.ns, 'ethtool', ['-K', topo.a.iface, 'tx', 'on']);
    const from = daemon.lines.length;
    expect(await tcp()).not.toBe('ok');
    expect(await bad()).toBeGreaterThan(0);
    const warning = await daemon.waitForJson<{ msg: string; interface: string }>((l) => l.msg.includes('bad tcp checksum'), 5_000, from);
    expect(warning.interface).toBe('ga');
    expect(warning.msg).toContain('ethtool -K IF tx off');
    await exec(topo.a.ns, 'ethtool', ['-K', topo.a.iface, 'tx', 'off']);
  }, 30_000);
});
