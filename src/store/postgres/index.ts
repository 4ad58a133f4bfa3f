// Public face of the PostgreSQL store (#20): the connection (pool, transactions
// with retries, LISTEN/NOTIFY), its schema and migrator, and leases for work
// shared by replicas. The repositories on PostgreSQL build on these.
export { PgDatabase, type PgClient, type PgLog, type PgOpenOptions, type PgStats, type Isolation, type WriteOptions } from './pg-database.js';
export { PgListener, type ListenerOptions } from './pg-listener.js';
export { PG_MIGRATIONS, PG_ONLY_TABLES, PG_ONLY_COLUMNS, MOAT_LOCK_CLASS, MIGRATION_LOCK, migratePostgres, type MigrationReport } from './pg-migrations.js';
export { Leases, LeaseKeeper, type LeaseGrant, type LeaseHolder, type KeeperOptions } from './leases.js';
export { DATABASE_URL_ENV, databaseUrlFrom, parseTarget, redactUrl, mapPgError, type PgTarget } from './connection.js';
export { PgStore, type PgStoreOptions } from './pg-store.js';
export { PgChangeFeed, CHANGES_CHANNEL } from './pg-change-feed.js';
export type { PgRepoContext } from './pg-repo-context.js';
export { PgListsRepo } from './pg-lists.js';
export { PgLoadBalancingRepo } from './pg-load-balancing.js';
export type { PgNotifyFactory } from './pg-notify-factory.js';
