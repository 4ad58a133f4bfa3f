// The PostgreSQL store's connection: a pg.Pool over one postgres:// URL, the
// schema migrated on connect (once across replicas, see pg-migrations.ts),
// write transactions that retry on serialization failures and deadlocks, read
// transactions on one snapshot, LISTEN/NOTIFY through a dedicated connection
// (pg-listener.ts), and a clean close. The repositories of the store build on
// this; several `moat serve` replicas each hold one.

import type * as pg from 'pg';
import { pgModule } from './pg-module.js';
import { MoatError } from '../../errors/index.js';
import { clientConfig, errorCode, isConnectionError, mapPgError, parseTarget, RETRYABLE_STATES, type PgTarget } from './connection.js';
import { PgListener, type ListenerOptions } from './pg-listener.js';
import { migratePostgres, type MigrationReport } from './pg-migrations.js';

/** A connection of the pool, inside a transaction when given to write() or read(). */
export type PgClient = pg.PoolClient;

/** How Moat logs (a pino logger fits). */
export interface PgLog {
  warn(msg: string): void;
  info?(msg: string): void;
}

export interface PgOpenOptions {
  /** Connections in the pool (default 10). */
  max?: number;
  /** Milliseconds to wait for a connection (default 5000). */
  connectTimeoutMs?: number;
  /** application_name of the connections, as pg_stat_activity shows it (default moat). */
  applicationName?: string;
  /** Migrate the schema on connect (default true). */
  migrate?: boolean;
  /** Who migrates, recorded in moat_schema (default the application name and pid). */
  migrator?: string;
  log?: PgLog;
}

export type Isolation = 'serializable' | 'repeatable read' | 'read committed';

export interface WriteOptions {
  /** Default serializable: a transaction behaves as if it ran alone, as SQLite's single writer gives. */
  isolation?: Isolation;
  /** Attempts in all, retries after 40001 and 40P01 included (default 10). */
  attempts?: number;
}

/** Counters for tests and metrics. */
export interface PgStats {
  /** Transactions run again after a serialization failure or deadlock. */
  retries: number;
  /** Connections the pool lost while idle (server restart, pg_terminate_backend). */
  idleErrors: number;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** An open PostgreSQL database with its schema at the latest version. */
export class PgDatabase {
  readonly target: PgTarget;
  readonly pool: pg.Pool;
  readonly stats: PgStats = { retries: 0, idleErrors: 0 };
  /** What the migration on connect did (undefined when it was not run). */
  migration: MigrationReport | undefined;
  private readonly applicationName: string;
  private readonly connectTimeoutMs: number;
  private readonly log: PgLog | undefined;
  private readonly listeners = new Set<PgListener>();
  private closed = false;

  private constructor(target: PgTarget, options: PgOpenOptions) {
    this.target = target;
    this.applicationName = options.applicationName ?? 'moat';
    this.connectTimeoutMs = options.connectTimeoutMs ?? 5000;
    this.log = options.log;
    this.pool = new (pgModule().Pool)({ ...clientConfig(target, this.applicationName, this.connectTimeoutMs), max: options.max ?? 10 });
    // An idle connection the server drops (restart, failover, pg_terminate_backend)
    // is reported here; without a listener pg's pool would crash the process.
    // The pool discards it and opens another on the next query.
    this.pool.on('error', (err) => {
      this.stats.idleErrors++;
      this.log?.warn(`PostgreSQL ${this.target.description}: an idle connection was lost (${(mapPgError(err, this.target) as Error).message}); the next query opens another`);
    });
  }

  /**
   * Connects to `url` (postgres:// or postgresql://; 8020 otherwise), checks
   * that the server answers (8021 unreachable, 8022 login refused, naming
   * host:port/database, never the password) and migrates the schema.
   */
  static async connect(url: string, options: PgOpenOptions = {}): Promise<PgDatabase> {
    const d = new PgDatabase(parseTarget(url), options);
    try {
      await d.query('SELECT 1');
      if (options.migrate ?? true) d.migration = await migratePostgres(d, options.migrator ?? `${d.applicationName} pid ${process.pid}`);
    } catch (err) {
      await d.close();
      throw mapPgError(err, d.target);
    }
    return d;
  }

  /** Runs one statement on any connection of the pool, outside a transaction. */
  async query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<R[]> {
    try {
      return (await this.pool.query<R>(sql, params)).rows;
    } catch (err) {
      throw mapPgError(err, this.target);
    }
  }

