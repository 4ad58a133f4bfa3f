// The PostgreSQL connection of the store (src/store/postgres/pg-database.ts)
// against a real server: URLs and their errors (never a password in a
// message), transactions that commit whole or not at all and are run again
// after a serialization failure or a deadlock, connections lost and replaced,
// LISTEN/NOTIFY that comes back after its connection is killed.
import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { MoatError } from '../../../src/errors/index.js';
import { databaseUrlFrom, PgDatabase, redactUrl, type PgClient } from '../../../src/store/index.js';
import { databaseOf, requirePostgres, startCluster, usePostgres } from '../../support/postgres.js';

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

/** The MoatError `p` rejects with. */
async function failure(p: Promise<unknown>): Promise<MoatError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(MoatError);
    return err as MoatError;
  }
  throw new Error('expected a rejection');
}

/** A loopback port nothing listens on. */
function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

/** A promise and its resolver. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

function waitFor(cond: () => boolean, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  return new Promise((resolve, reject) => {
    const poll = (): void => {
      if (cond()) resolve();
      else if (Date.now() > until) reject(new Error('timed out waiting'));
      else setTimeout(poll, 10);
    };
    poll();
  });
}

describe('the database URL', () => {
  it('comes from --database, else from MOAT_DATABASE_URL, else there is none (SQLite)', () => {
    expect(databaseUrlFrom('postgres://a@h/d', { MOAT_DATABASE_URL: 'postgres://b@h/e' })).toBe('postgres://a@h/d');
    expect(databaseUrlFrom(undefined, { MOAT_DATABASE_URL: 'postgres://b@h/e' })).toBe('postgres://b@h/e');
    expect(databaseUrlFrom(undefined, {})).toBeUndefined();
    expect(databaseUrlFrom(undefined, { MOAT_DATABASE_URL: '' })).toBeUndefined();
  });

  it('is refused with 8020 unless it is postgres:// or postgresql://, its password hidden', async () => {
    const e = await failure(PgDatabase.connect('mysql://moat:s3cret-pw@db.example:3306/moat'));
    expect(e.code).toBe(8020);
    expect(e.message).toBe('mysql://moat:***@db.example:3306/moat: a database URL starts with postgres:// or postgresql://, not mysql://');
    expect((await failure(PgDatabase.connect('not a url at all'))).code).toBe(8020);
    expect(redactUrl('postgresql://u:p%40ss@h:5/d?sslmode=require')).toBe('postgresql://u:***@h:5/d?sslmode=require');
  });
});

describe.skipIf(!RUN)('connecting to PostgreSQL', () => {
  it('a server that does not answer is 8021, naming host:port/database and never the password', async () => {
    const port = await closedPort();
    const started = Date.now();
    const e = await failure(PgDatabase.connect(`postgres://moat:hunter2-secret@127.0.0.1:${port}/moatdb`, { connectTimeoutMs: 2000 }));
    expect(e.code).toBe(8021);
    expect(e.message).toMatch(new RegExp(`^cannot reach the PostgreSQL server at 127\\.0\\.0\\.1:${port}/moatdb: .*ECONNREFUSED`));
    expect(`${e.message}\n${e.stack}\n${String((e as { cause?: unknown }).cause)}`).not.toContain('hunter2-secret');
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('a wrong password or a missing database is 8022, without the password', async () => {
    const c = cluster();
    const wrong = c.url().replace(`:${c.password}@`, ':wrong-password-42@');
    const e = await failure(PgDatabase.connect(wrong));
    expect(e.code).toBe(8022);
    expect(e.message).toBe(`the PostgreSQL server at 127.0.0.1:${c.port}/postgres refused the login: password authentication failed for user "moat"`);
    expect(e.message + e.stack).not.toContain('wrong-password-42');
    const missing = await failure(PgDatabase.connect(c.url('no_such_db')));
    expect(missing.code).toBe(8022);
    expect(missing.message).toContain('database "no_such_db" does not exist');
    expect(missing.message).not.toContain(c.password);
  });

  it('answers queries with BIGINT as a JS number, as SQLite\'s INTEGER comes back', async () => {
    const d = await connect(await cluster().createDatabase(), { migrate: false });
    const [row] = await d.query<{ n: unknown; big: unknown }>("SELECT (2::bigint ^ 47)::bigint AS big, count(*) AS n FROM generate_series(1, 3)");
    expect(row!.n).toBe(3);
    expect(row!.big).toBe(140737488355328);
    await expect(d.query('SELECT 9007199254740993::bigint AS x')).rejects.toThrow(/beyond JavaScript's safe integers/);
  });
});

describe.skipIf(!RUN)('write transactions', () => {
  async function counterDb(): Promise<PgDatabase> {
    const d = await connect(await cluster().createDatabase(), { migrate: false });
    await d.query('CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)');
    await d.query('INSERT INTO counter VALUES (1, 0), (2, 0)');
    return d;
  }
  const read = async (d: PgDatabase, id = 1) => (await d.query<{ n: number }>('SELECT n FROM counter WHERE id = $1', [id]))[0]!.n;

  it('commit everything, or nothing when the function throws', async () => {
    const d = await counterDb();
    expect(await d.write(async (c) => (await c.query('UPDATE counter SET n = n + 5 WHERE id = 1 RETURNING n')).rows[0].n)).toBe(5);
    await expect(
      d.write(async (c) => {
        await c.query('UPDATE counter SET n = n + 100 WHERE id = 1');
        await c.query('UPDATE counter SET n = n + 100 WHERE id = 2');
        throw new Error('changed my mind');
      }),
    ).rejects.toThrow('changed my mind');
    expect([await read(d, 1), await read(d, 2)]).toEqual([5, 0]);
  });

  it('run again after a serialization failure: two read-modify-writes that collide both count', async () => {
    const d = await counterDb();
    const bothRead = gate();
    let reads = 0;
    let runs = 0;
    const increment = () =>
      d.write(async (c: PgClient) => {
        runs++;
        const n = (await c.query('SELECT n FROM counter WHERE id = 1')).rows[0].n as number;
        // First attempts wait for each other, so both read 0 before either writes.
        if (++reads <= 2) {
          if (reads === 2) bothRead.open();
          await bothRead.wait;
        }
        await c.query('UPDATE counter SET n = $1 WHERE id = 1', [n + 1]);
      });
    await Promise.all([increment(), increment()]);
    expect(await read(d)).toBe(2);
    expect(runs).toBe(3);
    expect(d.stats.retries).toBe(1);
  });

  it('run again after a deadlock (40P01)', async () => {
    const d = await counterDb();
    const bothLocked = gate();
    let locked = 0;
    const cross = (first: number, second: number) =>
      d.write(
        async (c) => {
          // Deadlocks are looked for after deadlock_timeout (1 s by default).
          await c.query("SET LOCAL deadlock_timeout = '100ms'");
          await c.query('UPDATE counter SET n = n + 1 WHERE id = $1', [first]);
          if (++locked <= 2) {
            if (locked === 2) bothLocked.open();
            await bothLocked.wait;
          }
          await c.query('UPDATE counter SET n = n + 1 WHERE id = $1', [second]);
        },
        { isolation: 'read committed' },
      );
    await Promise.all([cross(1, 2), cross(2, 1)]);
    expect([await read(d, 1), await read(d, 2)]).toEqual([2, 2]);
    // At least the victim ran again (the server may pick its victim twice on a loaded machine).
    expect(d.stats.retries).toBeGreaterThanOrEqual(1);
  });

  it('give up with 8003 after the attempts allowed, having committed nothing', async () => {
    const d = await counterDb();
    let runs = 0;
    const e = await failure(
      d.write(
        async (c) => {
          runs++;
          await c.query('UPDATE counter SET n = n + 1 WHERE id = 1');
          throw Object.assign(new Error('could not serialize access due to concurrent update'), { code: '40001' });
        },
        { attempts: 3 },
      ),
    );
    expect(e.code).toBe(8003);
    expect(e.message).toContain('3 times');
    expect(runs).toBe(3);
    expect(await read(d)).toBe(0);
  });

  it('read() sees one snapshot and refuses writes', async () => {
    const d = await counterDb();
    const seen = await d.read(async (c) => {
      const a = (await c.query('SELECT n FROM counter WHERE id = 1')).rows[0].n as number;
      await d.query('UPDATE counter SET n = 7 WHERE id = 1');
      const b = (await c.query('SELECT n FROM counter WHERE id = 1')).rows[0].n as number;
      return [a, b];
    });
    expect(seen).toEqual([0, 0]);
    expect(await read(d)).toBe(7);
    await expect(d.read((c) => c.query('UPDATE counter SET n = 8'))).rejects.toThrow(/read-only transaction/);
  });
});

describe.skipIf(!RUN)('lost connections', () => {
  it('idle connections killed by the server are replaced on the next query, without crashing the process', async () => {
    const url = await cluster().createDatabase();
    const logged: string[] = [];
    const d = await connect(url, { migrate: false, applicationName: 'moat-idle', log: { warn: (m) => logged.push(m) } });
    await Promise.all([1, 2, 3].map(() => d.query('SELECT pg_sleep(0.05)')));
    const killed = await cluster().terminate(databaseOf(url), 'moat-idle');
    expect(killed).toBeGreaterThan(0);
    await waitFor(() => d.stats.idleErrors === killed);
    expect(await d.query<{ one: number }>('SELECT 1 AS one')).toEqual([{ one: 1 }]);
    expect(logged).toHaveLength(killed);
    expect(logged[0]).toMatch(new RegExp(`^PostgreSQL 127\\.0\\.0\\.1:${cluster().port}/${databaseOf(url)}: an idle connection was lost \\(cannot reach`));
    for (const line of logged) expect(line).not.toContain(cluster().password);
  });

  it('a query whose connection is killed under it fails with 8021, naming the server', async () => {
    const url = await cluster().createDatabase();
    const d = await connect(url, { migrate: false, applicationName: 'moat-victim' });
    const slow = failure(d.query('SELECT pg_sleep(30)'));
    // Kill it once the server runs it.
    for (let i = 0; i < 500; i++) {
      const active = await cluster().admin("SELECT 1 FROM pg_stat_activity WHERE application_name = 'moat-victim' AND query LIKE 'SELECT pg_sleep%' AND state = 'active'");
      if (active.length > 0) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(await cluster().terminate(databaseOf(url), 'moat-victim')).toBe(1);
    const e = await slow;
    expect(e.code).toBe(8021);
    expect(e.message).toContain(`127.0.0.1:${cluster().port}/${databaseOf(url)}`);
    expect(await d.query<{ one: number }>('SELECT 1 AS one')).toEqual([{ one: 1 }]);
  });
});

describe.skipIf(!RUN)('LISTEN and NOTIFY', () => {
  it('deliver a notification sent in a transaction when it commits, and not when it rolls back', async () => {
    const d = await connect(await cluster().createDatabase(), { migrate: false });
    const got: string[] = [];
    await d.listen(['moat_versions'], { onNotify: (ch, p) => got.push(`${ch}:${p}`) });
    await d.write(async (c) => d.notify('moat_versions', 'committed', c));
    await d.write(async (c) => {
      await d.notify('moat_versions', 'rolled back', c);
      throw new Error('no');
    }).catch(() => undefined);
    await d.notify('moat_versions', 'direct');
    await waitFor(() => got.length >= 2);
    await new Promise((r) => setTimeout(r, 100));
    expect(got).toEqual(['moat_versions:committed', 'moat_versions:direct']);
  });

  it('listen again after their connection is killed, and say so, so the caller can catch up', async () => {
    const url = await cluster().createDatabase();
    const d = await connect(url, { migrate: false, applicationName: 'moat-l' });
    const got: string[] = [];
    let reconnects = 0;
    const listener = await d.listen(['a channel', 'b'], { onNotify: (ch, p) => got.push(`${ch}:${p}`), onReconnect: () => reconnects++, minDelayMs: 20 });
    const firstPid = listener.pid;
    expect(await cluster().terminate(databaseOf(url), 'moat-l-listen')).toBe(1);
    await waitFor(() => reconnects === 1);
    expect(listener.pid).not.toBe(firstPid);
    await d.notify('a channel', 'after');
    await d.notify('b', 'also');
    await waitFor(() => got.length === 2);
    expect(got).toEqual(['a channel:after', 'b:also']);
    expect(listener.reconnects).toBe(1);
  });

  it('close() stops the listeners and the pool', async () => {
    const d = await PgDatabase.connect(await cluster().createDatabase(), { migrate: false });
    const got: string[] = [];
    const listener = await d.listen(['c'], { onNotify: (_ch, p) => got.push(p) });
    await d.close();
    expect(listener.pid).toBeUndefined();
    await expect(d.query('SELECT 1')).rejects.toThrow();
  });
});

describe.skipIf(!RUN)('a PostgreSQL server killed with SIGKILL', () => {
  it('loses no acknowledged write, and the listener comes back with the server and says so', async () => {
    const own = await startCluster();
    try {
      const url = await own.createDatabase();
      const d = await PgDatabase.connect(url, { migrate: false, connectTimeoutMs: 1000 });
      try {
        await d.query('CREATE TABLE acked (n int PRIMARY KEY)');
        const got: string[] = [];
        let reconnects = 0;
        await d.listen(['changes'], { onNotify: (_c, p) => got.push(p), onReconnect: () => reconnects++, minDelayMs: 20, maxDelayMs: 200 });
        for (let n = 1; n <= 50; n++) await d.write((c) => c.query('INSERT INTO acked VALUES ($1)', [n]));
        await own.kill();
        // While it is down: 8021, naming the server.
        const down = await failure(d.query('SELECT 1'));
        expect(down.code).toBe(8021);
        expect(down.message).toContain(`127.0.0.1:${own.port}/`);
        await own.restart();
        await waitFor(() => reconnects === 1);
        expect(await d.query<{ n: number }>('SELECT count(*) AS n FROM acked')).toEqual([{ n: 50 }]);
        await d.notify('changes', 'after the restart');
        await waitFor(() => got.length === 1);
        expect(got).toEqual(['after the restart']);
      } finally {
        await d.close();
      }
    } finally {
      await own.stop();
    }
  });
});
