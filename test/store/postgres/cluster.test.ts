// The test harness's throwaway PostgreSQL cluster (test/support/postgres.ts):
// it starts, takes a password login over TCP on loopback, gives separate
// databases, and leaves nothing behind: stop() and the sweep of clusters whose
// test process died both stop the server and delete its directory.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import { postgresProblem, requirePostgres, startCluster, sweepStaleClusters, usePostgres } from '../../support/postgres.js';

const RUN = requirePostgres();
const cluster = usePostgres(RUN);

/** Whether process `pid` runs (a zombie does not: the machine's init may be slow to reap what pg_ctl started). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

async function scalar(url: string, sql: string): Promise<unknown> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const rows = (await c.query(sql)).rows as object[];
    return rows.length === 0 ? undefined : Object.values(rows[0]!)[0];
  } finally {
    await c.end();
  }
}

describe.skipIf(!RUN)('a throwaway PostgreSQL cluster', () => {
  it('takes a password login on 127.0.0.1 and refuses a wrong password', async () => {
    const c = cluster();
    expect(await scalar(c.url(), 'SELECT 41 + 1 AS n')).toBe(42);
    const wrong = c.url().replace(`:${c.password}@`, ':not-the-password@');
    await expect(scalar(wrong, 'SELECT 1')).rejects.toThrow(/password authentication failed/);
  });

  it('gives each createDatabase() a database of its own', async () => {
    const c = cluster();
    const a = await c.createDatabase();
    const b = await c.createDatabase();
    expect(a).not.toBe(b);
    await scalar(a, 'CREATE TABLE only_in_a (x int)');
    expect(await scalar(a, "SELECT to_regclass('only_in_a')::text")).toBe('only_in_a');
    expect(await scalar(b, "SELECT to_regclass('only_in_a')::text")).toBeNull();
  });

  it('stop() stops the server and deletes its directory', async () => {
    const own = await startCluster();
    expect(alive(own.pid)).toBe(true);
    expect(existsSync(own.dir)).toBe(true);
    await own.stop();
    expect(alive(own.pid)).toBe(false);
    expect(existsSync(own.dir)).toBe(false);
  });

  it('a cluster whose test process died is stopped and deleted by the next sweep, and a live one is left alone', async () => {
    const dead = spawnSync('true').pid!;
    const orphan = await startCluster({ ownerPid: dead });
    expect(alive(orphan.pid)).toBe(true);
    const swept = sweepStaleClusters();
    expect(swept).toContain(orphan.dir);
    expect(swept).not.toContain(cluster().dir);
    expect(alive(orphan.pid)).toBe(false);
    expect(existsSync(orphan.dir)).toBe(false);
    expect(await scalar(cluster().url(), 'SELECT 1 AS one')).toBe(1);
  });
});

describe('without PostgreSQL', () => {
  it('the tests fail under CI=true, and skip with the reason otherwise', () => {
    vi.stubEnv('MOAT_PG_BIN', '/nonexistent/bin');
    try {
      const problem = postgresProblem();
      expect(problem).toBe('MOAT_PG_BIN=/nonexistent/bin has no pg_ctl');
      vi.stubEnv('CI', 'true');
      expect(() => requirePostgres(problem)).toThrow('the PostgreSQL tests cannot run: MOAT_PG_BIN=/nonexistent/bin has no pg_ctl; they are required when CI=true');
      vi.stubEnv('CI', '');
      const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
      expect(requirePostgres(problem)).toBe(false);
      expect(warn).toHaveBeenCalledWith('MOAT_PG_BIN=/nonexistent/bin has no pg_ctl: the PostgreSQL tests are skipped');
      warn.mockRestore();
    } finally {
      vi.unstubAllEnvs();
    }
  });
});
