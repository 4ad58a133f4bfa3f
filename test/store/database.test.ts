// The SQLite store: schema migrations (applied once, atomically, refused for a
// newer schema), durable settings, transactions that commit all or nothing, a
// busy writer reported as 8003, and everything the API wrote surviving a
// server restart byte for byte.
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { Database, DB_FILE } from '../../src/store/database.js';
import { MIGRATIONS } from '../../src/store/migrations.js';
import { PHASE, startApi, written } from '../support/api.js';

const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'moat-db-'));
  dirs.push(d);
  return d;
}

afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function thrown(fn: () => unknown): { code?: number; message: string } {
  try {
    fn();
  } catch (err) {
    return err as { code?: number; message: string };
  }
  throw new Error('expected a throw');
}

function tables(db: BetterSqlite3.Database): string[] {
  return (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as { name: string }[]).map((r) => r.name);
}

describe('opening and migrating', () => {
  it('creates the data directory (mode 0700) and a database at the latest schema with WAL, FULL sync and foreign keys', () => {
    const dir = join(tempDir(), 'nested', 'data');
    const store = Database.open(dir);
    try {
      expect(store.file).toBe(join(dir, DB_FILE));
      expect(statSync(dir).mode & 0o777).toBe(0o700);
      expect(store.schemaVersion).toBe(MIGRATIONS.length);
      expect(store.db.pragma('journal_mode', { simple: true })).toBe('wal');
      expect(store.db.pragma('synchronous', { simple: true })).toBe(2);
      expect(store.db.pragma('foreign_keys', { simple: true })).toBe(1);
      expect(tables(store.db)).toEqual(expect.arrayContaining(['accounts', 'users', 'api_keys', 'rulesets', 'ruleset_versions', 'lists', 'list_items']));
    } finally {
      store.close();
    }
  });

  it('applies migrations once: reopening keeps the data and the schema version', () => {
    const dir = tempDir();
    const first = Database.open(dir);
    first.db.prepare('INSERT INTO accounts (id, created_on) VALUES (?, ?)').run('a'.repeat(32), 'then');
    first.close();
    const second = Database.open(dir);
    try {
      expect(second.schemaVersion).toBe(MIGRATIONS.length);
      expect(second.db.prepare('SELECT id, created_on FROM accounts').all()).toEqual([{ id: 'a'.repeat(32), created_on: 'then' }]);
    } finally {
      second.close();
    }
  });

  it('refuses a database written by a newer Moat with 8004 and leaves it untouched', () => {
    const dir = tempDir();
    const raw = new BetterSqlite3(join(dir, DB_FILE));
    raw.pragma(`user_version = ${MIGRATIONS.length + 5}`);
    raw.close();
    const err = thrown(() => Database.open(dir));
    expect(err.code).toBe(8004);
    expect(err.message).toContain(`schema version ${MIGRATIONS.length + 5} is newer`);
    const check = new BetterSqlite3(join(dir, DB_FILE));
    expect(check.pragma('user_version', { simple: true })).toBe(MIGRATIONS.length + 5);
    expect(tables(check)).toEqual([]);
    check.close();
  });

  it('rolls a failing migration back entirely and reports 8002', () => {
    const dir = tempDir();
    // A stray table that migration 1 also creates makes it fail halfway.
    const raw = new BetterSqlite3(join(dir, DB_FILE));
    raw.exec('CREATE TABLE rulesets (x TEXT)');
    raw.close();
    const err = thrown(() => Database.open(dir));
    expect(err.code).toBe(8002);
    expect(err.message).toContain('migration 1 failed');
    const check = new BetterSqlite3(join(dir, DB_FILE));
    expect(check.pragma('user_version', { simple: true })).toBe(0);
    // Tables created before the failing statement were rolled back with it.
    expect(tables(check)).toEqual(['rulesets']);
    check.close();
  });

  it('reports a data directory that cannot be created with 8001', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'file'), 'not a directory');
    const err = thrown(() => Database.open(join(dir, 'file', 'data')));
    expect(err.code).toBe(8001);
  });
});

