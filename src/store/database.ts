// The embedded SQLite database: opening the file with durable settings, running
// the schema migrations, and write transactions. better-sqlite3 is synchronous,
// so within one process writes are naturally serialised; across processes (the
// CLI writing while `moat serve` runs) the busy timeout and IMMEDIATE
// transactions serialise them.

import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { MoatError } from '../errors/index.js';
import { MIGRATIONS } from './migrations.js';

/** The database connection type. */
export type Db = BetterSqlite3.Database;

/** File name of the database inside the data directory. */
export const DB_FILE = 'moat.db';

/** Options of openDatabase. */
export interface OpenOptions {
  /** Use this file instead of `<dataDir>/moat.db` (":memory:" for tests). */
  file?: string;
  /** Milliseconds to wait for another writer (default 5000). */
  busyTimeoutMs?: number;
  /**
   * Refuse to create the database (and its directory) when missing: 8005
   * naming the path. Operator commands open with this; only `moat serve`
   * creates a database.
   */
  mustExist?: boolean;
}

/**
 * Makes `db.prepare(sql)` return one cached statement per SQL text. Preparing
 * compiles the SQL every time: 16.5% of the server's CPU in a profile of GET
 * entrypoint under load (the scenario of bench/api.bench.ts). Safe here because no caller switches a
 * statement's mode (pluck/raw/expand) or keeps one iterating (a test in
 * test/store/database.test.ts greps src/ for them).
 */
function cachePreparedStatements(db: Db): void {
  const prepare = db.prepare.bind(db) as (...args: unknown[]) => BetterSqlite3.Statement;
  const cache = new Map<string, BetterSqlite3.Statement>();
  db.prepare = ((sql: string, ...internal: unknown[]) => {
    // better-sqlite3 itself calls prepare with extra internal arguments: pass those through uncached.
    if (internal.length > 0) return prepare(sql, ...internal);
    let st = cache.get(sql);
    if (st === undefined) {
      st = prepare(sql);
      // SQL texts are constants of the code (a few variants at most); the bound is a safety net.
      if (cache.size < 1000) cache.set(sql, st);
    }
    return st;
  }) as Db['prepare'];
}

/**
 * Makes the data directory owner-only (0700) and every file in it 0600: the
 * database and its -wal/-shm hold keys' hashes and every ruleset. Returns one
 * line per mode it tightened (for the caller to log); refuses with 8006 what
 * it cannot tighten (a directory or file of another user, a failed chmod). A
 * missing directory is left alone (it is created 0700).
 */
export function secureDataDir(dataDir: string, uid: number | undefined = typeof process.getuid === 'function' ? process.getuid() : undefined): string[] {
  const changed: string[] = [];
  const tighten = (path: string, want: number): void => {
    const st = lstatSync(path);
    if (st.isSymbolicLink()) return; // a link's own mode means nothing; what it points to is not ours to change
    const mode = st.mode & 0o777;
    if ((mode & 0o077) === 0) return;
    const octal = (m: number) => '0' + m.toString(8).padStart(3, '0');
    if (uid !== undefined && uid !== 0 && st.uid !== uid) {
      throw new MoatError('STORE_PERMISSIONS', `${path} is mode ${octal(mode)} and owned by uid ${st.uid}, not by this user (uid ${uid}): run moat serve as its owner, or make it owner-only (chmod ${octal(want)})`);
    }
    const next = mode & want;
    try {
      chmodSync(path, next);
    } catch (err) {
      throw new MoatError('STORE_PERMISSIONS', `${path} is mode ${octal(mode)} (open to other users) and cannot be made ${octal(next)}: ${(err as Error).message}`, { cause: err });
    }
    changed.push(`${path}: mode ${octal(mode)} -> ${octal(next)} (owner-only)`);
  };
  let st;
  try {
    st = lstatSync(dataDir);
  } catch {
    return changed;
  }
  if (!st.isDirectory()) return changed; // Database.open reports it
  tighten(dataDir, 0o700);
  for (const name of readdirSync(dataDir)) {
    const path = join(dataDir, name);
    tighten(path, lstatSync(path).isDirectory() ? 0o700 : 0o600);
  }
  return changed;
}

/** An open database with its schema at the latest version. */
export class Database {
  readonly db: Db;
  readonly file: string;

  private constructor(db: Db, file: string) {
    this.db = db;
    this.file = file;
  }

