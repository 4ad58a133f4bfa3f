// Group commit: writes queued in one turn of the event loop share one COMMIT,
// each in its own savepoint. A write that throws rolls back alone and gets its
// own error; the others commit; nothing resolves before the COMMIT.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { Database } from '../../src/store/index.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function open(): Database {
  const dir = mkdtempSync(join(tmpdir(), 'moat-group-'));
  dirs.push(dir);
  return Database.open(dir);
}

const insert = (db: Database, id: string) => db.db.prepare("INSERT INTO accounts (id, created_on) VALUES (?, 'now')").run(id);
const ids = (db: Database) => (db.db.prepare('SELECT id FROM accounts ORDER BY id').all() as { id: string }[]).map((r) => r.id);

describe('grouped writes', () => {
  it('commits the writes that succeed and rolls back only the one that throws', async () => {
    const db = open();
    const results = await Promise.allSettled([
      db.writeGrouped(() => insert(db, 'a')),
      db.writeGrouped(() => {
        insert(db, 'b');
        throw new Error('second write fails after writing');
      }),
      db.writeGrouped(() => {
        insert(db, 'c');
        return 'third';
      }),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((results[1] as PromiseRejectedResult).reason.message).toBe('second write fails after writing');
    expect((results[2] as PromiseFulfilledResult<string>).value).toBe('third');
    expect(ids(db)).toEqual(['a', 'c']);
    db.close();
  });

  it('shares one transaction among the writes of one turn, and resolves only after it is committed', async () => {
    const db = open();
    const other = new BetterSqlite3(db.file);
    const seenByOther: number[] = [];
    const writes = ['x', 'y', 'z'].map((id) =>
      db.writeGrouped(() => {
        insert(db, id);
        // another connection sees nothing of the group until its COMMIT
        seenByOther.push((other.prepare('SELECT count(*) AS n FROM accounts').get() as { n: number }).n);
      }),
    );
    await Promise.all(writes);
    expect(seenByOther).toEqual([0, 0, 0]);
    expect((other.prepare('SELECT count(*) AS n FROM accounts').get() as { n: number }).n).toBe(3);
    other.close();
    db.close();
  });

  it('rejects every write of the group when the COMMIT itself fails', async () => {
    const db = open();
    const blocker = new BetterSqlite3(db.file, { timeout: 0 });
    blocker.exec('BEGIN IMMEDIATE');
    const lowTimeout = Database.open(join(db.file, '..'), { busyTimeoutMs: 10 });
    const results = await Promise.allSettled([lowTimeout.writeGrouped(() => insert(lowTimeout, 'p')), lowTimeout.writeGrouped(() => insert(lowTimeout, 'q'))]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect((results[0] as PromiseRejectedResult).reason.code).toBe(8003);
    blocker.exec('ROLLBACK');
    blocker.close();
    expect(ids(lowTimeout)).toEqual([]);
    lowTimeout.close();
    db.close();
  });
});
