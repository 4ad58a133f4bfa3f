// End to end, in network namespaces (root; runs in CI): `moat daemon` inline
// between host A and host B, fed by a control plane over the channel. The
// control plane is a small `ws` server in the gateway's namespace playing the
// protocol (the real one, `moat serve`, is tested against daemons with it
// elsewhere). A pushed bundle is enforced and acknowledged; the control plane
// killed with SIGKILL leaves enforcement as it was; a daemon restarted while
// it is away enforces its cache at once and resumes with its digest when it
// returns; a daemon with no cache forwards nothing until a first bundle,
// unless failOpen.
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ensureBuilt } from '../support/cli.js';
import { exec, gatewayTopology, nodeIn, projectUrl, requireRoot, spawnIn, tcpRoundTrip, type GatewayTopology, type NsProcess } from '../support/netns.js';

const RUN = requireRoot(['ethtool']);
const dir = mkdtempSync(join(tmpdir(), 'moat-channel-e2e-'));
const CP_PORT = 18080;
const sha = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');

/** A bundle blocking TCP to `port` from the addresses of `blocked` (a list), version `version`. */
function bundle(version: string, port: number): Record<string, unknown> {
  const entries = ['10.77.1.1'];
  const account = { id: 'entry', phase: 'network_transit', version, rules: [{ id: `block-${port}`, action: 'block', enabled: true, expression: `ip.src in $office and tcp.dstport == ${port}` }] };
  const lists = { office: { digest: sha(entries.join('\n')), entries } };
  return { type: 'bundle', digest: sha(JSON.stringify([account, lists])), account, zone: null, managed: [], lists };
}

// The control plane: answers hello with welcome and the bundle it was given
// on stdin (or up_to_date), pushes each new one to the open connection, and
// prints every message it receives as a JSON line.
const CONTROL_PLANE = `
import { WebSocketServer } from ${JSON.stringify(projectUrl('node_modules/ws/wrapper.mjs'))};
let current = null;
let conn = null;
const send = (ws, b) => { ws.seq = (ws.seq ?? 0) + 1; ws.send(JSON.stringify({ ...b, seq: ws.seq })); };
const wss = new WebSocketServer({ host: '127.0.0.1', port: ${CP_PORT}, path: '/moat/channel' });
wss.on('listening', () => console.log(JSON.stringify({ type: 'listening' })));
wss.on('connection', (ws) => {
  conn = ws;
  ws.on('message', (data) => {
    const m = JSON.parse(String(data));
    console.log(JSON.stringify(m));
    if (m.type !== 'hello') return;
    ws.send(JSON.stringify({ type: 'welcome', protocol: 1, heartbeat_seconds: 10, daemon: { id: 'd1', name: 'gw1', account_id: 'acc', zone_id: null } }));
    if (current === null) return;
    if (m.digest === current.digest) ws.send(JSON.stringify({ type: 'up_to_date', digest: current.digest }));
    else send(ws, current);
  });
});
let buf = '';
process.stdin.on('data', (chunk) => {
  buf += chunk;
  for (let i; (i = buf.indexOf('\\n')) >= 0; buf = buf.slice(i + 1)) {
    current = JSON.parse(buf.slice(0, i));
    if (conn !== null && conn.readyState === 1) send(conn, current);
  }
});
`;

type Msg = { type: string; seq?: number; result?: string; digest?: string | null; versions?: { account: string | null } };
type Log = { msg: string; reason?: string; digest?: string };