describe('transactions', () => {
  it('commits everything or nothing', () => {
    const store = Database.open(tempDir());
    try {
      const insert = (id: string) => store.db.prepare('INSERT INTO accounts (id, created_on) VALUES (?, ?)').run(id, 'now');
      const err = thrown(() =>
        store.write(() => {
          insert('1'.repeat(32));
          insert('2'.repeat(32));
          throw new Error('halfway');
        }),
      );
      expect(err.message).toBe('halfway');
      expect(store.db.prepare('SELECT count(*) AS n FROM accounts').get()).toEqual({ n: 0 });
      store.write(() => {
        insert('1'.repeat(32));
        insert('2'.repeat(32));
      });
      expect(store.db.prepare('SELECT count(*) AS n FROM accounts').get()).toEqual({ n: 2 });
    } finally {
      store.close();
    }
  });

  it('reports 8003 when another connection holds the write lock past the busy timeout', () => {
    const dir = tempDir();
    const holder = Database.open(dir);
    const waiter = Database.open(dir, { busyTimeoutMs: 50 });
    try {
      holder.db.exec('BEGIN IMMEDIATE');
      const started = Date.now();
      const err = thrown(() => waiter.write(() => waiter.db.prepare('INSERT INTO accounts (id, created_on) VALUES (?, ?)').run('3'.repeat(32), 'now')));
      expect(err.code).toBe(8003);
      expect(Date.now() - started).toBeGreaterThanOrEqual(40);
      holder.db.exec('COMMIT');
      // Once the lock is released the same write goes through.
      waiter.write(() => waiter.db.prepare('INSERT INTO accounts (id, created_on) VALUES (?, ?)').run('3'.repeat(32), 'now'));
      expect(holder.db.prepare('SELECT id FROM accounts').all()).toEqual([{ id: '3'.repeat(32) }]);
    } finally {
      waiter.close();
      holder.close();
    }
  });
});

describe('read transactions', () => {
  it('read from one snapshot: a write committed by another connection in between is not seen until the next read', () => {
    const dir = tempDir();
    const reader = Database.open(dir);
    const writer = Database.open(dir);
    try {
      const count = () => (reader.db.prepare('SELECT count(*) AS n FROM accounts').get() as { n: number }).n;
      const seen = reader.read(() => {
        const before = count();
        writer.write(() => writer.db.prepare('INSERT INTO accounts (id, created_on) VALUES (?, ?)').run('4'.repeat(32), 'now'));
        return [before, count()];
      });
      expect(seen).toEqual([0, 0]);
      expect(reader.read(count)).toBe(1);
      expect(reader.db.inTransaction).toBe(false);
    } finally {
      writer.close();
      reader.close();
    }
  });

  it('end their transaction when the reader throws, and run inside a transaction already open', () => {
    const store = Database.open(tempDir());
    try {
      const failing = () =>
        store.read(() => {
          throw new Error('reader failed');
        });
      expect(thrown(failing).message).toBe('reader failed');
      expect(store.db.inTransaction).toBe(false);
      // Inside a write, a read sees the write's own rows and leaves the transaction to it.
      const inside = store.write(() => {
        store.db.prepare('INSERT INTO accounts (id, created_on) VALUES (?, ?)').run('5'.repeat(32), 'now');
        const n = store.read(() => (store.db.prepare('SELECT count(*) AS n FROM accounts').get() as { n: number }).n);
        return [n, store.db.inTransaction];
      });
      expect(inside).toEqual([1, true]);
      expect(store.db.inTransaction).toBe(false);
      expect(store.db.prepare('SELECT count(*) AS n FROM accounts').get()).toEqual({ n: 1 });
    } finally {
      store.close();
    }
  });
});

