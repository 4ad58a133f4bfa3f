// End to end, in network namespaces (root; runs in CI): host A and host B on one
// subnet, a gateway between them with no kernel forwarding, and `moat daemon`
// inline on the gateway. What the rules allow crosses, what they block does
// not, and replacing the ruleset file changes verdicts without a restart and
// without breaking a connection that stays allowed. Both capture engines
// (ring and libpcap) pass the same tests.
import { mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PcapReader } from '../../src/capture/index.js';
import { BIN, ensureBuilt, ROOT } from '../support/cli.js';
import { addAddress, exec, gatewayTopology, nodeIn, requireRoot, spawnIn, type GatewayTopology, type NsProcess } from '../support/netns.js';

const RUN = requireRoot(['ping', 'ethtool']);
const ENGINES = ['ring', 'libpcap'] as const;
const dir = mkdtempSync(join(tmpdir(), 'moat-e2e-'));
const ACCOUNT = join(dir, 'account.json');

interface RuleSpec {
  id: string;
  action: string;
  expression: string;
  action_parameters?: { ruleset: string };
}

const BASE_RULES: RuleSpec[] = [
  { id: 'block-9999', action: 'block', expression: 'tcp.dstport == 9999' },
  { id: 'block-gb', action: 'block', expression: 'ip.src.country == "GB" and tcp.dstport == 8080' },
  { id: 'block-listed', action: 'block', expression: 'ip.src in $office_blocklist and tcp.dstport == 7000' },
  { id: 'block-v6-9998', action: 'block', expression: 'ip.dst == fd77::2 and tcp.dstport == 9998' },
];

// Replaces the ruleset file the way deploy tools do: write a new file, rename it over.
function deployRules(rules: RuleSpec[] | string): void {
  const tmp = `${ACCOUNT}.tmp`;
  writeFileSync(tmp, typeof rules === 'string' ? rules : JSON.stringify({ phase: 'network_transit', version: String(Date.now()), rules }));
  renameSync(tmp, ACCOUNT);
}

