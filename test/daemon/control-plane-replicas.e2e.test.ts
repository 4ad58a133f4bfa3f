// A daemon behind a load balancer in front of two control plane replicas, as
// real processes: a PostgreSQL cluster, two `moat serve --database`, a TCP
// round-robin proxy standing for the load balancer (it skips a replica that
// refuses), and `moat daemon` in monitor mode on lo with the proxy's URL.
// The replica the daemon reached is killed with SIGKILL: the daemon keeps
// judging, reconnects through the proxy to the other replica, resumes from
// its digest (told "up to date", nothing sent again), and a write through
// the survivor reaches it. (A list of URLs instead of a load balancer:
// test/cli/readme-ha.test.ts, which runs the README's walkthrough.)
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { printedCredentials, serveProcess, type ServeProcess } from '../support/api.js';
import { BIN, ensureBuilt, moat, ROOT } from '../support/cli.js';
import { requirePostgres, usePostgres } from '../support/postgres.js';
import { TcpProxy } from '../support/tcp-proxy.js';

const root = process.getuid?.() === 0;
if (!root && process.env['CI'] === 'true') throw new Error('the daemon captures on lo: run as root');
const run = root && requirePostgres();
const cluster = usePostgres(run);
const PROBED = 2525;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

type Line = { msg: string; time: number; url?: string; reason?: string; digest?: string };

describe.runIf(run)('a daemon behind a load balancer in front of two replicas', () => {
  const dir = mkdtempSync(join(tmpdir(), 'moat-cp-replicas-'));
  const replicas: ServeProcess[] = [];
  let lb: TcpProxy;
  let daemon: ChildProcess;
  const lines: Line[] = [];
  let metricsPort = 0;
  let creds: { email: string; key: string; accountId: string };
  let prober: NodeJS.Timeout | undefined;

  const health = async () => (await (await fetch(`http://127.0.0.1:${metricsPort}/health`)).json()) as { controlPlane: { connected: boolean; bundle: string; digest: string } };
  const drops = async (): Promise<number> => Number(/^moat_packets_total\{interface="lo",verdict="drop"\} (\d+)/m.exec(await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text())?.[1] ?? 0);
  async function until<T>(what: string, f: () => T | undefined, ms = 20_000): Promise<T> {
    const end = Date.now() + ms;
    for (;;) {
      const v = f();
      if (v !== undefined) return v;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}:\n${lines.map((l) => JSON.stringify(l)).join('\n')}`);
      await sleep(20);
    }
  }
  async function write(s: ServeProcess, expression: string): Promise<void> {
    const res = await fetch(`${s.url}/accounts/${creds.accountId}/rulesets/phases/network_transit/entrypoint`, {
      method: 'PUT',
      headers: { 'X-Auth-Email': creds.email, 'X-Auth-Key': creds.key, 'Content-Type': 'application/json' },
      body: JSON.stringify({ rules: [{ action: 'block', expression }] }),
    });
    expect(res.status, await res.text()).toBe(200);
  }

  beforeAll(async () => {
    ensureBuilt();
    const url = await cluster().createDatabase('lb');
    replicas.push(await serveProcess(join(dir, 'a'), ['--database', url]));
    creds = printedCredentials(replicas[0]!);
    replicas.push(await serveProcess(join(dir, 'b'), ['--database', url]));
    lb = await TcpProxy.start(replicas.map((r) => ({ host: '127.0.0.1', port: Number(new URL(r.url).port) })));
    const made = await moat('daemons', 'create', '--data-dir', join(dir, 'a'), '--database', url, '--account', creds.accountId, '--name', 'gw-lb', '--json');
    expect(made.code, made.stderr).toBe(0);
    metricsPort = await freePort();
    const config = join(dir, 'daemon.jsonc');
    writeFileSync(config, JSON.stringify({
      mode: 'monitor',
      interfaces: ['lo'],
      capture: { filter: `tcp port ${PROBED}` },
      controlPlane: { url: `ws://${lb.address}`, token: (JSON.parse(made.stdout) as { token: string }).token, stateDir: join(dir, 'state') },
      metrics: { listen: `127.0.0.1:${metricsPort}` },
    }));
    daemon = spawn(process.execPath, [BIN, 'daemon', '--config', config], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let buf = '';
    daemon.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const parts = buf.split('\n');
      buf = parts.pop()!;
      for (const p of parts) if (p.startsWith('{')) lines.push(JSON.parse(p) as Line);
    });
    await until('the daemon connected', () => lines.find((l) => l.msg === 'connected to the control plane'));
    prober = setInterval(() => connect(PROBED, '127.0.0.1').on('error', () => undefined), 25);
  }, 120_000);

  afterAll(async () => {
    if (prober !== undefined) clearInterval(prober);
    daemon?.kill('SIGKILL');
    for (const r of replicas) r.child.kill('SIGKILL');
    await lb?.close();
    await sleep(100);
    rmSync(dir, { recursive: true, force: true });
  });

  it('reconnects through the load balancer to the surviving replica, resumes from its digest, keeps judging, and takes the next write', async () => {
    const before = (await health()).controlPlane.digest;
    await write(replicas[0]!, `tcp.dstport == ${PROBED}`);
    await until('version 1 swapped in', () => lines.find((l) => l.msg === 'ruleset swapped' && l.reason?.includes('account version 1')));
    // In force once persisted (the ack follows): /health then names its digest.
    let digest = before;
    for (let i = 0; i < 100 && digest === before; i++) {
      await sleep(20);
      digest = (await health()).controlPlane.digest;
    }
    expect(digest).not.toBe(before);
    // The replica the load balancer sent the daemon to: killed like a crashed host.
    const first = lb.routed[0]!;
    const victim = replicas.find((r) => Number(new URL(r.url).port) === first)!;
    const survivor = replicas.find((r) => r !== victim)!;
    const swaps = lines.filter((l) => l.msg === 'ruleset swapped').length;
    const dropsBefore = await drops();
    const killedAt = Date.now();
    victim.child.kill('SIGKILL');
    await victim.exited;
    const closed = await until('the close', () => lines.find((l) => l.msg === 'control plane connection closed; the bundle in force stays'));
    expect((await health()).controlPlane).toMatchObject({ connected: false, bundle: 'live', digest });
    const upToDate = await until('up to date on the survivor', () => lines.find((l) => l.msg === "the bundle in force is the control plane's current one" && l.time >= closed.time));
    expect(upToDate.digest).toBe(digest);
    // It went through the load balancer to the survivor (the dead replica refused and was skipped).
    expect(lb.routed.at(-1)).toBe(Number(new URL(survivor.url).port));
    expect(lines.filter((l) => l.msg === 'ruleset swapped').length).toBe(swaps);
    // Judged all along: drops kept counting.
    expect(await drops()).toBeGreaterThan(dropsBefore);
    const reconnectedAt = Date.now();
    await write(survivor, `tcp.dstport in {${PROBED} 2526}`);
    const v2 = await until('version 2 swapped in', () => lines.find((l) => l.msg === 'ruleset swapped' && l.reason?.includes('account version 2')));
    expect((await health()).controlPlane).toMatchObject({ connected: true, bundle: 'live' });
    console.log(`through the load balancer: close seen ${closed.time - killedAt} ms after the kill, up to date on the survivor ${upToDate.time - killedAt} ms after it; the next write swapped in ${v2.time - reconnectedAt} ms after the test wrote it`);
  }, 60_000);
});
