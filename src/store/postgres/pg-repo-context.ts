// What a PostgreSQL repository is built over: one client inside one
// transaction, and the store's hooks. PgStore makes one context per
// transaction (a call outside store.write/read runs in its own); the
// repositories (pg-*.ts, one per interface of ../types.ts) only run SQL on
// `client` and never begin or end a transaction themselves.

import type { Repos, TxHealthEventListener } from '../types.js';
import type { PgClient } from './pg-database.js';

export interface PgRepoContext {
  /** The transaction's client. */
  readonly client: PgClient;
  /** The repositories bound to the same transaction (a health event listener writes through it). */
  readonly tx: Repos;
  /** Store.onHealthEvent's listeners, called inside the transaction that records the event. */
  readonly healthListeners: readonly TxHealthEventListener[];
  /** Runs `fn` after the transaction committed (Store.onPoolsWritten's listeners, change notifications); never if it rolled back. */
  afterCommit(fn: () => void): void;
}
