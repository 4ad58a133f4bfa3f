// End to end, in network namespaces (root; runs in CI): which direction an
// inline daemon judges. Host A on one port, host B on the other, echo servers
// on both; the README's walkthrough ruleset (allow TCP 8080, block every other
// TCP port). By default the rules judge frames arriving from outside and the
// inside's frames (the server's SYN-ACK and replies) pass unjudged, so the
// allowed service is reachable; with judge "both" they judge the inside's too.
// Both forms of `interfaces`: the list (first outside) and {outside, inside}.
import { mkdtempSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ensureBuilt, ROOT } from '../support/cli.js';
import { exec, gatewayTopology, nodeIn, requireRoot, spawnIn, type GatewayTopology, type NsProcess } from '../support/netns.js';

const RUN = requireRoot(['ethtool']);
const dir = mkdtempSync(join(tmpdir(), 'moat-direction-'));
const ACCOUNT = join(dir, 'account.json');

/** The rules of the README's "Deploying a first ruleset with curl": the body of its first PUT, as written there. */
function walkthroughRules(): object[] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const block = /```sh\n([\s\S]*?)```/.exec(readme.slice(readme.indexOf('### Deploying a first ruleset with curl')))![1]!;
  const body = JSON.parse(/--data '(\{[\s\S]*?\})'/.exec(block)![1]!) as { rules: object[] };
  return body.rules;
}
const WALKTHROUGH = walkthroughRules();
// README: stateless rules that also let the protected hosts open connections out: block only new inbound connections.
const NEW_INBOUND_ONLY = [
  { id: 'allow-8080', action: 'skip', action_parameters: { ruleset: 'current' }, expression: 'tcp.dstport in {8080}', description: 'allow 8080' },
  { id: 'block-new-inbound', action: 'block', expression: 'tcp.flags.syn and not tcp.flags.ack', description: 'block new inbound connections' },
];

// Replaces the ruleset file the way deploy tools do: write a new file, rename it over.
function deployRules(rules: object[]): void {
  writeFileSync(`${ACCOUNT}.tmp`, JSON.stringify({ phase: 'network_transit', version: String(Date.now()), rules }));
  renameSync(`${ACCOUNT}.tmp`, ACCOUNT);
}

