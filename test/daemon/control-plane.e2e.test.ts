// End to end, in network namespaces (root; runs in CI): the real control plane
// (the built `moat serve`) and two real daemons, all in the gateway's
// namespace; an inline daemon between host A and host B (account A, zone
// ZA1) and a monitor daemon (account A, zone ZA2). The API is driven from
// inside that namespace with Cloudflare's official SDK and fetch. A rule
// written through the SDK is enforced within a second; the fleet API shows
// both daemons on the new version; the control plane killed with SIGKILL
// leaves enforcement untouched; a daemon restarted meanwhile enforces its
// cache; a version written through a second `moat serve` on the same data
// directory reaches both when the first returns; a list bulk operation
// reaches the daemon; a revoked token is disconnected; a token of account B
// receives B's bundle and never A's.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ensureBuilt, moatBinary } from '../support/cli.js';
import { exec, gatewayTopology, nodeIn, projectUrl, requireRoot, spawnIn, tcpRoundTrip, type GatewayTopology, type NsProcess } from '../support/netns.js';

const RUN = requireRoot(['ethtool']);
const dir = mkdtempSync(join(tmpdir(), 'moat-cp-e2e-'));
const data = join(dir, 'data');
const PORT1 = 18180; // the control plane
const PORT2 = 18181; // the second `moat serve` on the same data directory
const A = 'aa'.repeat(16);
const ZA1 = 'a1'.repeat(16);
const ZA2 = 'a2'.repeat(16);
const B = 'bb'.repeat(16);
const USERS = {
  A: { email: 'ops-a@moat.test', key: 'key_of_account_a_0123456789' },
  B: { email: 'ops-b@moat.test', key: 'key_of_account_b_0123456789' },
};
// Ports of host B's echo servers: ALLOWED is never blocked; the others are blocked by a rule of one test each.
const ALLOWED = 8080;
const P_SDK = 7100;
const P_SECOND = 7200;
const P_LIST = 7300;

// The API client, a process in the gateway's namespace: each stdin line is
// {id, body}, body the text of an async function of (cf, api) run there; it
// prints {id, ok, result | error, t} with t the time the answer arrived.
// cf(port, who) is the official SDK as test/support/api.ts builds it; api(port,
// method, path, body?, who) is fetch with the same credentials.
const API_CLIENT = `
import { createRequire } from 'node:module';
const sdk = createRequire(${JSON.stringify(projectUrl('package.json'))})('cloudflare');
const Cloudflare = sdk.default ?? sdk;
const users = ${JSON.stringify(USERS)};
const cf = (port, who = 'A') => new Cloudflare({ baseURL: 'http://127.0.0.1:' + port + '/client/v4', apiEmail: users[who].email, apiKey: users[who].key, apiToken: null, maxRetries: 0, timeout: 10000 });
const api = async (port, method, path, body, who = 'A') => {
  const res = await fetch('http://127.0.0.1:' + port + '/client/v4' + path, { method, headers: { 'X-Auth-Email': users[who].email, 'X-Auth-Key': users[who].key, ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
};
const AsyncFunction = (async () => {}).constructor;
let buf = '';
process.stdin.on('data', (chunk) => {
  buf += String(chunk);
  for (let i; (i = buf.indexOf('\\n')) >= 0; buf = buf.slice(i + 1)) {
    const { id, body } = JSON.parse(buf.slice(0, i));
    new AsyncFunction('cf', 'api', body)(cf, api).then(
      (result) => console.log(JSON.stringify({ id, ok: true, result, t: Date.now() })),
      (err) => console.log(JSON.stringify({ id, ok: false, error: String(err?.message ?? err), status: err?.status, t: Date.now() })),
    );
  }
});
console.log(JSON.stringify({ ready: true }));
`;

// A minimal daemon of account B: says hello, prints every message, acks bundles.
const B_CLIENT = (token: string) => `
import { WebSocket } from ${JSON.stringify(projectUrl('node_modules/ws/wrapper.mjs'))};
const ws = new WebSocket('ws://127.0.0.1:${PORT1}/moat/channel');
ws.on('open', () => ws.send(JSON.stringify({ type: 'hello', protocol: 1, token: ${JSON.stringify(token)}, moat: '0.0.0-e2e', digest: null, lists: [] })));
ws.on('message', (d) => {
  const m = JSON.parse(String(d));
  console.log(JSON.stringify(m));
  if (m.type === 'bundle') ws.send(JSON.stringify({ type: 'ack', seq: m.seq, result: 'applied', digest: m.digest, versions: { account: m.account?.version ?? null, zone: m.zone?.version ?? null } }));
});
ws.on('close', (code, reason) => console.log(JSON.stringify({ type: 'closed', code, reason: String(reason) })));
ws.on('error', (e) => console.log(JSON.stringify({ type: 'error', message: e.message })));
`;

