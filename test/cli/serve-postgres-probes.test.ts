// Health probes shared by three `moat serve --database` replicas, as real
// processes on a throwaway PostgreSQL cluster, probing real HTTP origins on
// loopback in this process. Each probe is attributed to the replica that sent
// it by its connection: the client socket's inode (/proc/net/tcp) found among
// the replicas' file descriptors (/proc/<pid>/fd). Each origin is probed once
// per interval across the replicas (never twice, never skipped); the replica
// probing the most origins is SIGKILLed in the middle of one of its probes,
// and the others probe its origins within one interval plus the lease slack;
// an origin that goes down during the takeover yields exactly one health
// event and one notification.
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { printedCredentials, sdkClient, type ServeProcess } from '../support/api.js';
import { useServeReplicas } from '../support/serve-replicas.js';
import { databaseOf, requirePostgres, usePostgres } from '../support/postgres.js';

const run = requirePostgres();
const cluster = usePostgres(run);
const serves = useServeReplicas('moat-serve-probes-');
const servers: Server[] = [];

afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

function serve(extra: readonly string[]): Promise<ServeProcess> {
  return serves.start(extra);
}

/** The pid among `pids` whose socket is the client end (127.0.0.1:`clientPort`) of a connection to `serverPort`. */
function pidOfClient(clientPort: number, serverPort: number, pids: readonly number[]): number | undefined {
  const hex = (p: number) => p.toString(16).toUpperCase().padStart(4, '0');
  let inode: string | undefined;
  for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f[1]?.endsWith(`:${hex(clientPort)}`) && f[2]?.endsWith(`:${hex(serverPort)}`)) inode = f[9];
  }
  if (inode === undefined) return undefined;
  const want = `socket:[${inode}]`;
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        if (readlinkSync(`/proc/${pid}/fd/${fd}`) === want) return pid;
      } catch {
        // closed meanwhile
      }
    }
  }
  return undefined;
}

/** Waits until the 16 shards are held by `n` replicas, ceil(16 / n) at most each. */
async function balanced(db: string, n: number): Promise<void> {
  const settling = performance.now();
  for (;;) {
    const held = await cluster().admin<{ owner: string; n: string }>(
      `SELECT owner, count(*)::text AS n FROM moat_leases WHERE name LIKE 'health/shard/%' AND expires_at > clock_timestamp() GROUP BY owner`,
      [],
      db,
    );
    if (held.length === n && held.every((h) => Number(h.n) <= Math.ceil(16 / n)) && held.reduce((a, h) => a + Number(h.n), 0) === 16) return;
    expect(performance.now() - settling, `shares balanced: ${JSON.stringify(held)}`).toBeLessThan(30_000);
    await sleep(200);
  }
}

interface Probe {
  at: number;
  pid: number | undefined;
  /** The probe whose sender was killed (or paused past its lease) while it waited for the answer: no result, so the successor rightly probes again soon. */
  killed?: boolean;
}

/** A monitor probing every `intervalMs` and a pool "web" of the origins on `ports`, created through `replica`. */
async function webPool(replica: ServeProcess, creds: { email: string; key: string; accountId: string }, intervalMs: number, ports: readonly number[]) {
  const sdk = sdkClient(replica.url, creds);
  const account_id = creds.accountId;
  const monitor = await sdk.loadBalancers.monitors.create({ account_id, type: 'http', interval: intervalMs / 1000, timeout: 1, retries: 0, path: '/', expected_codes: '200' });
  const pool = await sdk.loadBalancers.pools.create({
    account_id,
    name: 'web',
    monitor: monitor.id,
    minimum_origins: 1,
    notification_email: 'ops@example.com',
    origins: ports.map((port, i) => ({ name: `o${i}`, address: '127.0.0.1', port })),
  });
  return { pool };
}

