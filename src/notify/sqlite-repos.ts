// The notification repositories of the SQLite store: notify's AlertingStore
// (policies and destinations, with their validation) and Outbox, handed to
// SqliteStore by the control plane's assembly (the store may not import notify).

import type { SqliteNotifyFactory } from '../store/index.js';
import { AlertingStore } from './alerting-store.js';
import { Outbox } from './outbox.js';

/** Builds the alerting and outbox repositories over one SQLite database. */
export const sqliteNotifyRepos: SqliteNotifyFactory = (database, pools) => ({ alerting: new AlertingStore(database, pools), outbox: new Outbox(database) });