// Connects from host A to host B every 40 ms (each attempt its own socket,
// given up after 400 ms) and prints {sent, result}: when enforcement begins.
const PROBER = (port: number) => `
import net from 'node:net';
setInterval(() => {
  const sent = Date.now();
  const s = net.connect({ host: '10.77.1.2', port: ${port} });
  const t = setTimeout(() => { s.destroy(); console.log(JSON.stringify({ sent, result: 'blocked' })); }, 400);
  s.on('connect', () => s.write('ping'));
  s.on('data', () => { clearTimeout(t); s.destroy(); console.log(JSON.stringify({ sent, result: 'ok' })); });
  s.on('error', (e) => { clearTimeout(t); console.log(JSON.stringify({ sent, result: 'error ' + e.code })); });
}, 40);
`;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the API's answers are asserted on by shape
type Json = any;
type Log = { msg: string; time: number; reason?: string; code?: number; digest?: string; version?: string };
type Daemon = { name: string; connected: boolean; versions: { account: string | null; zone: string | null }; revoked_on: string | null; digest: string | null };

describe.runIf(RUN)('moat serve and two daemons, end to end', () => {
  let topo: GatewayTopology;
  let serve: NsProcess;
  let client: NsProcess;
  let inline: NsProcess;
  let monitor: NsProcess;
  let calls = 0;
  let entrypoint: string; // account A's entrypoint ruleset id
  const zoneVersion: Record<string, string> = {};
  let version = ''; // account A's entrypoint version, as the last write returned it
  const tokenB = { value: '' };

  // A TCP round trip from host A: "ok" when the echo came back, "blocked" when it timed out.
  const tcp = (port: number): Promise<string> => tcpRoundTrip(topo.a.ns, topo.b.ipv4, port);

  /** Runs `body` in the API client; rejects with its error. */
  async function run<T = Json>(body: string): Promise<{ result: T; t: number }> {
    const id = ++calls;
    const from = client.lines.length;
    client.write(`${JSON.stringify({ id, body })}\n`);
    const r = await client.waitForJson<{ id: number; ok: boolean; result: T; error?: string; t: number }>((m) => m.id === id, 15_000, from);
    if (!r.ok) throw new Error(`API call failed: ${r.error}\n${body}`);
    return r;
  }

  /** The account's daemons by the fleet API (on PORT1), by name. */
  async function fleet(query = ''): Promise<{ byName: Record<string, Daemon>; total: number }> {
    const { result } = await run(`return api(${PORT1}, 'GET', '/accounts/${A}/moat/daemons${query}');`);
    expect(result.status).toBe(200);
    const byName: Record<string, Daemon> = {};
    for (const d of result.json.result as Daemon[]) byName[d.name] = d;
    return { byName, total: result.json.result_info.total_count as number };
  }

  /** Polls the fleet API until `test` holds (10 s). */
  async function fleetUntil(test: (byName: Record<string, Daemon>) => boolean, query = ''): Promise<Record<string, Daemon>> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const { byName } = await fleet(query);
      if (test(byName)) return byName;
      if (Date.now() > deadline) throw new Error(`the fleet never got there: ${JSON.stringify(byName)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  async function health(port: number): Promise<Json> {
    const r = await exec(topo.gateway.ns, process.execPath, ['-e', `fetch('http://127.0.0.1:${port}/health').then(r => r.text()).then(t => process.stdout.write(t))`]);
    return JSON.parse(r.stdout) as Json;
  }

  const cli = (...argv: string[]) => {
    const r = moatBinary([...argv, '--data-dir', data]);
    if (r.code !== 0) throw new Error(`moat ${argv.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };

  async function startServe(port: number): Promise<NsProcess> {
    const p = spawnIn(topo.gateway.ns, process.execPath, [BIN, 'serve', '--data-dir', data, '--listen', `127.0.0.1:${port}`, '--log-level', 'warn', '--channel-heartbeat', '1', '--first-user-email', 'root@moat.test']);
    await p.waitForLine(/control channel for daemons on ws:\/\//, 20_000);
    return p;
  }

  function startDaemon(name: string, mode: 'inline' | 'monitor', metricsPort: number): NsProcess {
    const file = join(dir, `${name}.jsonc`);
    writeFileSync(file, JSON.stringify({
      mode,
      interfaces: mode === 'inline' ? [topo.gateway.portA, topo.gateway.portB] : [topo.gateway.portA],
      controlPlane: { url: `ws://127.0.0.1:${PORT1}`, tokenFile: join(dir, `${name}.token`), stateDir: join(dir, `${name}-state`), maxBackoffSeconds: 1 },
      capture: { ringBytes: 16 << 20 },
      metrics: { listen: `127.0.0.1:${metricsPort}` },
    }));
    return spawnIn(topo.gateway.ns, process.execPath, [BIN, 'daemon', '--config', file]);
  }

  const json = (p: NsProcess, test: (l: Log) => boolean, ms = 10_000, from = 0) => p.waitForJson<Log>(test, ms, from);
  const swappedTo = (v: string) => (l: Log) => l.msg === 'ruleset swapped' && (l.reason ?? '').includes(`account version ${v},`);

  beforeAll(async () => {
    ensureBuilt();
    topo = await gatewayTopology();
    const servers = nodeIn(topo.b.ns, `import net from 'node:net'; const ports = [${[ALLOWED, P_SDK, P_SECOND, P_LIST].join(', ')}]; let n = 0; for (const p of ports) net.createServer((s) => s.pipe(s)).listen(p, '::', () => { if (++n === ports.length) console.log('ready'); });`);
    serve = await startServe(PORT1); // creates the database
    cli('users', 'create', '--email', USERS.A.email, '--account', A, '--zone', ZA1, '--zone', ZA2, '--key', USERS.A.key);
    cli('users', 'create', '--email', USERS.B.email, '--account', B, '--key', USERS.B.key);
    cli('daemons', 'create', '--account', A, '--zone', ZA1, '--name', 'gw-inline', '--token-file', join(dir, 'gw-inline.token'));
    cli('daemons', 'create', '--account', A, '--zone', ZA2, '--name', 'gw-monitor', '--token-file', join(dir, 'gw-monitor.token'));
    tokenB.value = /token: (moatd_\S+)/.exec(cli('daemons', 'create', '--account', B, '--name', 'gw-b'))![1]!;
    client = nodeIn(topo.gateway.ns, API_CLIENT);
    await client.waitForJson((m) => m['ready'] === true, 20_000);
    await servers.waitForLine(/ready/);

    // What the daemons run before the tests: an account entrypoint and one per zone.
    const ep = await run(`return cf(${PORT1}).rulesets.phases.update('network_transit', { account_id: '${A}', rules: [{ action: 'block', expression: 'tcp.dstport == 7999', description: 'set-up' }] });`);
    entrypoint = ep.result.id as string;
    version = ep.result.version as string;
    for (const [zone, port] of [[ZA1, 7991], [ZA2, 7992]] as const) {
      const z = await run(`return cf(${PORT1}).rulesets.phases.update('network_transit', { zone_id: '${zone}', rules: [{ action: 'block', expression: 'tcp.dstport == ${port}' }] });`);
      zoneVersion[zone] = z.result.version as string;
    }

    inline = startDaemon('gw-inline', 'inline', 9490);
    monitor = startDaemon('gw-monitor', 'monitor', 9491);
    await json(inline, swappedTo(version), 30_000);
    await json(monitor, swappedTo(version), 30_000);
  }, 120_000);

  afterAll(async () => {
    await topo?.destroy();
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  it('enforces a rule added through the API with the SDK within a second', async () => {
    expect(await tcp(P_SDK)).toBe('ok');
    const prober = nodeIn(topo.a.ns, PROBER(P_SDK));
    await prober.waitForJson<{ result: string }>((m) => m.result === 'ok', 10_000);
    const from = inline.lines.length;
    const written = await run(`return cf(${PORT1}).rulesets.rules.create('${entrypoint}', { account_id: '${A}', action: 'block', expression: 'tcp.dstport == ${P_SDK}', description: 'from the SDK' });`);
    expect(Number(written.result.version)).toBe(Number(version) + 1);
    version = written.result.version as string;
    const swap = await json(inline, swappedTo(version), 5_000, from);
    // Enforced from the first probe after which every probe is blocked.
    await prober.waitForLine(() => prober.lines.filter((l) => JSON.parse(l).sent > swap.time + 500).length >= 3, 10_000);
    prober.kill('SIGKILL');
    const probes = prober.lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { sent: number; result: string }).sort((x, y) => x.sent - y.sent);
    const lastOk = probes.filter((p) => p.result === 'ok').at(-1)!;
    const firstBlocked = probes.find((p) => p.sent > lastOk.sent)!;
    const toSwap = swap.time - written.t;
    const toBlocked = firstBlocked.sent - written.t;
    console.log(`API response -> inline daemon's swap: ${toSwap} ms; -> first blocked connection attempt: ${toBlocked} ms (probes every 40 ms)`);
    expect(firstBlocked.result).toBe('blocked');
    expect(toSwap).toBeLessThan(1000);
    expect(toBlocked).toBeLessThan(1000);
    expect([await tcp(P_SDK), await tcp(ALLOWED)]).toEqual(['blocked', 'ok']);
  }, 60_000);

  it('shows both daemons connected on the new version in the fleet API, and which run it', async () => {
    const byName = await fleetUntil((d) => d['gw-inline']?.versions.account === version && d['gw-monitor']?.versions.account === version);
    expect(byName['gw-inline']).toMatchObject({ connected: true, revoked_on: null, versions: { account: version, zone: zoneVersion[ZA1] } });
    expect(byName['gw-monitor']).toMatchObject({ connected: true, revoked_on: null, versions: { account: version, zone: zoneVersion[ZA2] } });
    const running = await fleet(`?ruleset_id=${entrypoint}&version=${version}`);
    expect(running.total).toBe(2);
    expect(Object.keys(running.byName).sort()).toEqual(['gw-inline', 'gw-monitor']);
    expect((await fleet(`?ruleset_id=${entrypoint}&version=${Number(version) - 1}`)).total).toBe(0);
  }, 30_000);

  it('keeps enforcing when the control plane is killed with SIGKILL', async () => {
    const from = inline.lines.length;
    serve.kill('SIGKILL');
    await serve.exited;
    await json(inline, (l) => l.msg === 'control plane connection closed; the bundle in force stays', 10_000, from);
    expect([await tcp(P_SDK), await tcp(ALLOWED)]).toEqual(['blocked', 'ok']);
    expect(await health(9490)).toMatchObject({ status: 'ok', controlPlane: { connected: false, bundle: 'live' } });
  }, 30_000);

  it('restarted while the control plane is down, enforces its cache at once', async () => {
    const before = (await health(9490)).controlPlane.digest as string;
    await inline.stop();
    inline = startDaemon('gw-inline', 'inline', 9490);
    await json(inline, (l) => l.msg === 'enforcing the cached bundle until the control plane answers' && l.digest === before, 20_000);
    await json(inline, (l) => l.msg === 'daemon running', 20_000);
    expect([await tcp(P_SDK), await tcp(ALLOWED)]).toEqual(['blocked', 'ok']);
    expect(await health(9490)).toMatchObject({ controlPlane: { connected: false, bundle: 'cached', digest: before } });
  }, 60_000);

  it('runs on both daemons, once the control plane returns, a version written meanwhile through a second moat serve', async () => {
    const second = await startServe(PORT2);
    const written = await run(`return cf(${PORT2}).rulesets.rules.create('${entrypoint}', { account_id: '${A}', action: 'block', expression: 'tcp.dstport == ${P_SECOND}', description: 'through the second serve' });`);
    expect(Number(written.result.version)).toBe(Number(version) + 1);
    version = written.result.version as string;
    second.kill('SIGKILL');
    await second.exited;
    expect(await tcp(P_SECOND)).toBe('ok'); // nobody has pushed it yet

    const [fromInline, fromMonitor] = [inline.lines.length, monitor.lines.length];
    serve = await startServe(PORT1);
    await json(inline, swappedTo(version), 15_000, fromInline);
    await json(monitor, swappedTo(version), 15_000, fromMonitor);
    const byName = await fleetUntil((d) => d['gw-inline']?.connected === true && d['gw-monitor']?.connected === true && d['gw-inline'].versions.account === version && d['gw-monitor'].versions.account === version);
    expect(byName['gw-inline']!.versions).toEqual({ account: version, zone: zoneVersion[ZA1] });
    expect(byName['gw-monitor']!.versions).toEqual({ account: version, zone: zoneVersion[ZA2] });
    expect([await tcp(P_SECOND), await tcp(P_SDK), await tcp(ALLOWED)]).toEqual(['blocked', 'blocked', 'ok']);
  }, 60_000);

  it('enforces a list changed by a bulk operation', async () => {
    const list = await run(`return cf(${PORT1}).rules.lists.create({ account_id: '${A}', kind: 'ip', name: 'office' });`);
    const listId = list.result.id as string;
    let from = inline.lines.length;
    const withRule = await run(`return cf(${PORT1}).rulesets.rules.create('${entrypoint}', { account_id: '${A}', action: 'block', expression: 'ip.src in $office and tcp.dstport == ${P_LIST}' });`);
    version = withRule.result.version as string;
    await json(inline, swappedTo(version), 5_000, from);
    expect(await tcp(P_LIST)).toBe('ok'); // host A is not in the (empty) list yet

    from = inline.lines.length;
    const op = await run(`
      const cfa = cf(${PORT1});
      const { operation_id } = await cfa.rules.lists.items.create('${listId}', { account_id: '${A}', body: [{ ip: '10.77.1.0/24', comment: 'host A' }] });
      for (const deadline = Date.now() + 10000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
        const o = await cfa.rules.lists.bulkOperations.get(operation_id, { account_id: '${A}' });
        if (o.status === 'completed' || o.status === 'failed') return o;
      }
      throw new Error('the bulk operation did not finish');`);
    expect(op.result.status).toBe('completed');
    // The same account version, with new list contents: a bundle pushed by the bulk operation alone.
    const swap = await json(inline, (l) => l.msg === 'ruleset swapped' && (l.reason ?? '').includes(`account version ${version},`) && (l as Json).listsAndGeoIp === 'reloaded', 5_000, from);
    console.log(`bulk operation finished -> inline daemon's swap: ${swap.time - op.t} ms`);
    expect([await tcp(P_LIST), await tcp(ALLOWED)]).toEqual(['blocked', 'ok']);
  }, 60_000);

  it('disconnects a revoked daemon and leaves the other one alone', async () => {
    const from = monitor.lines.length;
    const out = cli('daemons', 'revoke', 'gw-monitor', '--account', A);
    expect(out).toContain('gw-monitor');
    const refused = await json(monitor, (l) => l.code === 4003, 5_000, from);
    expect(refused.msg).toContain('the control plane refused this daemon (4003');
    const byName = await fleetUntil((d) => d['gw-monitor']?.connected === false);
    expect(byName['gw-monitor']!.revoked_on).not.toBeNull();
    expect(byName['gw-inline']).toMatchObject({ connected: true, revoked_on: null });
    // The inline daemon still gets what is written.
    const fromInline = inline.lines.length;
    const written = await run(`return cf(${PORT1}).rulesets.rules.create('${entrypoint}', { account_id: '${A}', action: 'log', expression: 'tcp.dstport == 7998' });`);
    version = written.result.version as string;
    await json(inline, swappedTo(version), 5_000, fromInline);
    expect(monitor.lines.slice(from).some((l) => l.includes('"msg":"ruleset swapped"'))).toBe(false);
  }, 30_000);

  it("gives a token of account B B's bundle only, also after A writes again", async () => {
    const epB = await run(`return cf(${PORT1}, 'B').rulesets.phases.update('network_transit', { account_id: '${B}', rules: [{ action: 'block', expression: 'udp.dstport == 53', description: 'B one' }] });`);
    const bIds = (epB.result.rules as { id: string }[]).map((r) => r.id);
    const b = nodeIn(topo.gateway.ns, B_CLIENT(tokenB.value));
    const first = await b.waitForJson<Json>((m) => m.type === 'bundle', 10_000);
    expect(first.account.id).toBe(epB.result.id);
    expect(first.account.id).not.toBe(entrypoint);
    expect((first.account.rules as { id: string }[]).map((r) => r.id)).toEqual(bIds);
    expect(first.zone).toBeNull();

    // A writes; then B writes, and B's client waits for that bundle: A's push, had there been one, came first.
    const fromInline = inline.lines.length;
    const a = await run(`return cf(${PORT1}).rulesets.rules.create('${entrypoint}', { account_id: '${A}', action: 'block', expression: 'tcp.dstport == 7997' });`);
    version = a.result.version as string;
    await json(inline, swappedTo(version), 5_000, fromInline);
    const b2 = await run(`return cf(${PORT1}, 'B').rulesets.rules.create('${epB.result.id}', { account_id: '${B}', action: 'block', expression: 'udp.dstport == 54' });`);
    const second = await b.waitForJson<Json>((m) => m.type === 'bundle' && m.account.version === b2.result.version, 10_000);
    expect((second.account.rules as { id: string }[]).map((r) => r.id)).toEqual((b2.result.rules as { id: string }[]).map((r) => r.id));

    const received = b.lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Json);
    expect(received.filter((m) => m.type === 'bundle').map((m) => m.account.id)).toEqual([epB.result.id, epB.result.id]);
    const aRuleIds = (a.result.rules as { id: string }[]).map((r) => r.id);
    const everything = b.lines.join('\n');
    for (const secret of [entrypoint, ...aRuleIds, 'office', ZA1, ZA2, A]) expect(everything).not.toContain(secret);
    b.kill('SIGKILL');
  }, 30_000);
});