describe.runIf(RUN).each(['ring', 'libpcap'] as const)('moat daemon fed by a control plane, inline between two namespaces (%s engine)', (engine) => {
  let topo: GatewayTopology;
  let cp: NsProcess;
  let daemon: NsProcess;
  const state = join(dir, `state-${engine}`);

  // A TCP round trip from host A: "ok" when the echo came back, "blocked" when it timed out.
  const tcp = (port: number): Promise<string> => tcpRoundTrip(topo.a.ns, topo.b.ipv4, port);

  async function health(): Promise<Record<string, unknown>> {
    const r = await exec(topo.gateway.ns, process.execPath, ['-e', "fetch('http://127.0.0.1:9490/health').then(r => r.text()).then(t => process.stdout.write(t))"]);
    return JSON.parse(r.stdout) as Record<string, unknown>;
  }

  async function startControlPlane(b: Record<string, unknown>): Promise<NsProcess> {
    const p = nodeIn(topo.gateway.ns, CONTROL_PLANE);
    p.write(`${JSON.stringify(b)}\n`);
    await p.waitForJson<Msg>((m) => m.type === 'listening', 20_000);
    return p;
  }

  async function startDaemon(name: string, stateDir: string, extra: Record<string, unknown> = {}): Promise<NsProcess> {
    const file = join(dir, `${name}-${engine}.jsonc`);
    writeFileSync(file, JSON.stringify({
      mode: 'inline',
      interfaces: [topo.gateway.portA, topo.gateway.portB],
      controlPlane: { url: `ws://127.0.0.1:${CP_PORT}`, token: 'moatd_e2e', stateDir, maxBackoffSeconds: 1 },
      capture: { engine, ringBytes: 16 << 20 },
      metrics: { listen: '127.0.0.1:9490' },
      ...extra,
    }));
    const p = spawnIn(topo.gateway.ns, process.execPath, [BIN, 'daemon', '--config', file]);
    expect(JSON.parse(await p.waitForLine(/"msg":"daemon running"/, 20_000)).engine).toBe(engine);
    return p;
  }

  beforeAll(async () => {
    ensureBuilt();
    topo = await gatewayTopology();
    const servers = nodeIn(topo.b.ns, "import net from 'node:net'; let n = 0; for (const p of [7000, 8080]) net.createServer((s) => s.pipe(s)).listen(p, '::', () => { if (++n === 2) console.log('ready'); });");
    await servers.waitForLine(/ready/);
  }, 120_000);

  afterAll(async () => {
    await topo?.destroy();
  }, 60_000);

  const v1 = bundle('1', 7000);
  const v2 = bundle('2', 8080);

  it('enforces what the control plane pushes, and acknowledges it', async () => {
    cp = await startControlPlane(v1);
    daemon = await startDaemon('live', state);
    expect(await cp.waitForJson<Msg>((m) => m.type === 'ack', 20_000)).toEqual({ type: 'ack', seq: 1, result: 'applied', digest: v1['digest'], versions: { account: '1', zone: null } });
    expect([await tcp(7000), await tcp(8080)]).toEqual(['blocked', 'ok']);

    const from = cp.lines.length;
    cp.write(`${JSON.stringify(v2)}\n`);
    expect(await cp.waitForJson<Msg>((m) => m.type === 'ack', 10_000, from)).toMatchObject({ seq: 2, result: 'applied', digest: v2['digest'] });
    expect([await tcp(7000), await tcp(8080)]).toEqual(['ok', 'blocked']);
  }, 90_000);

  it('keeps enforcing when the control plane is killed with SIGKILL', async () => {
    cp.kill('SIGKILL');
    await cp.exited;
    await daemon.waitForJson<Log>((l) => l.msg === 'control plane connection closed; the bundle in force stays', 10_000);
    expect([await tcp(7000), await tcp(8080)]).toEqual(['ok', 'blocked']);
    expect(await health()).toMatchObject({ status: 'ok', version: expect.stringMatching(/^2@/) as unknown, controlPlane: { connected: false, bundle: 'live', digest: v2['digest'] } });
  }, 60_000);

  it('restarted while the control plane is away, enforces its cache at once, and resumes with its digest when it returns', async () => {
    await daemon.stop();
    daemon = await startDaemon('live', state);
    await daemon.waitForJson<Log>((l) => l.msg === 'enforcing the cached bundle until the control plane answers' && l.digest === v2['digest'], 5_000);
    expect([await tcp(8080), await tcp(7000)]).toEqual(['blocked', 'ok']);
    expect(await health()).toMatchObject({ controlPlane: { connected: false, bundle: 'cached', digest: v2['digest'] } });

    cp = await startControlPlane(v2);
    expect(await cp.waitForJson<Msg>((m) => m.type === 'hello', 20_000)).toMatchObject({ protocol: 1, token: 'moatd_e2e', digest: v2['digest'], lists: [(v2['lists'] as { office: { digest: string } }).office.digest] });
    await daemon.waitForJson<Log>((l) => l.msg === 'the bundle in force is the control plane\'s current one', 10_000);
    expect(await health()).toMatchObject({ controlPlane: { connected: true, bundle: 'live' } });
    await daemon.stop();
    cp.kill('SIGKILL');
    await cp.exited;
  }, 90_000);

  it('with nothing cached and no control plane forwards nothing, and with failOpen everything, until a first bundle', async () => {
    daemon = await startDaemon('empty', join(dir, `empty-state-${engine}`));
    expect(await tcp(8080)).toBe('blocked');
    expect((await exec(topo.a.ns, 'ping', ['-c', '1', '-W', '1', '10.77.1.2'], { check: false })).code).not.toBe(0);
    await daemon.stop();

    daemon = await startDaemon('open', join(dir, `open-state-${engine}`), { failOpen: true });
    expect([await tcp(8080), await tcp(7000)]).toEqual(['ok', 'ok']);
    cp = await startControlPlane(v2);
    await cp.waitForJson<Msg>((m) => m.type === 'ack', 20_000);
    expect([await tcp(8080), await tcp(7000)]).toEqual(['blocked', 'ok']);
    await daemon.stop();
  }, 90_000);
});