describe.runIf(RUN).each(ENGINES)('moat daemon inline between two namespaces (%s engine)', (engine) => {
  let topo: GatewayTopology;
  const dropped = join(dir, `dropped-${engine}.pcap`);
  let daemon: NsProcess;
  let servers: NsProcess;

  // A TCP round trip from host A: "ok" when the echo came back, "blocked" when it timed out.
  async function tcp(host: string, port: number, localAddress?: string): Promise<string> {
    const script = `
      const net = require('node:net');
      const s = net.connect({ host: ${JSON.stringify(host)}, port: ${port}${localAddress ? `, localAddress: ${JSON.stringify(localAddress)}` : ''} });
      const t = setTimeout(() => { console.log('blocked'); process.exit(0); }, 1500);
      s.on('connect', () => s.write('ping'));
      s.on('data', () => { clearTimeout(t); console.log('ok'); process.exit(0); });
      s.on('error', (e) => { clearTimeout(t); console.log('error ' + e.code); process.exit(0); });`;
    const r = await exec(topo.a.ns, process.execPath, ['-e', script], { check: false });
    return r.stdout.trim();
  }

  async function metrics(): Promise<string> {
    const r = await exec(topo.gateway.ns, process.execPath, ['-e', "fetch('http://127.0.0.1:9490/metrics').then(r => r.text()).then(t => process.stdout.write(t))"]);
    return r.stdout;
  }

  function metric(text: string, name: string, labels: string): number {
    const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`) || (labels === '' && l.startsWith(`${name} `)));
    return line === undefined ? NaN : Number(line.split(' ').pop());
  }

  beforeAll(async () => {
    ensureBuilt();
    topo = await gatewayTopology();
    // Second addresses in a network the test GeoIP database places in GB.
    await addAddress(topo.a.ns, topo.a.iface, '81.2.69.1/24');
    await addAddress(topo.b.ns, topo.b.iface, '81.2.69.2/24');
    writeFileSync(join(dir, 'office.txt'), '# the office\n10.77.1.1\n');
    deployRules(BASE_RULES);
    writeFileSync(
      join(dir, 'daemon.jsonc'),
      JSON.stringify({
        mode: 'inline',
        interfaces: [topo.gateway.portA, topo.gateway.portB],
        rules: { account: ACCOUNT },
        lists: { office_blocklist: join(dir, 'office.txt') },
        geoip: { country: join(ROOT, 'native-fixtures/geoip/test-country.mmdb') },
        capture: { engine, ringBytes: 64 << 20 },
        metrics: { listen: '127.0.0.1:9490' },
        dropCapture: { path: dropped, maxBytes: 1 << 20, files: 2 },
      }),
    );
    servers = nodeIn(
      topo.b.ns,
      "import net from 'node:net'; let n = 0; for (const p of [7000, 8080, 8081, 9998, 9999]) net.createServer((s) => s.pipe(s)).listen(p, '::', () => { if (++n === 5) console.log('ready'); });",
    );
    await servers.waitForLine(/ready/);
    daemon = spawnIn(topo.gateway.ns, process.execPath, [BIN, 'daemon', '--config', join(dir, 'daemon.jsonc')]);
    const running = await daemon.waitForLine(/"msg":"daemon running"/, 20_000);
    expect(JSON.parse(running).engine).toBe(engine);
  }, 120_000);

  afterAll(async () => {
    await topo?.destroy();
  }, 60_000);

  it('passes ping both ways over IPv4 and IPv6, with no frame looped or duplicated', async () => {
    const r = await exec(topo.a.ns, 'ping', ['-c', '5', '-i', '0.2', '-W', '2', topo.b.ipv4], { check: false });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('5 packets transmitted, 5 received');
    expect(r.stdout).not.toContain('DUP!');
    expect((await exec(topo.b.ns, 'ping', ['-c', '2', '-W', '2', topo.a.ipv4], { check: false })).code).toBe(0);
    expect((await exec(topo.a.ns, 'ping', ['-6', '-c', '2', '-W', '2', topo.b.ipv6], { check: false })).code).toBe(0);
  }, 30_000);

  it('passes TCP to an allowed port and blocks a blocked one', async () => {
    expect(await tcp(topo.b.ipv4, 8080)).toBe('ok');
    expect(await tcp(topo.b.ipv4, 9999)).toBe('blocked');
  }, 30_000);

  it('blocks by country with the test GeoIP database, and only that source', async () => {
    expect(await tcp('81.2.69.2', 8080, '81.2.69.1')).toBe('blocked');
    expect(await tcp(topo.b.ipv4, 8080, topo.a.ipv4)).toBe('ok');
  }, 30_000);

  it('blocks by list membership', async () => {
    expect(await tcp(topo.b.ipv4, 7000, topo.a.ipv4)).toBe('blocked');
    expect(await tcp('81.2.69.2', 7000, '81.2.69.1')).toBe('ok');
  }, 30_000);

  it('judges IPv6 by the same rules', async () => {
    expect(await tcp(topo.b.ipv6, 8080)).toBe('ok');
    expect(await tcp(topo.b.ipv6, 9998)).toBe('blocked');
    expect(await tcp(topo.b.ipv4, 9998)).toBe('ok');
  }, 30_000);

  it('counts verdicts and rule hits on its Prometheus endpoint', async () => {
    const m = await metrics();
    expect(metric(m, 'moat_packets_total', `interface="${topo.gateway.portA}",verdict="drop"`)).toBeGreaterThan(0);
    expect(metric(m, 'moat_packets_total', `interface="${topo.gateway.portA}",verdict="pass"`)).toBeGreaterThan(0);
    expect(metric(m, 'moat_rule_hits_total', 'ruleset="account",rule="block-9999",action="block"')).toBeGreaterThan(0);
    expect(metric(m, 'moat_rule_hits_total', 'ruleset="account",rule="block-gb",action="block"')).toBeGreaterThan(0);
    // The country and list rules looked addresses up (the blocked source of the country test, at least).
    expect(metric(m, 'moat_address_lookups_total', `interface="${topo.gateway.portA}",result="lookup"`)).toBeGreaterThan(0);
    expect(metric(m, 'moat_up', '')).toBe(1);
  }, 30_000);

  it('swaps in a changed ruleset without a restart, keeping an allowed connection alive', async () => {
    expect(await tcp(topo.b.ipv4, 8081)).toBe('ok');
    // A connection that stays allowed: it sends a line every 50 ms and prints each echo.
    const client = nodeIn(
      topo.a.ns,
      `import net from 'node:net';
       const s = net.connect(8080, ${JSON.stringify(topo.b.ipv4)});
       let n = 0;
       s.on('data', (d) => { for (const l of d.toString().split('\\n')) if (l) console.log('echo ' + l); });
       setInterval(() => s.write(String(++n) + '\\n'), 50);`,
    );
    await client.waitForLine(/^echo 5$/, 10_000);
    const before = client.lines.length;
    deployRules([...BASE_RULES, { id: 'block-8081', action: 'block', expression: 'tcp.dstport == 8081' }]);
    await daemon.waitForLine(/"msg":"ruleset swapped"/, 10_000);
    expect(await tcp(topo.b.ipv4, 8081)).toBe('blocked');
    // The long connection kept going through the swap.
    const seen = client.lines.length;
    await client.waitForLine((l) => l.startsWith('echo '), 5_000, seen);
    expect(client.lines.length).toBeGreaterThan(before);
    const last = Number(client.lines[client.lines.length - 1]!.slice(5));
    expect(last).toBeGreaterThan(5);
    await client.stop();
    const m = await metrics();
    expect(metric(m, 'moat_ruleset_swaps_total', '')).toBe(1);
  }, 60_000);

  it('reloads on SIGHUP', async () => {
    const from = daemon.lines.length;
    daemon.kill('SIGHUP');
    const line = await daemon.waitForLine(/"msg":"ruleset swapped"/, 10_000, from);
    expect(JSON.parse(line).reason).toBe('SIGHUP');
    expect(metric(await metrics(), 'moat_ruleset_swaps_total', '')).toBe(2);
  }, 30_000);

  it('rejects a ruleset that does not compile and keeps the running one', async () => {
    const from = daemon.lines.length;
    deployRules([{ id: 'bad', action: 'block', expression: 'tcp.dstport in {1, 2}' }]);
    await daemon.waitForLine(/"msg":"reload rejected; the running ruleset stays"/, 10_000, from);
    expect(await tcp(topo.b.ipv4, 9999)).toBe('blocked');
    expect(await tcp(topo.b.ipv4, 8080)).toBe('ok');
    const m = await metrics();
    expect(metric(m, 'moat_ruleset_reload_failures_total', '')).toBe(1);
  }, 30_000);

  it('stops cleanly on SIGTERM, logging its totals', async () => {
    daemon.kill('SIGTERM');
    const exit = await daemon.exited;
    expect(exit.code).toBe(0);
    const stopped = daemon.lines.find((l) => l.includes('"msg":"daemon stopped"'));
    expect(stopped).toBeDefined();
    expect(JSON.parse(stopped!).totals.length).toBe(2);
    // The drop capture was flushed on stop and holds the blocked SYNs to port 9999.
    const reader = PcapReader.open(dropped);
    let to9999 = 0;
    while (reader.next()) {
      const f = reader.data.subarray(reader.offset, reader.offset + reader.caplen);
      // Ethernet + IPv4 (IHL 5) + TCP: destination port at bytes 36-37.
      if (f[12] === 0x08 && f[13] === 0x00 && f[23] === 6 && ((f[36]! << 8) | f[37]!) === 9999) to9999++;
    }
    reader.close();
    expect(to9999).toBeGreaterThan(0);
  }, 30_000);
});

describe.runIf(RUN).each(ENGINES)('moat daemon in monitor mode (%s engine)', (engine) => {
  let topo: GatewayTopology;
  afterAll(async () => {
    await topo?.destroy();
  }, 60_000);

  it('judges and counts what it sees on one interface and forwards nothing', async () => {
    ensureBuilt();
    topo = await gatewayTopology({ staticNeighbors: true });
    const rules = join(dir, 'monitor-rules.json');
    writeFileSync(rules, JSON.stringify({ rules: [{ id: 'no-echo', action: 'block', expression: 'icmp.type == 8' }] }));
    const cfg = join(dir, 'monitor.jsonc');
    writeFileSync(cfg, JSON.stringify({ mode: 'monitor', interfaces: [topo.gateway.portA], rules: { account: rules }, capture: { engine, ringBytes: 16 << 20 }, metrics: { listen: '127.0.0.1:9491' } }));
    const d = spawnIn(topo.gateway.ns, process.execPath, [BIN, 'daemon', '--config', cfg]);
    await d.waitForLine(/"msg":"daemon running"/, 20_000);
    const r = await exec(topo.a.ns, 'ping', ['-c', '3', '-i', '0.2', '-W', '1', topo.b.ipv4], { check: false });
    expect(r.stdout).toContain('0 received');
    const m = (await exec(topo.gateway.ns, process.execPath, ['-e', "fetch('http://127.0.0.1:9491/metrics').then(r => r.text()).then(t => process.stdout.write(t))"])).stdout;
    const drops = m.split('\n').find((l) => l.startsWith(`moat_packets_total{interface="${topo.gateway.portA}",verdict="drop"}`));
    expect(Number(drops?.split(' ').pop())).toBe(3);
    const hits = m.split('\n').find((l) => l.startsWith('moat_rule_hits_total{ruleset="account",rule="no-echo"'));
    expect(Number(hits?.split(' ').pop())).toBe(3);
    d.kill('SIGTERM');
    expect((await d.exited).code).toBe(0);
  }, 60_000);
});