describe.runIf(run)('moat serve replicas on PostgreSQL share the health probes', () => {
  it('probe each origin once per interval across three replicas, take a killed replica\'s origins over within an interval and the lease slack, and record an edge during the takeover once', async () => {
    const INTERVAL = 2_000;
    // Lease time for a 2 s interval (leaseTimeFor): 1 s, renewed every 333 ms; takeover within a lease time and two ticks.
    const SLACK = 1_000 + 700 + 500;
    // A replica's event loop can stall for a second on the shared 2-core machine (load 12-18 seen): a probe
    // that late is followed by a short gap (the schedule keeps its phase). Neither bound lets a probe twice in
    // an interval (under half of it) or a skipped one (two intervals, less the jitter: 3.8 s) through.
    const STALL = 1_500;
    const url = await cluster().createDatabase('probes');
    const flags = ['--database', url, '--monitor-min-interval', '1', '--log-level', 'info'];
    const replicas = [await serve(flags)];
    const creds = printedCredentials(replicas[0]!);
    replicas.push(await serve(flags), await serve(flags));
    const pids = replicas.map((r) => r.child.pid!);

    // Nine origins, each its own server; origin 0 can be turned down.
    const probes: Probe[][] = [];
    const ports: number[] = [];
    let down = false;
    let killOnProbeBy: number | undefined;
    let killedAt = 0;
    for (let i = 0; i < 9; i++) {
      probes.push([]);
      const server = createServer((req, res) => {
        const at = performance.now();
        const pid = pidOfClient(req.socket.remotePort!, (server.address() as AddressInfo).port, pids);
        // A request that arrives just after the kill with no live sender was sent by the victim as it died: no result either.
        const probe: Probe = { at, pid, killed: pid === undefined && killedAt > 0 && at - killedAt < 250 };
        probes[i]!.push(probe);
        if (killOnProbeBy !== undefined && pid === killOnProbeBy) {
          probe.killed = true;
          // In the middle of a probe: this one never gets its answer.
          process.kill(killOnProbeBy, 'SIGKILL');
          killOnProbeBy = undefined;
          killedAt = at;
          return;
        }
        res.writeHead(i === 0 && down ? 503 : 200).end('ok');
      });
      servers.push(server);
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      ports.push((server.address() as AddressInfo).port);
    }
    const { pool } = await webPool(replicas[0]!, creds, INTERVAL, ports);

    // Settle: the shares balanced over the three (a replica that joins gets its share at the next ticks; before any monitor existed the lease time was 10 s), then two intervals.
    const until = (ms: number) => sleep(ms);
    const db = databaseOf(url);
    await balanced(db, 3);
    await until(2 * INTERVAL);
    const steadyFrom = performance.now();
    await until(5 * INTERVAL);
    const steadyTo = performance.now();

    // PROBE_FIGURES=1: the share logs and every probe (replica pid @ ms from the steady window's start), for a report or a failure.
    if (process.env.PROBE_FIGURES) {
      for (const r of replicas) console.log(r.child.pid, r.lines.filter((l) => l.includes('probe share') || l.includes('lease')).join('\n'));
      for (const [i, list] of probes.entries()) console.log(`o${i}`, list.map((p) => `${p.pid}@${Math.round(p.at - steadyFrom)}`).join(' '));
    }
    // Steady: each origin probed by one replica, once per interval (within the jitter of 5 % and scheduling noise).
    const owner = new Map<number, number>();
    for (const [i, list] of probes.entries()) {
      const steady = list.filter((p) => p.at >= steadyFrom && p.at < steadyTo);
      expect(steady.length, `origin o${i}: probes in 5 intervals`).toBeGreaterThanOrEqual(4);
      expect(steady.length, `origin o${i}: probes in 5 intervals`).toBeLessThanOrEqual(6);
      expect(new Set(steady.map((p) => p.pid)).size, `origin o${i}: probed by one replica`).toBe(1);
      expect(steady[0]!.pid, `origin o${i}: attributed to a replica`).toBeDefined();
      owner.set(i, steady[0]!.pid!);
      for (let k = 1; k < steady.length; k++) {
        const gap = steady[k]!.at - steady[k - 1]!.at;
        expect(gap, `origin o${i}: gap between probes`).toBeGreaterThan(INTERVAL * 0.5);
        expect(gap, `origin o${i}: gap between probes`).toBeLessThan(INTERVAL * 1.05 + STALL);
      }
    }
    const counts = new Map<number, number>();
    for (const pid of owner.values()) counts.set(pid, (counts.get(pid) ?? 0) + 1);
    expect(counts.size, 'origins spread over the replicas').toBeGreaterThanOrEqual(2);
    const victim = [...counts.entries()].sort((a, b) => b[1] - a[1])[0]![0];
    const victimOrigins = [...owner.entries()].filter(([, pid]) => pid === victim).map(([i]) => i);

    // Origin 0 goes down, and the victim is killed at its next probe (of any origin).
    down = true;
    killOnProbeBy = victim;
    const armed = performance.now();
    while (killedAt === 0) {
      expect(performance.now() - armed, 'the victim probes within an interval').toBeLessThan(INTERVAL * 2);
      await sleep(10);
    }
    await serves.running.find((c) => c.child.pid === victim)!.exited;
    await until(5 * INTERVAL);
    const end = performance.now();

    for (const [i, list] of probes.entries()) {
      // From the last probe before the kill, through the takeover, to the end: no gap longer than an interval and the slack, none shorter than most of one.
      // The victim's probes answered in its last half second may not have been recorded yet (results are
      // written in batches every 50 ms, later on a loaded machine): the successor rightly probes those again.
      const unrecorded = (p: Probe) => p.pid === victim && p.at >= killedAt - 500;
      const around = list.filter((p) => p.at >= killedAt - INTERVAL * 1.5 && p.at < end && p.killed !== true && !unrecorded(p));
      const after = around.filter((p) => p.at > killedAt);
      expect(after.length, `origin o${i}: probes after the kill`).toBeGreaterThanOrEqual(4);
      expect(after.filter((p) => p.pid === victim || p.pid === undefined).map((p) => `${p.pid} at +${Math.round(p.at - killedAt)} ms`), `origin o${i}: probed by the survivors only`).toEqual([]);
      for (let k = 1; k < around.length; k++) {
        const gap = around[k]!.at - around[k - 1]!.at;
        expect(gap, `origin o${i} (${victimOrigins.includes(i) ? 'taken over' : 'kept'}): gap between probes`).toBeGreaterThan(INTERVAL * 0.5);
        expect(gap, `origin o${i} (${victimOrigins.includes(i) ? 'taken over' : 'kept'}): gap between probes`).toBeLessThan(INTERVAL * 1.05 + (victimOrigins.includes(i) ? SLACK : STALL));
      }
      if (process.env.PROBE_FIGURES) console.log(`o${i} ${victimOrigins.includes(i) ? 'taken' : 'kept'} gaps`, around.slice(1).map((p, k) => Math.round(p.at - around[k]!.at)).join(' '), 'first after kill', Math.round(after[0]!.at - killedAt));
      const last = after.at(-1)!.at;
      expect(end - last, `origin o${i}: probed until the end`).toBeLessThan(INTERVAL * 1.05 + STALL);
    }

    // The edge of origin 0: one event, one notification, whoever recorded it.
    const events = await cluster().admin<{ id: string; old_health: string; new_health: string }>(
      `SELECT id, old_health, new_health FROM health_events WHERE pool_id = $1 AND event_source = 'origin' AND origin_name = 'o0'`,
      [pool.id],
      db,
    );
    expect(events.map((e) => [e.old_health, e.new_health])).toEqual([['healthy', 'unhealthy']]);
    const outbox = await cluster().admin<{ target: string }>(`SELECT target FROM alert_outbox WHERE event_id = $1`, [events[0]!.id], db);
    expect(outbox.map((r) => r.target)).toEqual(['ops@example.com']);
    // No other edge: the other origins stayed healthy, and so did the pool.
    expect(await cluster().admin(`SELECT 1 FROM health_events WHERE pool_id = $1 AND NOT (event_source = 'origin' AND origin_name = 'o0')`, [pool.id], db)).toEqual([]);
  }, 180_000);

  it('a replica paused past its lease (SIGSTOP) stops probing before its successor starts, and its results from before the pause do not count twice: one edge, one notification', async () => {
    const INTERVAL = 2_000;
    const url = await cluster().createDatabase('pause');
    const flags = ['--database', url, '--monitor-min-interval', '1', '--log-level', 'info'];
    const replicas = [await serve(flags)];
    const creds = printedCredentials(replicas[0]!);
    replicas.push(await serve(flags));
    const pids = replicas.map((r) => r.child.pid!);
    const probes: Probe[][] = [];
    const ports: number[] = [];
    let down = false;
    let pausedBy: number | undefined;
    let pausedAt = 0;
    for (let i = 0; i < 6; i++) {
      probes.push([]);
      const server = createServer((req, res) => {
        const at = performance.now();
        const pid = pidOfClient(req.socket.remotePort!, (server.address() as AddressInfo).port, pids);
        const probe: Probe = { at, pid };
        probes[i]!.push(probe);
        if (i === 0 && pausedBy === undefined && pausedAt === 0 && down && pid !== undefined) {
          // Its result comes too late to count (fenced out), so the successor rightly probes again soon.
          probe.killed = true;
          // The holder of origin 0 is paused in the middle of probing it, the answer (503) on its way.
          pausedBy = pid;
          pausedAt = at;
          process.kill(pid, 'SIGSTOP');
        }
        res.writeHead(i === 0 && down ? 503 : 200).end('ok');
      });
      servers.push(server);
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      ports.push((server.address() as AddressInfo).port);
    }
    const { pool } = await webPool(replicas[0]!, creds, INTERVAL, ports);
    const db = databaseOf(url);
    await balanced(db, 2);
    await sleep(2 * INTERVAL);
    down = true;
    while (pausedAt === 0) await sleep(10);
    const paused = pausedBy!;
    // Paused three lease times: the other replica takes every shard and probes origin 0 (503) meanwhile.
    await sleep(3_000);
    process.kill(paused, 'SIGCONT');
    const resumed = performance.now();
    await sleep(4 * INTERVAL);
    const end = performance.now();
    const o0 = probes[0]!.filter((p) => p.at > pausedAt);
    const survivor = pids.find((p) => p !== paused)!;
    expect(o0.some((p) => p.pid === survivor && p.at < resumed), 'the survivor probed origin 0 during the pause').toBe(true);
    // On waking, the paused replica's lease deadline has passed: it probes nothing until it holds a shard again (a tick, then a rebalance).
    expect(probes.flat().filter((p) => p.pid === paused && p.at >= resumed && p.at < resumed + 150)).toEqual([]);
    // Never two replicas on one origin within half an interval.
    for (const [i, list] of probes.entries()) {
      // The paused replica's probes sent in the last probe timeout (1 s) before the pause were frozen in flight, their
      // results fenced out on waking: a lease cannot be taken back from a frozen process, so its successor rightly probes again.
      const frozen = (p: Probe) => p.pid === paused && p.at > pausedAt - 1_000 && p.at <= pausedAt;
      const window = list.filter((p) => p.at > pausedAt - INTERVAL && p.at < end && p.killed !== true && !frozen(p));
      for (let k = 1; k < window.length; k++) expect(window[k]!.at - window[k - 1]!.at, `origin o${i}: gap`).toBeGreaterThan(INTERVAL * 0.5);
    }
    // The edge of origin 0 once, with one notification, although the paused replica's 503 arrived before its successor's.
    const events = await cluster().admin<{ id: string; old_health: string; new_health: string }>(
      `SELECT id, old_health, new_health FROM health_events WHERE pool_id = $1 AND event_source = 'origin' AND origin_name = 'o0'`,
      [pool.id],
      db,
    );
    expect(events.map((e) => [e.old_health, e.new_health])).toEqual([['healthy', 'unhealthy']]);
    expect((await cluster().admin(`SELECT 1 FROM alert_outbox WHERE event_id = $1`, [events[0]!.id], db)).length).toBe(1);
    // The paused replica logged the lease it lost (a warning).
    const log = replicas.find((r) => r.child.pid === paused)!.lines.join('\n');
    expect(log).toMatch(/"level":40.*"lost":\[\d/);
  }, 180_000);
});
