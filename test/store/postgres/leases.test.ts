// Leases (src/store/postgres/leases.ts) on a real server: two owners claiming
// at once never both win; a lease is renewed, released and taken over only
// once it ran out, with a growing epoch that makes the old holder's grant
// worthless; a holder whose connections are killed (pg_terminate_backend) but
// which lives on keeps its lease; one that dies loses it to the other within
// one lease time.
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LeaseKeeper, Leases, PgDatabase, type LeaseGrant } from '../../../src/store/index.js';
import { ensureBuilt, ROOT } from '../../support/cli.js';
import { databaseOf, requirePostgres, usePostgres } from '../../support/postgres.js';

const RUN = requirePostgres();
const cluster = usePostgres(RUN);

const open: PgDatabase[] = [];
const keepers: LeaseKeeper[] = [];
afterEach(async () => {
  await Promise.all(keepers.splice(0).map((k) => k.stop()));
  await Promise.all(open.splice(0).map((d) => d.close()));
});

async function connect(url: string, applicationName = 'moat'): Promise<PgDatabase> {
  const d = await PgDatabase.connect(url, { applicationName });
  open.push(d);
  return d;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor(cond: () => boolean, ms: number): Promise<void> {
  const until = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > until) throw new Error(`timed out after ${ms} ms`);
    await sleep(5);
  }
}

describe.skipIf(!RUN)('leases', () => {
  it('two owners claiming the same leases at once: exactly one wins each', async () => {
    const url = await cluster().createDatabase();
    const [a, b] = [new Leases(await connect(url)), new Leases(await connect(url))];
    const names = Array.from({ length: 40 }, (_, i) => `probe-shard-${i}`);
    const results = await Promise.all(names.map((n) => Promise.all([a.acquire(n, 'replica-a', 30_000), b.acquire(n, 'replica-b', 30_000)])));
    for (const [i, [ga, gb]] of results.entries()) {
      expect((ga === undefined) !== (gb === undefined), names[i]).toBe(true);
      const winner = ga ?? gb!;
      expect(winner.epoch).toBe(1);
      expect((await a.holder(names[i]!))!.owner).toBe(winner.owner);
    }
  });

  it('renewed by its holder, refused to another while live, free at once when released', async () => {
    const url = await cluster().createDatabase();
    const leases = new Leases(await connect(url));
    const g1 = (await leases.acquire('outbox', 'a', 10_000))!;
    expect(await leases.acquire('outbox', 'b', 10_000)).toBeUndefined();
    // Claiming again what one holds renews it, same epoch.
    expect((await leases.acquire('outbox', 'a', 10_000))!.epoch).toBe(1);
    const g2 = (await leases.renew(g1, 20_000))!;
    expect(g2.epoch).toBe(1);
    expect(g2.deadline).toBeGreaterThan(g1.deadline);
    const held = (await leases.holder('outbox'))!;
    expect(held.owner).toBe('a');
    expect(held.remainingMs).toBeGreaterThan(15_000);
    expect(held.remainingMs).toBeLessThanOrEqual(20_000);
    expect(await leases.release(g2)).toBe(true);
    expect(await leases.holder('outbox')).toBeUndefined();
    const b = (await leases.acquire('outbox', 'b', 10_000))!;
    expect(b.owner).toBe('b');
    // The old grant is worthless now.
    expect(await leases.renew(g2, 10_000)).toBeUndefined();
    expect(await leases.release(g2)).toBe(false);
    expect((await leases.holder('outbox'))!.owner).toBe('b');
  });

  it('taken over once it ran out, not before, with a greater epoch; the old holder can no longer renew', async () => {
    const url = await cluster().createDatabase();
    const leases = new Leases(await connect(url));
    const a = (await leases.acquire('health', 'a', 400))!;
    expect(await leases.acquire('health', 'b', 400)).toBeUndefined();
    await sleep(450);
    const b = (await leases.acquire('health', 'b', 400))!;
    expect(b.epoch).toBe(a.epoch + 1);
    expect(await leases.renew(a, 400)).toBeUndefined();
    // A renewal after its own lease ran out is refused even if nobody took it.
    await sleep(450);
    expect(await leases.renew(b, 400)).toBeUndefined();
    expect((await leases.acquire('health', 'b', 400))!.epoch).toBe(b.epoch + 1);
  });

  it('keepers: a holder whose connections are killed, and which lives on, keeps its lease', async () => {
    const url = await cluster().createDatabase();
    const ttl = 900;
    const dbA = await connect(url, 'moat-a');
    const dbB = await connect(url, 'moat-b');
    const events: string[] = [];
    const ka = new LeaseKeeper(new Leases(dbA), 'probes', 'a', ttl, { onAcquire: () => events.push('a+'), onLose: () => events.push('a-') });
    keepers.push(ka);
    ka.start();
    await waitFor(() => ka.held, 5000);
    const kb = new LeaseKeeper(new Leases(dbB), 'probes', 'b', ttl, { onAcquire: () => events.push('b+'), onLose: () => events.push('b-') });
    keepers.push(kb);
    kb.start();
    let killed = 0;
    for (let i = 0; i < 3; i++) {
      killed += await cluster().terminate(databaseOf(url), 'moat-a');
      await sleep(ttl / 2);
    }
    expect(killed).toBeGreaterThanOrEqual(3);
    await sleep(ttl);
    expect(events).toEqual(['a+']);
    expect(ka.held).toBe(true);
    expect(kb.held).toBe(false);
    expect(dbA.stats.idleErrors).toBeGreaterThan(0);
  });

  it('keepers: when the holder dies (stops renewing, its connections killed), the other takes over within one lease time, not before it runs out', async () => {
    const url = await cluster().createDatabase();
    const ttl = 900;
    const dbA = await connect(url, 'moat-a');
    const dbB = await connect(url, 'moat-b');
    let aGrant: LeaseGrant | undefined;
    let bGrant: LeaseGrant | undefined;
    let bAt = 0;
    const ka = new LeaseKeeper(new Leases(dbA), 'probes', 'a', ttl, { onAcquire: (g) => (aGrant = g) });
    keepers.push(ka);
    ka.start();
    await waitFor(() => ka.held, 5000);
    const kb = new LeaseKeeper(new Leases(dbB), 'probes', 'b', ttl, {
      onAcquire: (g) => {
        bGrant = g;
        bAt = performance.now();
      },
    });
    keepers.push(kb);
    kb.start();
    await sleep(ttl);
    expect(bGrant).toBeUndefined();
    // A dies: no more renewals, no release, its sessions gone.
    await ka.stop(false);
    const lastExpiry = (await new Leases(dbB).holder('probes'))!.remainingMs;
    const died = performance.now();
    await cluster().terminate(databaseOf(url), 'moat-a');
    await waitFor(() => bGrant !== undefined, 3 * ttl);
    const takeover = bAt - died;
    // Not before A's lease ran out (what the server said was left, less a margin for the clock reads)...
    expect(takeover).toBeGreaterThanOrEqual(lastExpiry - 50);
    // ...and within one lease time plus one keeper period (B looks every ttl/3), with slack for a loaded machine.
    expect(takeover).toBeLessThan(ttl + ttl / 3 + 500);
    expect(bGrant!.epoch).toBe(aGrant!.epoch + 1);
    console.log(`lease takeover after the holder died: ${takeover.toFixed(0)} ms (lease ${ttl} ms, ${lastExpiry.toFixed(0)} ms were left)`);
  });
});