describe.runIf(RUN).each(['ring', 'libpcap'] as const)('moat daemon inline: the direction it judges (%s engine)', (engine) => {
  let topo: GatewayTopology;
  let daemon: NsProcess | undefined;

  /**
   * From namespace `ns`, connects to host:port, sends `bytes` bytes and reads
   * them back from the echo server: "ok" when every byte came back in order,
   * "blocked" when the connection or the echo did not complete in 1.5 s.
   */
  async function transfer(ns: string, host: string, port: number, bytes = 1): Promise<string> {
    const script = `
      const s = require('node:net').connect({ host: ${JSON.stringify(host)}, port: ${port} });
      const sent = Buffer.alloc(${bytes}, 0); for (let i = 0; i < sent.length; i++) sent[i] = (i * 7 + 3) & 255;
      const got = [];
      let n = 0;
      const t = setTimeout(() => { console.log(n === 0 ? 'blocked' : 'short ' + n); process.exit(0); }, 1500);
      s.on('connect', () => s.write(sent));
      s.on('data', (d) => { got.push(d); n += d.length; if (n >= sent.length) { clearTimeout(t); console.log(Buffer.concat(got).equals(sent) ? 'ok' : 'garbled'); process.exit(0); } });
      s.on('error', (e) => { clearTimeout(t); console.log('error ' + e.code); process.exit(0); });`;
    return (await exec(ns, process.execPath, ['-e', script], { check: false })).stdout.trim();
  }

  async function metrics(): Promise<string> {
    const r = await exec(topo.gateway.ns, process.execPath, ['-e', "fetch('http://127.0.0.1:9490/metrics').then(r => r.text()).then(t => process.stdout.write(t))"]);
    return r.stdout;
  }

  function metric(text: string, name: string, labels: string): number {
    const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
    return line === undefined ? NaN : Number(line.split(' ').pop());
  }

  /** The drop log lines (log.drops) printed since line `from`, parsed. */
  function drops(from: number): Array<Record<string, unknown>> {
    return daemon!.lines.slice(from).filter((l) => l.includes('"action":"drop"')).map((l) => JSON.parse(l) as Record<string, unknown>);
  }

  // Starts a daemon with this `interfaces` (and judge), stopping the one before; resolves with its direction line.
  async function start(interfaces: unknown, judge?: string): Promise<Record<string, unknown>> {
    if (daemon !== undefined) {
      daemon.kill('SIGTERM');
      expect((await daemon.exited).code).toBe(0);
    }
    const cfg = join(dir, 'daemon.jsonc');
    writeFileSync(cfg, JSON.stringify({ mode: 'inline', interfaces, ...(judge === undefined ? {} : { judge }), rules: { account: ACCOUNT }, capture: { engine, ringBytes: 16 << 20 }, log: { drops: true } }));
    daemon = spawnIn(topo.gateway.ns, process.execPath, [BIN, 'daemon', '--config', cfg]);
    expect(JSON.parse(await daemon.waitForLine(/"msg":"daemon running"/, 20_000)).engine).toBe(engine);
    return JSON.parse(daemon.lines.find((l) => l.includes('"outside":') && l.includes('judging'))!) as Record<string, unknown>;
  }

  beforeAll(async () => {
    ensureBuilt();
    topo = await gatewayTopology();
    deployRules(WALKTHROUGH);
    // Echo servers on both hosts: 8080 (allowed), 8081 and 9000 (blocked by the walkthrough).
    const servers = "import net from 'node:net'; let n = 0; for (const p of [8080, 8081, 9000]) net.createServer((s) => s.pipe(s)).listen(p, '0.0.0.0', () => { if (++n === 3) console.log('ready'); });";
    for (const ns of [topo.a.ns, topo.b.ns]) await nodeIn(ns, servers).waitForLine(/ready/);
  }, 120_000);

  afterAll(async () => {
    await topo?.destroy();
  }, 60_000);

  it('reads the walkthrough\'s rules from the README: allow 8080, block every other TCP port', () => {
    expect(WALKTHROUGH.map((r) => [(r as { action: string }).action, (r as { expression: string }).expression])).toEqual([
      ['skip', 'tcp.dstport in {8080}'],
      ['block', 'tcp.dstport in {1..65535}'],
    ]);
  });

  it('with the list form (first outside), reaches the walkthrough service on 8080 inside from outside, data both ways, and blocks 8081', async () => {
    const said = await start([topo.gateway.portA, topo.gateway.portB]);
    expect([said.outside, said.inside, said.judge]).toEqual(['ga', 'gb', 'inbound']);
    expect(said.msg).toBe('judging frames arriving on ga (outside); frames from gb (inside) are forwarded unjudged (judge: "both" judges them too)');
    const from = daemon!.lines.length;
    // 256 KiB each way: the handshake, then many segments and ACKs from both sides.
    expect(await transfer(topo.a.ns, topo.b.ipv4, 8080, 256 * 1024)).toBe('ok');
    expect(await transfer(topo.a.ns, topo.b.ipv4, 8081)).toBe('blocked');
    const d = drops(from);
    expect(d.length).toBeGreaterThan(0);
    // Only the SYNs to 8081, from outside: nothing of the 8080 exchange was dropped.
    for (const line of d) {
      expect([line.interface, line.direction, line.from, line.src, line.dst, line.dstPort, line.description]).toEqual(['ga', 'ga -> gb', 'outside', topo.a.ipv4, topo.b.ipv4, 8081, 'block other TCP ports']);
    }
    const m = await metrics();
    expect(metric(m, 'moat_port_info', 'interface="ga",side="outside",judged="true"')).toBe(1);
    expect(metric(m, 'moat_port_info', 'interface="gb",side="inside",judged="false"')).toBe(1);
    // The server's replies crossed unjudged: at least the 256 KiB echoed.
    expect(metric(m, 'moat_passed_unjudged_total', 'interface="gb",direction="gb -> ga"')).toBeGreaterThan(0);
    expect(metric(m, 'moat_passed_unjudged_bytes_total', 'interface="gb",direction="gb -> ga"')).toBeGreaterThan(256 * 1024);
    expect(metric(m, 'moat_passed_unjudged_total', 'interface="ga",direction="ga -> gb"')).toBe(0);
    expect(metric(m, 'moat_packets_total', 'interface="gb",verdict="pass"')).toBe(0);
    expect(metric(m, 'moat_packets_total', 'interface="ga",verdict="pass"')).toBeGreaterThan(0);
  }, 60_000);

  it('lets a connection from inside out when the rules admit its replies: the walkthrough blocks the SYN-ACK, blocking only new inbound connections does not', async () => {
    // The inside's SYN crosses unjudged; the outside's SYN-ACK to an ephemeral port is a TCP port the walkthrough blocks.
    let from = daemon!.lines.length;
    expect(await transfer(topo.b.ns, topo.a.ipv4, 9000)).toBe('blocked');
    expect(drops(from).some((l) => l.from === 'outside' && l.srcPort === 9000 && l.dst === topo.b.ipv4)).toBe(true);
    deployRules(NEW_INBOUND_ONLY);
    await daemon!.waitForLine(/"msg":"ruleset swapped"/, 10_000, from);
    from = daemon!.lines.length;
    expect(await transfer(topo.b.ns, topo.a.ipv4, 9000, 64 * 1024)).toBe('ok');
    expect(await transfer(topo.a.ns, topo.b.ipv4, 8080, 64 * 1024)).toBe('ok');
    expect(await transfer(topo.a.ns, topo.b.ipv4, 8081)).toBe('blocked');
    expect(drops(from).every((l) => l.from === 'outside' && l.dstPort === 8081 && l.rule === 'block-new-inbound')).toBe(true);
    deployRules(WALKTHROUGH);
    await daemon!.waitForLine(/"msg":"ruleset swapped"/, 10_000, from);
  }, 60_000);

  it('with {outside, inside}, takes the sides as named (here outside gb): B reaches 8080 on A, not 8081', async () => {
    const said = await start({ outside: topo.gateway.portB, inside: topo.gateway.portA });
    expect([said.outside, said.inside, said.judge]).toEqual(['gb', 'ga', 'inbound']);
    const from = daemon!.lines.length;
    expect(await transfer(topo.b.ns, topo.a.ipv4, 8080, 64 * 1024)).toBe('ok');
    expect(await transfer(topo.b.ns, topo.a.ipv4, 8081)).toBe('blocked');
    expect(drops(from).every((l) => l.interface === 'gb' && l.direction === 'gb -> ga' && l.from === 'outside' && l.dstPort === 8081)).toBe(true);
    const m = await metrics();
    expect(metric(m, 'moat_port_info', 'interface="gb",side="outside",judged="true"')).toBe(1);
    expect(metric(m, 'moat_passed_unjudged_total', 'interface="ga",direction="ga -> gb"')).toBeGreaterThan(0);
  }, 60_000);

  it('with judge "both", drops the SYN from inside to a blocked port outside, and the walkthrough then drops its own server\'s SYN-ACK (why inbound is the default)', async () => {
    const said = await start({ outside: topo.gateway.portB, inside: topo.gateway.portA }, 'both');
    expect(said.judge).toBe('both');
    expect(said.msg).toBe('judging frames in both directions: arriving on gb (outside) and on ga (inside)');
    let from = daemon!.lines.length;
    // A is inside: its SYN to B:9000 is judged and dropped on ga.
    expect(await transfer(topo.a.ns, topo.b.ipv4, 9000)).toBe('blocked');
    const syn = drops(from);
    expect(syn.length).toBeGreaterThan(0);
    for (const l of syn) expect([l.interface, l.direction, l.from, l.src, l.dstPort]).toEqual(['ga', 'ga -> gb', 'inside', topo.a.ipv4, 9000]);
    from = daemon!.lines.length;
    expect(await transfer(topo.b.ns, topo.a.ipv4, 8080)).toBe('blocked');
    expect(drops(from).some((l) => l.from === 'inside' && l.srcPort === 8080)).toBe(true);
    const m = await metrics();
    expect(metric(m, 'moat_port_info', 'interface="ga",side="inside",judged="true"')).toBe(1);
    expect(metric(m, 'moat_packets_total', 'interface="ga",verdict="drop"')).toBeGreaterThan(0);
    expect(metric(m, 'moat_passed_unjudged_total', 'interface="ga",direction="ga -> gb"')).toBe(0);
    daemon!.kill('SIGTERM');
    expect((await daemon!.exited).code).toBe(0);
  }, 60_000);
});
