// Public face of the store: the embedded SQLite database, users and keys, and
// the repositories of rulesets and lists; the asynchronous contract every
// backend implements (types.ts).
export { Database, DB_FILE, secureDataDir, type Db, type OpenOptions } from './database.js';
export { Users, isWellFormedEmail, isWellFormedKey, type KeyCheck, type Principal, type UserInfo } from './users.js';
export { Tokens, isWellFormedToken, type TokenInfo } from './tokens.js';
export { newId, isId, nowStamp } from './ids.js';
export {
  ListStore,
  canonicalItemIp,
  managedListName,
  rangeListTexts,
  type BulkOp,
  type BulkOperationObject,
  type ItemInput,
  type ItemPage,
  type ListItemObject,
  type ListObject,
  type QueuedOperation,
} from './lists.js';
export { RulesetStore, type StoredRule, type RulesetRow, type VersionRow, type VersionStamp, type Visibility, type Refs } from './rulesets.js';
export {
  Daemons,
  deploymentFingerprint,
  DAEMON_TOKEN_PREFIX,
  type DaemonInfo,
  type DaemonIdentity,
  type DaemonCounters,
  type RunningRuleset,
  type Rejection,
  type StatusUpdate,
} from './daemons.js';
export type { Health, HealthEvent, HealthEventListener } from './health-event.js';
export { LoadBalancingStore, type MonitorRow, type PoolRow, type OriginHealthRow, type HealthEventRow, type ProbeRecord } from './load-balancing.js';
export * from './postgres/index.js';
export { migrateStore, verifyStore, canonicalValue, tableDigest, StoreMismatchError, type MigrateStoreOptions, type StoreReport, type TableCheck } from './migrate-store.js';
export type {
  Store,
  Repos,
  UsersRepo,
  TokensRepo,
  RulesetsRepo,
  ListsRepo,
  DaemonsRepo,
  LoadBalancingRepo,
  AlertingRepo,
  OutboxRepo,
  ChangeFeed,
  WriteOptions,
  TxHealthEventListener,
  PolicyObject,
  WebhookObject,
  WebhookTarget,
  WebhookInput,
  OutboxRow,
  NewOutboxRow,
  AttemptOutcome,
  HistoryObject,
} from './types.js';
export { SqliteChangeFeed, DEFAULT_POLL_MS } from './sqlite-change-feed.js';
export { SqliteStore, type SqliteNotifyFactory, type SqliteNotifyRepos, type Synchronous } from './sqlite-store.js';