  /** Opens (creating when missing, unless `mustExist`) the database in `dataDir` and migrates it. */
  static open(dataDir: string, options: OpenOptions = {}): Database {
    let file = options.file;
    const mustExist = options.mustExist === true;
    if (mustExist) {
      file ??= join(dataDir, DB_FILE);
      if (!existsSync(file)) {
        throw new MoatError(
          'STORE_NO_DATABASE',
          `no database at ${file}; \`moat serve --data-dir ${dataDir}\` creates it, or point --data-dir (or MOAT_DATA_DIR) at the directory \`moat serve\` uses`,
        );
      }
    }
    if (file === undefined) {
      try {
        mkdirSync(dataDir, { recursive: true, mode: 0o700 });
      } catch (err) {
        throw new MoatError('STORE_OPEN', `${dataDir}: cannot create the data directory: ${(err as Error).message}`, { cause: err });
      }
      file = join(dataDir, DB_FILE);
    }
    let db: Db;
    try {
      db = new BetterSqlite3(file, { timeout: options.busyTimeoutMs ?? 5000, fileMustExist: mustExist });
      // WAL lets readers run beside the writer; synchronous=FULL makes every
      // committed transaction durable before the API answers, so a kill -9 or a
      // power cut never loses an acknowledged write.
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = FULL');
      db.pragma('foreign_keys = ON');
    } catch (err) {
      throw new MoatError('STORE_OPEN', `${file}: cannot open the database: ${(err as Error).message}`, { cause: err });
    }
    cachePreparedStatements(db);
    const d = new Database(db, file);
    try {
      d.migrate();
    } catch (err) {
      // A refused or failed migration must not leave the file open behind the error.
      db.close();
      throw err;
    }
    return d;
  }

  /** The schema version recorded in the file. */
  get schemaVersion(): number {
    return this.db.pragma('user_version', { simple: true }) as number;
  }

  private migrate(): void {
    const current = this.schemaVersion;
    if (current > MIGRATIONS.length) {
      throw new MoatError(
        'STORE_NEWER_SCHEMA',
        `${this.file}: schema version ${current} is newer than this Moat knows (${MIGRATIONS.length}); upgrade Moat`,
      );
    }
    for (let v = current; v < MIGRATIONS.length; v++) {
      try {
        this.write(() => {
          // Another process opening the same new file may have applied this
          // migration since user_version was read; re-check under the write lock.
          if (this.schemaVersion > v) return;
          this.db.exec(MIGRATIONS[v]!);
          this.db.pragma(`user_version = ${v + 1}`);
        });
      } catch (err) {
        throw new MoatError('STORE_MIGRATION', `${this.file}: migration ${v + 1} failed: ${(err as Error).message}`, { cause: err });
      }
    }
  }

  private queued: Array<{ fn: () => unknown; resolve: (v: unknown) => void; reject: (e: unknown) => void }> = [];
  private flushScheduled = false;

  /**
   * Runs `fn` in a transaction shared with the other writes queued in the same
   * turn of the event loop (group commit): each runs in its own savepoint, so
   * one that throws rolls back alone and gets its error, and one COMMIT (one
   * fsync) makes them all durable before any of them resolves. Under
   * concurrent writers the commit, not the work, is the cost: 66% of the
   * server's CPU adding rules was in COMMIT (the POST rule scenario of
   * bench/api.bench.ts).
   */
  writeGrouped<T>(fn: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queued.push({ fn, resolve: resolve as (v: unknown) => void, reject });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.flushScheduled = false;
    const jobs = this.queued;
    this.queued = [];
    const outcomes: Array<{ ok: boolean; value: unknown }> = [];
    try {
      this.write(() => {
        for (const job of jobs) {
          try {
            // A nested transaction function runs in a savepoint (better-sqlite3).
            outcomes.push({ ok: true, value: this.db.transaction(job.fn)() });
          } catch (err) {
            outcomes.push({ ok: false, value: err });
          }
        }
      });
    } catch (err) {
      for (const job of jobs) job.reject(err);
      return;
    }
    jobs.forEach((job, i) => (outcomes[i]!.ok ? job.resolve(outcomes[i]!.value) : job.reject(outcomes[i]!.value)));
  }

  /**
   * Runs `fn` in one IMMEDIATE transaction (the write lock is taken at BEGIN,
   * so two writers never both read a version number and then both write it).
   * Everything or nothing is committed.
   */
  write<T>(fn: () => T): T {
    const outermost = !this.db.inTransaction;
    try {
      const result = this.db.transaction(fn).immediate();
      if (outermost) this.committed();
      return result;
    } catch (err) {
      if ((err as { code?: string }).code === 'SQLITE_BUSY') {
        throw new MoatError('STORE_BUSY', 'the database is busy (another writer holds it); try again', { cause: err });
      }
      throw err;
    }
  }

