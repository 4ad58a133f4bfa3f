// The notification repositories of the PostgreSQL store: PgAlertingRepo and
// PgOutboxRepo over one transaction's context, handed to PgStore by the
// control plane's assembly (the store may not import notify), as
// sqliteNotifyRepos is to SqliteStore.

import type { PgNotifyFactory } from '../store/index.js';
import { PgAlertingRepo } from './pg-alerting.js';
import { PgOutboxRepo } from './pg-outbox.js';

/** Builds the alerting and outbox repositories over one PostgreSQL transaction. */
export const pgNotifyRepos: PgNotifyFactory = (ctx) => ({ alerting: new PgAlertingRepo(ctx), outbox: new PgOutboxRepo(ctx) });