describe('prepared statements', () => {
  it('gives the same statement for the same SQL text', () => {
    const store = Database.open(tempDir());
    try {
      const sql = 'SELECT count(*) AS n FROM accounts';
      expect(store.db.prepare(sql)).toBe(store.db.prepare(sql));
      expect(store.db.prepare(sql)).not.toBe(store.db.prepare('SELECT count(*) AS n FROM users'));
    } finally {
      store.close();
    }
  });

  it('are never switched to pluck, raw or expand mode nor iterated in src/, which would break the shared cached statement', () => {
    // Statements are cached per SQL text and shared by every caller.
    const src = fileURLToPath(new URL('../../src', import.meta.url));
    const offenders = (readdirSync(src, { recursive: true }) as string[])
      .filter((f) => f.endsWith('.ts'))
      .flatMap((f) =>
        readFileSync(join(src, f), 'utf8')
          .split('\n')
          .map((line, i) => [`${f}:${i + 1}`, line] as const)
          .filter(([, line]) => /\.(pluck|raw|expand|iterate)\(/.test(line)),
      )
      .map(([at]) => at);
    expect(offenders).toEqual([]);
  });
});

describe('restart', () => {
  it('serves identical JSON for every ruleset, version, rule and entrypoint after a restart on the same data directory', async () => {
    const dataDir = tempDir();
    const first = await startApi({ dataDir });
    const { email, key, accountId, zoneId } = first;
    const client = first.client();
    const phase = PHASE;
    const custom = await written(client.rulesets.create({ account_id: accountId, name: 'custom', kind: 'custom', phase, rules: [{ action: 'block', expression: 'tcp.dstport == 23' }] }));
    await written(client.rulesets.rules.create(custom.id, { account_id: accountId, action: 'log', expression: 'udp.dstport == 53', position: { index: 1 } }));
    await written(client.rulesets.update(custom.id, { account_id: accountId, description: 'third', rules: [{ action: 'block', expression: 'tcp.dstport == 22' }] }));
    await client.rulesets.versions.delete('2', { ruleset_id: custom.id, account_id: accountId });
    const root = await written(client.rulesets.phases.update(phase, { account_id: accountId, rules: [{ action: 'skip', expression: 'ip.src in {10.0.0.0/8}', action_parameters: { ruleset: 'current' } }] }));
    await written(client.rulesets.phases.update(phase, { zone_id: zoneId, rules: [{ action: 'block', expression: 'tcp.dstport == 25' }] }));

    const paths = [
      `/accounts/${accountId}/rulesets`,
      `/accounts/${accountId}/rulesets/${custom.id}`,
      `/accounts/${accountId}/rulesets/${custom.id}/versions`,
      `/accounts/${accountId}/rulesets/${custom.id}/versions/1`,
      `/accounts/${accountId}/rulesets/${custom.id}/versions/3`,
      `/accounts/${accountId}/rulesets/${root.id}`,
      `/accounts/${accountId}/rulesets/phases/network_transit/entrypoint`,
      `/accounts/${accountId}/rulesets/phases/network_transit/entrypoint/versions`,
      `/zones/${zoneId}/rulesets`,
      `/zones/${zoneId}/rulesets/phases/network_transit/entrypoint`,
    ];
    const before = await Promise.all(paths.map((p) => first.call('GET', p)));
    for (const r of before) expect(r.status).toBe(200);
    await first.stop();

    const second = await startApi({ dataDir, email, key, accountId, zoneId });
    try {
      expect(second.base).not.toBe(first.base);
      const after = await Promise.all(paths.map((p) => second.call('GET', p)));
      expect(after.map((r) => r.status)).toEqual(paths.map(() => 200));
      expect(after.map((r) => r.text)).toEqual(before.map((r) => r.text));
      expect(JSON.parse(after[2]!.text).result.map((v: { version: string }) => v.version)).toEqual(['1', '3']);
      // Numbering goes on from the highest number ever given, deleted ones included.
      const next = await written(second.client().rulesets.rules.create(custom.id, { account_id: accountId, action: 'block', expression: 'tcp.dstport == 80' }));
      expect(next.version).toBe('4');
    } finally {
      await second.stop();
    }
  });
});
