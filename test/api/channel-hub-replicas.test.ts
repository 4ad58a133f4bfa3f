// The control channel across replicas of the control plane: two `moat serve
// --database` processes on one throwaway PostgreSQL cluster, daemons (plain
// WebSocket clients speaking the protocol) on each. A version written through
// replica A reaches a daemon on replica B (B learns of A's commit by LISTEN/
// NOTIFY), within tens of milliseconds of A's answer, measured beside the
// same push to a daemon on A itself. A notification B never got (its LISTEN
// session terminated, and its way back to the database held while A commits)
// still reaches B's daemons as soon as B listens again: B catches up from
// the database. B reaches PostgreSQL through a TCP proxy the test holds.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { printedCredentials, serveProcess, type ServeProcess } from '../support/api.js';
import { ChannelClient, type Msg } from '../support/channel-client.js';
import { ensureBuilt, moat } from '../support/cli.js';
import { databaseOf, requirePostgres, usePostgres } from '../support/postgres.js';
import { TcpProxy } from '../support/tcp-proxy.js';

const run = requirePostgres();
const cluster = usePostgres(run);

describe.runIf(run)('the control channel across replicas on PostgreSQL', () => {
  const dirs: string[] = [];
  const children: ServeProcess[] = [];
  let url: string;
  let pgProxy: TcpProxy;
  let a: ServeProcess;
  let b: ServeProcess;
  let creds: { email: string; key: string; accountId: string };
  let onA: Timed;
  let onB: Timed;

  const tempDir = (): string => {
    const d = mkdtempSync(join(tmpdir(), 'moat-hub-replicas-'));
    dirs.push(d);
    return d;
  };
  const channelOf = (s: ServeProcess): string => s.url.replace(/^http/, 'ws').replace(/\/client\/v4$/, '/moat/channel');

  /** A daemon's token, made with the operator command on the shared database. */
  async function daemonToken(name: string): Promise<string> {
    const r = await moat('daemons', 'create', '--data-dir', tempDir(), '--database', url, '--account', creds.accountId, '--name', name, '--json');
    expect(r.code, r.stderr).toBe(0);
    return (JSON.parse(r.stdout) as { token: string }).token;
  }

  /** Replaces the account's entrypoint through `s`; resolves when the answer arrived (performance.now()). */
  async function write(s: ServeProcess, port: number): Promise<number> {
    const res = await fetch(`${s.url}/accounts/${creds.accountId}/rulesets/phases/network_transit/entrypoint`, {
      method: 'PUT',
      headers: { 'X-Auth-Email': creds.email, 'X-Auth-Key': creds.key, 'Content-Type': 'application/json' },
      body: JSON.stringify({ rules: [{ action: 'block', expression: `tcp.dstport == ${port}`, description: `port ${port}` }] }),
    });
    const at = performance.now();
    expect(res.status, await res.text()).toBe(200);
    return at;
  }

  beforeAll(async () => {
    ensureBuilt();
    url = await cluster().createDatabase('replicas');
    pgProxy = await TcpProxy.start([{ host: '127.0.0.1', port: cluster().port }]);
    a = await serveProcess(tempDir(), ['--database', url]);
    children.push(a);
    creds = printedCredentials(a);
    b = await serveProcess(tempDir(), ['--database', url.replace(`:${cluster().port}/`, `:${pgProxy.port}/`)]);
    children.push(b);
    onA = await Timed.hello(channelOf(a), await daemonToken('gw-a'));
    onB = await Timed.hello(channelOf(b), await daemonToken('gw-b'));
    for (const c of [onA, onB]) {
      await c.c.next('welcome');
      c.c.applied(await c.c.next('bundle'));
    }
  }, 120_000);

  afterAll(async () => {
    for (const c of [onA, onB]) c?.c.close();
    for (const s of children) {
      s.child.kill('SIGKILL');
      await s.exited;
    }
    await pgProxy?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('pushes a version written through replica A to a daemon on replica B within tens of milliseconds of A\'s answer (beside a daemon on A)', async () => {
    const onBAfter: number[] = [];
    const onAAfter: number[] = [];
    for (let i = 0; i < 30; i++) {
      const port = 1000 + i;
      const answered = await write(a, port);
      const [ba, bb] = await Promise.all([onA.bundle(), onB.bundle()]);
      // The version each daemon got is the one just written (not an older one).
      expect([ba.m.account.rules[0].expression, bb.m.account.rules[0].expression]).toEqual([`tcp.dstport == ${port}`, `tcp.dstport == ${port}`]);
      expect(bb.m.digest).toBe(ba.m.digest);
      onAAfter.push(ba.at - answered);
      onBAfter.push(bb.at - answered);
      onA.c.applied(ba.m);
      onB.c.applied(bb.m);
    }
    const q = (xs: number[], p: number) => [...xs].sort((x, y) => x - y)[Math.min(xs.length - 1, Math.floor(p * xs.length))]!.toFixed(1);
    console.log(`push after A's answer, 30 writes: daemon on B (NOTIFY) p50 ${q(onBAfter, 0.5)} ms, max ${q(onBAfter, 1)} ms; daemon on A itself (reference) p50 ${q(onAAfter, 0.5)} ms, max ${q(onAAfter, 1)} ms`);
    // The aim for a push is 100 ms at p99; the median on B, on this shared machine, well under it
    // (or, when the machine is busy, not far from the same push to a daemon on A).
    expect(Number(q(onBAfter, 0.5))).toBeLessThan(Math.max(100, 2 * Number(q(onAAfter, 0.5))));
  }, 60_000);

  it('catches up after a lost notification: B\'s LISTEN session terminated and held off while A commits, B\'s daemon gets the version as soon as B listens again', async () => {
    // Hold B's way to PostgreSQL for new connections (the open ones keep working), then end its LISTEN session.
    pgProxy.hold();
    const ports = pgProxy.upstreamPorts();
    const killed = await cluster().admin<{ pid: number }>(
      "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'moat-listen' AND client_port = ANY($2::int[])",
      [databaseOf(url), ports],
    );
    expect(killed).toHaveLength(1);
    await write(a, 2001);
    const ba = await onA.bundle();
    onA.c.applied(ba.m);
    // B was not told: its daemon gets nothing while B cannot listen.
    // (longer than a replica's own periodic writes, the outbox's poll each second: they do not wake the hub)
    await onB.c.nothingMore('bundle', 2500);
    const released = performance.now();
    pgProxy.release();
    const bb = await onB.bundle(5000);
    expect(bb.m.digest).toBe(ba.m.digest);
    expect(bb.m.account.rules[0].expression).toBe('tcp.dstport == 2001');
    onB.c.applied(bb.m);
    console.log(`catch-up on B after its LISTEN connection came back: ${(bb.at - released).toFixed(1)} ms after the release`);
    expect(bb.at - released).toBeLessThan(2000);
    // And B hears A's commits again.
    const answered = await write(a, 2002);
    const again = await onB.bundle();
    expect(again.m.account.rules[0].expression).toBe('tcp.dstport == 2002');
    expect(again.at - answered).toBeLessThan(1000);
    onB.c.applied(again.m);
    onA.c.applied((await onA.bundle()).m);
  }, 60_000);

  it('tries a refresh again when the database failed it: B hears A\'s commit but cannot read it, and its daemon gets it once B can', async () => {
    const [listen] = await cluster().admin<{ port: number }>(
      "SELECT client_port AS port FROM pg_stat_activity WHERE datname = $1 AND application_name = 'moat-listen' AND client_port = ANY($2::int[])",
      [databaseOf(url), pgProxy.upstreamPorts()],
    );
    // B's connections for queries are cut and new ones refused; its LISTEN session stays.
    pgProxy.refuse();
    pgProxy.cut([listen!.port]);
    await write(a, 3001);
    onA.c.applied((await onA.bundle()).m);
    await onB.c.nothingMore('bundle', 1500);
    const back = performance.now();
    pgProxy.acceptAgain();
    const bb = await onB.bundle(5000).catch((e: Error) => { throw new Error(`${e.message}\n${b.stderr()}`); });
    expect(bb.m.account.rules[0].expression).toBe('tcp.dstport == 3001');
    onB.c.applied(bb.m);
    console.log(`a failed refresh on B tried again: the daemon got the version ${(bb.at - back).toFixed(1)} ms after B could reach PostgreSQL again`);
    expect(bb.at - back).toBeLessThan(2500);
    // B lived through it (a read failing outside a request once ended the process).
    expect(b.child.exitCode).toBe(null);
  }, 60_000);
});

/** A channel client that notes when each bundle arrived (performance.now()). */
class Timed {
  private readonly arrivals: number[] = [];
  private constructor(readonly c: ChannelClient) {
    c.ws.on('message', () => this.arrivals.push(performance.now()));
  }

  static async hello(url: string, token: string): Promise<Timed> {
    const c = await ChannelClient.hello(url, token);
    return new Timed(c);
  }

  /** The next bundle, and when it arrived. */
  async bundle(ms = 5000): Promise<{ m: Msg; at: number }> {
    const m = (await this.c.next('bundle', ms)) as Msg;
    const i = this.c.messages.indexOf(m);
    return { m, at: this.arrivals[i]! };
  }
}
