// How the control channel's hub learns that something was committed, here or
// elsewhere: the store's ChangeFeed (src/store/types.ts), a runner of the
// control plane. SQLite's feed lives with its store (src/store/sqlite-change-feed.ts);
// PostgreSQL's (LISTEN/NOTIFY, issue #20) keeps the same contract.

import type { ChangeFeed as StoreChangeFeed } from '../store/index.js';
import type { Runner } from './runner.js';

export { SqliteChangeFeed, DEFAULT_POLL_MS } from '../store/index.js';

/** A source of "something may have changed" signals, started and stopped with the other runners. */
export interface ChangeFeed extends StoreChangeFeed, Runner {}