  /**
   * A value that changes whenever anything was committed to the database
   * since it was last read: by this connection (SQLite's total_changes(), the
   * rows it ever changed, whatever path wrote them) or by another one, in this
   * process or another (PRAGMA data_version, which changes exactly then). One
   * statement that reads no table: what a memo of a read checks before it
   * trusts itself (see Users.verifyKey, RulesetStore.entrypointStamp), so that
   * a key revoked by `moat users revoke` in another process stops working on
   * the next request, as it did when every request read the key's row.
   */
  changeEpoch(): string {
    // Read once per turn of the event loop: the statement costs as much as
    // the reads it saves (measured: 12% of the server's CPU on GET of a
    // cached entrypoint when read twice per request). Within one turn only
    // this process runs; its own commits forget the value (committed()), and
    // another process's commit is seen from the next turn on, as if it had
    // committed a moment later.
    if (this.epoch === undefined) {
      const r = this.db.prepare('SELECT total_changes() AS c, data_version AS v FROM pragma_data_version').get() as { c: number; v: number };
      this.epoch = `${r.c}:${r.v}`;
      setImmediate(this.forgetEpoch);
    }
    return this.epoch;
  }

  private epoch: string | undefined;
  private readonly forgetEpoch = (): void => {
    this.epoch = undefined;
  };

  private readonly commitListeners = new Set<() => void>();

  /**
   * Calls `listener` after each write transaction of this connection commits
   * (group commits and dry runs' rolled-back writes aside: a write that throws
   * commits nothing). Commits of other processes are not seen here: PRAGMA
   * data_version tells those (see the control channel's change feed).
   * Listeners run synchronously inside the writer's call: they only schedule
   * work. Returns the unsubscribe function.
   */
  onCommit(listener: () => void): () => void {
    this.commitListeners.add(listener);
    return () => this.commitListeners.delete(listener);
  }

  /**
   * Tells the commit listeners and forgets the change epoch: called after
   * every outermost COMMIT of this connection, including those the
   * asynchronous store (sqlite-store.ts) issues as statements.
   */
  committed(): void {
    this.epoch = undefined;
    for (const l of this.commitListeners) l();
  }

  /**
   * Runs `fn` in a read transaction (a consistent snapshot across several
   * queries; inside a transaction already, in that one). BEGIN and COMMIT run
   * as two cached statements: better-sqlite3's db.transaction(fn) builds its
   * wrappers on every call, 17 us against 1 us for the statements (measured
   * in process on the development machine). One transaction also takes
   * SQLite's WAL read lock once (two fcntl calls) where each statement on its
   * own takes it again: a read of several queries is cheaper inside one.
   */
  read<T>(fn: () => T): T {
    const db = this.db;
    if (db.inTransaction) return fn();
    db.prepare('BEGIN DEFERRED').run();
    try {
      const result = fn();
      db.prepare('COMMIT').run();
      return result;
    } catch (err) {
      if (db.inTransaction) db.prepare('ROLLBACK').run();
      throw err;
    }
  }

  /**
   * Whether the database can take a write now: the connection is open and
   * read-write, and the write lock is obtainable within `waitMs` (an empty
   * IMMEDIATE transaction, rolled back). Returns undefined when ready, else
   * why not. Never waits the full busy timeout: better-sqlite3 blocks the
   * event loop while it waits.
   */
  writable(waitMs = 250): string | undefined {
    if (!this.db.open) return 'the database is closed';
    if (this.db.readonly) return 'the database is open read-only';
    const timeout = this.db.pragma('busy_timeout', { simple: true }) as number;
    try {
      this.db.pragma(`busy_timeout = ${Math.max(0, Math.floor(waitMs))}`);
      this.db.exec('BEGIN IMMEDIATE');
      this.db.exec('ROLLBACK');
      return undefined;
    } catch (err) {
      const code = (err as { code?: string }).code;
      return code === 'SQLITE_BUSY' ? 'the database is busy: another writer holds it' : `the database cannot be written: ${(err as Error).message}`;
    } finally {
      if (this.db.open) this.db.pragma(`busy_timeout = ${timeout}`);
    }
  }

  /** Closes the file (checkpointing the WAL). */
  close(): void {
    if (this.db.open) this.db.close();
  }
}
