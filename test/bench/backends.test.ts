// The sides of the control-plane benchmarks (bench/backends.ts): which sides a
// run takes from its environment variable, and a PostgreSQL side of two real
// `moat serve` replicas on one database of a durable throwaway cluster, set up
// through the store before they start, with the CPU and transactions the
// benchmarks report. Also: the cluster harness loads in plain node (the
// benchmarks are not run by vitest).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Backends, selectedSides } from '../../bench/backends.js';
import { newId } from '../../src/store/index.js';
import { ensureBuilt, ROOT } from '../support/cli.js';
import { requirePostgres } from '../support/postgres.js';

const run = requirePostgres();
const VAR = 'MOAT_TEST_BENCH_SIDES';

afterEach(() => {
  delete process.env[VAR];
});

describe('the sides a benchmark run takes', () => {
  it('are the ones named, in their order', () => {
    process.env[VAR] = 'pg2, sqlite';
    expect(selectedSides(VAR)).toEqual(['pg2', 'sqlite']);
    process.env[VAR] = 'sqlite';
    expect(selectedSides(VAR)).toEqual(['sqlite']);
  });

  it.runIf(run)('are all four when the variable is unset', () => {
    expect(selectedSides(VAR)).toEqual(['sqlite', 'pg1', 'pg2', 'pg3']);
  });

  it('refuse an unknown name, naming the variable and the choices', () => {
    process.env[VAR] = 'sqlite,pg4';
    expect(() => selectedSides(VAR)).toThrow(/MOAT_TEST_BENCH_SIDES: unknown side "pg4" \(choose among sqlite, pg1, pg2, pg3\)/);
  });
});

describe('the cluster harness outside vitest', () => {
  beforeAll(() => ensureBuilt(), 120_000);

  it('loads in plain node (no VITEST in the environment), as the benchmarks load it', () => {
    const env = { ...process.env };
    delete env.VITEST;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', "const m = await import('./dist/test/support/postgres.js'); console.log(typeof m.startCluster)"], { cwd: ROOT, env, encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('function');
  });
});

describe.runIf(run)('a PostgreSQL side of two replicas', () => {
  beforeAll(() => ensureBuilt(), 120_000);

  it('shares one durable database: a user made through the store works on both, a write through one is read through the other, and its CPU and transactions grow', async () => {
    const backends = new Backends();
    try {
      const email = 'bench@example.com';
      const key = 'k' + newId();
      const account = newId();
      const side = await backends.start('pg2', async (store) => {
        await store.users.create({ email, accounts: [account], key });
      });
      expect(side.replicas).toHaveLength(2);
      expect(side.database).toMatch(/^bench_pg2_/);
      expect(await backends.settings()).toMatch(/fsync=on .*synchronous_commit=on/);
      const cpu0 = side.cpuMicros()!;
      const tx0 = (await backends.transactions(side))!;
      const headers = { 'x-auth-email': email, 'x-auth-key': key, 'content-type': 'application/json' };
      const [a, b] = [side.replicas[0]!, side.replicas[1]!];
      const made = await fetch(`${a.base}/accounts/${account}/rulesets`, { method: 'POST', headers, body: JSON.stringify({ name: 'edge', kind: 'custom', phase: 'network_transit' }) });
      expect(made.status).toBe(200);
      const id = ((await made.json()) as { result: { id: string } }).result.id;
      const seen = await fetch(`${b.base}/accounts/${account}/rulesets/${id}`, { headers });
      expect(seen.status).toBe(200);
      expect(((await seen.json()) as { result: { name: string } }).result.name).toBe('edge');
      expect(side.cpuMicros()!).toBeGreaterThan(cpu0);
      // Backends report their statistics within seconds (at most every 1 s while busy, 10 s when idle).
      let commits = tx0.commits;
      for (let i = 0; i < 150 && commits <= tx0.commits; i++) {
        await new Promise((r) => setTimeout(r, 100));
        commits = (await backends.transactions(side))!.commits;
      }
      expect(commits).toBeGreaterThan(tx0.commits);
      expect(tx0.serializationFailures).toBe(0);
      const pids = side.replicas.map((r) => r.child.pid!);
      const dir = backends.dataDir('pg2');
      await backends.close();
      expect(pids.map((p) => existsSync(`/proc/${p}/stat`) && !/\) Z /.test(spawnSync('cat', [`/proc/${p}/stat`], { encoding: 'utf8' }).stdout))).toEqual([false, false]);
      expect(existsSync(dir)).toBe(false);
    } finally {
      await backends.close();
    }
  }, 120_000);
});
