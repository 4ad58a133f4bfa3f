// How an operator command reaches the store: the SQLite database of a data
// directory (which must exist: only `moat serve` creates one), as the
// asynchronous Store every backend implements, closed when the command is done.

import { sqliteNotifyRepos } from '../notify/index.js';
import { Database, SqliteStore, type Store } from '../store/index.js';

/** Opens the store of `dataDir`, runs `fn` on it, and closes it (also when `fn` throws). */
export async function withStore<T>(dataDir: string, fn: (store: Store) => Promise<T>): Promise<T> {
  const store = new SqliteStore(Database.open(dataDir, { mustExist: true }), sqliteNotifyRepos);
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}
