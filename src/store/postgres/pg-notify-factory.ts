// How PgStore gets the notification repositories: notify implements them over
// PostgreSQL (notify's pg-alerting.ts and pg-outbox.ts, which hold the policy
// validation), and the store may not import notify, so the control plane's
// assembly hands PgStore this factory, as it hands SqliteStore sqliteNotifyRepos.

import type { AlertingRepo, OutboxRepo } from '../types.js';
import type { PgRepoContext } from './pg-repo-context.js';

/** Builds the alerting and outbox repositories over one transaction's context. */
export type PgNotifyFactory = (ctx: PgRepoContext) => { alerting: AlertingRepo; outbox: OutboxRepo };
