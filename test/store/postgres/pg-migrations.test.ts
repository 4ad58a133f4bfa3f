// The PostgreSQL migrator (src/store/postgres/pg-migrations.ts) on a real
// server: replicas starting at once migrate exactly once, a newer schema is
// refused, a failing migration leaves nothing of itself; and the translated
// schema behaves as SQLite's where the types differ (NOCASE as citext, the
// list generation triggers).
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { MoatError } from '../../../src/errors/index.js';
import { MIGRATIONS } from '../../../src/store/migrations.js';
import { MIGRATION_LOCK, MOAT_LOCK_CLASS, migratePostgres, PG_MIGRATIONS, PgDatabase } from '../../../src/store/index.js';
import { requirePostgres, usePostgres } from '../../support/postgres.js';

const RUN = requirePostgres();
const cluster = usePostgres(RUN);

const open: PgDatabase[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((d) => d.close()));
});

async function connect(url: string, options: Parameters<typeof PgDatabase.connect>[1] = {}): Promise<PgDatabase> {
  const d = await PgDatabase.connect(url, options);
  open.push(d);
  return d;
}

describe.skipIf(!RUN)('migrating a PostgreSQL database', () => {
  it('three replicas starting at once against an empty database: each migration applied exactly once, all at the latest version', async () => {
    const url = await cluster().createDatabase();
    // The test holds the migration lock until all three wait for it, so they really start together.
    const holder = await connect(url, { migrate: false });
    const lock = await holder.connection();
    await lock.query('SELECT pg_advisory_lock($1, $2)', [MOAT_LOCK_CLASS, MIGRATION_LOCK]);
    const starting = Promise.all(['replica-a', 'replica-b', 'replica-c'].map((name) => connect(url, { migrator: name })));
    for (let waiting = 0; waiting < 3; ) {
      await new Promise((r) => setTimeout(r, 20));
      const rows = await holder.query<{ n: number }>(
        "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND NOT granted",
        [MOAT_LOCK_CLASS, MIGRATION_LOCK],
      );
      waiting = rows[0]!.n;
    }
    await lock.query('SELECT pg_advisory_unlock($1, $2)', [MOAT_LOCK_CLASS, MIGRATION_LOCK]);
    lock.release();
    const dbs = await starting;
    const reports = dbs.map((d) => d.migration!);
    const latest = PG_MIGRATIONS.length;
    expect(latest).toBe(9);
    for (const r of reports) expect(r.to).toBe(latest);
    // One found the database empty and applied everything; the others waited on the lock and found nothing to do.
    const applied = reports.flatMap((r) => r.applied).sort((a, b) => a - b);
    expect(applied).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(reports.map((r) => r.from).sort()).toEqual([0, latest, latest]);
    const rows = await dbs[0]!.query<{ version: number; applied_by: string }>('SELECT version, applied_by FROM moat_schema ORDER BY version');
    expect(rows.map((r) => r.version)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const winner = ['replica-a', 'replica-b', 'replica-c'][reports.findIndex((r) => r.from === 0)];
    expect(new Set(rows.map((r) => r.applied_by))).toEqual(new Set([winner]));
    // A fourth, later, has nothing to do either.
    expect((await connect(url, { migrator: 'replica-d' })).migration).toEqual({ from: latest, to: latest, applied: [] });
  });

  it('refuses a database of a newer Moat with 8004', async () => {
    const url = await cluster().createDatabase();
    const first = await connect(url);
    await first.query("INSERT INTO moat_schema VALUES (99, '2030-01-01T00:00:00Z', 'the future')");
    await expect(PgDatabase.connect(url)).rejects.toMatchObject({ code: 8004, message: expect.stringContaining('schema version 99 is newer than this Moat knows (9)') });
  });

  it('a migration that fails is 8002 naming it, and leaves nothing of itself', async () => {
    const url = await cluster().createDatabase();
    const d = await connect(url, { migrate: false });
    const bad = ['CREATE TABLE one (x int);', 'CREATE TABLE two (x int); SELECT no_such_function();'];
    const e = (await migratePostgres(d, 'test', bad).catch((err: unknown) => err)) as MoatError;
    expect(e).toBeInstanceOf(MoatError);
    expect(e.code).toBe(8002);
    expect(e.message).toMatch(/^PostgreSQL 127\.0\.0\.1:\d+\/moat_test_\d+_\d+: migration 2 failed: function no_such_function\(\) does not exist$/);
    expect(await d.query("SELECT to_regclass('one')::text AS one, to_regclass('two')::text AS two")).toEqual([{ one: 'one', two: null }]);
    expect(await d.query('SELECT version FROM moat_schema')).toEqual([{ version: 1 }]);
  });
});

describe.skipIf(!RUN)('the translated schema behaves as SQLite\'s', () => {
  /** Runs the same statements on SQLite (the real migrations) and PostgreSQL, returning the rows of the last. */
  async function both(statements: Array<[string, unknown[]]>): Promise<{ sqlite: unknown[]; pg: unknown[] }> {
    const lite = new BetterSqlite3(':memory:');
    for (const m of MIGRATIONS) lite.exec(m);
    const d = await connect(await cluster().createDatabase());
    let sqlite: unknown[] = [];
    let pg: unknown[] = [];
    for (const [sql, params] of statements) {
      // The same SQL, with SQLite's ? placeholders numbered for PostgreSQL.
      let n = 0;
      const st = lite.prepare(sql);
      sqlite = st.reader ? st.all(...(params as never[])) : (st.run(...(params as never[])), []);
      pg = await d.query(sql.replace(/\?/g, () => `$${++n}`), params);
    }
    lite.close();
    return { sqlite, pg };
  }

  it('emails match without case, as COLLATE NOCASE does (citext)', async () => {
    const r = await both([
      ["INSERT INTO users (id, email, created_on) VALUES ('u1', 'Ops@Example.COM', 'now')", []],
      ['SELECT id, email FROM users WHERE email = ?', ['ops@example.com']],
    ]);
    expect(r.pg).toEqual([{ id: 'u1', email: 'Ops@Example.COM' }]);
    expect(r.pg).toEqual(r.sqlite);
  });

  it('an email that differs only in case is taken, on both', async () => {
    const lite = new BetterSqlite3(':memory:');
    for (const m of MIGRATIONS) lite.exec(m);
    const d = await connect(await cluster().createDatabase());
    const first = "INSERT INTO users (id, email, created_on) VALUES ('u1', 'Ops@Example.COM', 'now')";
    const second = "INSERT INTO users (id, email, created_on) VALUES ('u2', 'OPS@example.com', 'now')";
    lite.exec(first);
    expect(() => lite.exec(second)).toThrow(/UNIQUE constraint failed: users.email/);
    await d.query(first);
    await expect(d.query(second)).rejects.toMatchObject({ code: '23505', constraint: 'users_email_key' });
    lite.close();
  });

  it('a list\'s generation grows by one at each update of modified_on, and not otherwise', async () => {
    const r = await both([
      ["INSERT INTO accounts (id, created_on) VALUES ('a1', 'now')", []],
      ["INSERT INTO lists (id, account_id, name, description, kind, created_on, modified_on) VALUES ('l1', 'a1', 'x', '', 'ip', 't0', 't0')", []],
      ["UPDATE lists SET modified_on = 't1' WHERE id = 'l1'", []],
      ["UPDATE lists SET modified_on = 't1', description = 'same time' WHERE id = 'l1'", []],
      ["UPDATE lists SET description = 'no modified_on' WHERE id = 'l1'", []],
      ["INSERT INTO managed_lists (name, description, num_items, modified_on) VALUES ('svc.x', '', 0, 't0')", []],
      ["UPDATE managed_lists SET modified_on = 't2', num_items = 5", []],
      ["SELECT l.generation AS list, m.generation AS managed, m.num_items FROM lists l, managed_lists m", []],
    ]);
    expect(r.pg).toEqual([{ list: 2, managed: 1, num_items: 5 }]);
    expect(r.pg).toEqual(r.sqlite);
  });
});