  /** A connection of its own, for work that must hold one (an advisory lock); release it after. */
  async connection(): Promise<PgClient> {
    try {
      return await this.pool.connect();
    } catch (err) {
      throw mapPgError(err, this.target);
    }
  }

  /**
   * Runs `fn` in one transaction (BEGIN ... COMMIT on one connection),
   * serializable unless told otherwise: everything or nothing is committed.
   * When the transaction fails with a serialization failure (40001) or a
   * deadlock (40P01), at any statement or at COMMIT, it is rolled back and
   * `fn` runs again from the start, up to `attempts` times in all, after a
   * short random pause; then 8003 (busy). So `fn` must do nothing outside
   * the database that cannot be done twice. Any other error rolls back and
   * is thrown (connection losses as 8021: a lost COMMIT may or may not have
   * committed, so it is not retried blindly).
   */
  async write<T>(fn: (client: PgClient) => Promise<T>, options: WriteOptions = {}): Promise<T> {
    const isolation = options.isolation ?? 'serializable';
    const attempts = options.attempts ?? 10;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.transaction(`BEGIN ISOLATION LEVEL ${isolation.toUpperCase()}`, fn);
      } catch (err) {
        if (!RETRYABLE_STATES.has(errorCode(err))) throw mapPgError(err, this.target);
        if (attempt >= attempts) {
          throw new MoatError('STORE_BUSY', `the database is busy: a transaction met concurrent writes (${errorCode(err)}) ${attempts} times in a row; try again`, { cause: err });
        }
        this.stats.retries++;
        // Random pauses (up to 2, 4, 8 ... 128 ms) so that the transactions that
        // collided do not collide again in lockstep.
        await sleep(Math.random() * Math.min(128, 2 ** attempt));
      }
    }
  }

  /** Runs `fn` in a read-only transaction on one snapshot (REPEATABLE READ): its queries see the same committed state. */
  async read<T>(fn: (client: PgClient) => Promise<T>): Promise<T> {
    try {
      return await this.transaction('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY', fn);
    } catch (err) {
      throw mapPgError(err, this.target);
    }
  }

  private async transaction<T>(begin: string, fn: (client: PgClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    // Set when the connection may be unusable: the pool then discards it instead of handing it out again.
    let broken: Error | undefined;
    // A connection lost while checked out between two queries (the server
    // restarted, pg_terminate_backend) is reported as an 'error' event, which
    // pg.Pool listens to only on idle ones: unheard, it would crash the
    // process. The next query of `fn` then fails, and the connection is discarded.
    const onLost = (err: Error) => {
      broken = err;
    };
    client.on('error', onLost);
    try {
      try {
        await client.query(begin);
      } catch (err) {
        broken = err as Error;
        throw err;
      }
      let result: T;
      try {
        result = await fn(client);
      } catch (err) {
        try {
          await client.query('ROLLBACK');
        } catch (rollbackError) {
          broken = rollbackError as Error;
        }
        throw err;
      }
      try {
        await client.query('COMMIT');
      } catch (err) {
        // A COMMIT refused with an SQLSTATE (40001) ends the transaction on a sound connection.
        if (errorCode(err) === '' || isConnectionError(err)) broken = err as Error;
        throw err;
      }
      return result;
    } finally {
      client.off('error', onLost);
      client.release(broken);
    }
  }

  /**
   * Sends `payload` on `channel` as part of `client`'s transaction (delivered
   * when it commits, not at all when it rolls back), or at once with the pool.
   */
  async notify(channel: string, payload: string, client?: PgClient): Promise<void> {
    const sql = 'SELECT pg_notify($1, $2)';
    if (client !== undefined) await client.query(sql, [channel, payload]);
    else await this.query(sql, [channel, payload]);
  }

  /**
   * Listens on `channels` through a connection of its own that comes back by
   * itself when lost; `onReconnect` is called after each reconnection (once
   * it listens again), so the caller can catch up from the database on what
   * it may have missed meanwhile.
   */
  async listen(channels: readonly string[], options: Omit<ListenerOptions, 'log'>): Promise<PgListener> {
    const listener = new PgListener(
      clientConfig(this.target, `${this.applicationName}-listen`, this.connectTimeoutMs),
      this.target,
      channels,
      { ...options, ...(this.log === undefined ? {} : { log: this.log }) },
    );
    this.listeners.add(listener);
    listener.onClose(() => this.listeners.delete(listener));
    try {
      await listener.start();
    } catch (err) {
      await listener.close();
      throw err;
    }
    return listener;
  }

  /** Closes the listeners and the pool (waiting for connections in use to be released). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.listeners].map((l) => l.close()));
    await this.pool.end();
  }
}
