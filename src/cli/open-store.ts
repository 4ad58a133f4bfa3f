// How an operator command reaches the store: PostgreSQL when --database (or
// MOAT_DATABASE_URL) names one, else the SQLite database of a data directory
// (which must exist: only `moat serve` creates one), as the asynchronous Store
// every backend implements, closed when the command is done.

import type { Command } from 'commander';
import { pgNotifyRepos, sqliteNotifyRepos } from '../notify/index.js';
import { Database, PgStore, SqliteStore, databaseUrlFrom, type Store } from '../store/index.js';

/** Where a command's store is: a data directory, or a PostgreSQL URL that takes precedence. */
export interface StoreTarget {
  dataDir: string;
  /** --database: a postgres:// URL (MOAT_DATABASE_URL when not given). */
  database?: string | undefined;
}

/** The help of --database, the same on every command that reaches the store. */
export const DATABASE_HELP = 'use the PostgreSQL store at this postgres:// URL instead of the SQLite database of --data-dir (default $MOAT_DATABASE_URL when set)';

/** Opens the store of `target`, runs `fn` on it, and closes it (also when `fn` throws). */
export async function withStore<T>(target: string | StoreTarget, fn: (store: Store) => Promise<T>): Promise<T> {
  const t = typeof target === 'string' ? { dataDir: target } : target;
  const url = databaseUrlFrom(t.database);
  const store: Store = url === undefined ? new SqliteStore(Database.open(t.dataDir, { mustExist: true }), sqliteNotifyRepos) : await PgStore.open(url, pgNotifyRepos);
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

/**
 * Gives --database to every command below `root` that reaches the store
 * (those with --data-dir, except the ones in `except`, which choose their
 * store themselves), so no command forgets it.
 */
export function addDatabaseOption(root: Command, except: readonly string[]): void {
  for (const c of root.commands) {
    if (except.includes(c.name())) continue;
    if (c.options.some((o) => o.long === '--data-dir')) c.option('--database <url>', DATABASE_HELP);
    addDatabaseOption(c, except);
  }
}