describe.skipIf(!RUN)('a lease holder killed with SIGKILL', () => {
  beforeAll(() => ensureBuilt());

  it('loses its lease to the other replica within one lease time', async () => {
    const url = await cluster().createDatabase();
    const ttl = 900;
    const dist = `${ROOT}dist/src/store/index.js`;
    const script = `
      import { PgDatabase, Leases, LeaseKeeper } from ${JSON.stringify(dist)};
      const db = await PgDatabase.connect(process.env.URL, { applicationName: 'moat-child' });
      const k = new LeaseKeeper(new Leases(db), 'outbox', 'child', ${ttl}, { onAcquire: (g) => console.log('held ' + g.epoch) });
      k.start();
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, URL: url }, stdio: ['ignore', 'pipe', 'inherit'] });
    const held = await new Promise<number>((resolve, reject) => {
      child.stdout!.on('data', (b: Buffer) => {
        const m = /held (\d+)/.exec(b.toString());
        if (m) resolve(Number(m[1]));
      });
      child.once('exit', (code) => reject(new Error(`child exited ${code}`)));
    });
    const db = await connect(url, 'moat-b');
    let got: LeaseGrant | undefined;
    const kb = new LeaseKeeper(new Leases(db), 'outbox', 'b', ttl, { onAcquire: (g) => (got = g) });
    keepers.push(kb);
    kb.start();
    await sleep(ttl);
    expect(got).toBeUndefined();
    const killed = performance.now();
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    await waitFor(() => got !== undefined, 3 * ttl);
    const takeover = performance.now() - killed;
    expect(takeover).toBeLessThan(ttl + ttl / 3 + 500);
    expect(got!.epoch).toBe(held + 1);
    // Its sessions went with it.
    expect(await cluster().admin("SELECT pid FROM pg_stat_activity WHERE application_name = 'moat-child'")).toEqual([]);
  });
});
