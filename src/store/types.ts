// The store's contract, independent of the database behind it (issue #20):
// one asynchronous interface per repository and a `Store` that bundles them
// with transactions, the change feed and the change epoch. SQLite implements
// it in sqlite-store.ts (over the synchronous repositories of this folder);
// PostgreSQL implements it in postgres/. Methods return promises because a
// networked database answers later; nothing here names a file, a PRAGMA or a
// connection: those belong to one implementation.
//
// Conventions every implementation keeps (the API's answers depend on them):
// - Row objects are exactly what the SQLite repositories return today (the API
//   serialises them as they are: same keys, same order, same stamps, ISO 8601
//   with microseconds from nowStamp()).
// - Errors are MoatErrors with the same registry codes and messages (the API
//   maps them to its envelopes); an implementation translates its driver's
//   errors (busy, serialization failure after its retries) into STORE_BUSY.
// - A repository method called on the Store itself runs in its own
//   transaction (or a single statement); called on the `tx` of write()/read(),
//   it runs in that transaction.

import type { Health, HealthEvent } from './health-event.js';
import type { BulkOp, BulkOperationObject, ItemInput, ItemPage, ListItemObject, ListObject, QueuedOperation } from './lists.js';
import type { Refs, RulesetRow, StoredRule, VersionRow, VersionStamp, Visibility } from './rulesets.js';
import type { DaemonIdentity, DaemonInfo, StatusUpdate } from './daemons.js';
import type { HealthEventRow, MonitorRow, OriginHealthRow, PoolRow, ProbeRecord } from './load-balancing.js';
import type { KeyCheck, Principal, UserInfo } from './users.js';
import type { TokenInfo } from './tokens.js';

/** Users, their keys, accounts and zones (X-Auth-Email/X-Auth-Key). */
export interface UsersRepo {
  create(input: { email: string; accounts: string[]; zones?: string[]; key?: string | undefined }): Promise<{ user: UserInfo; key: string }>;
  addKey(email: string, key?: string): Promise<string>;
  /** Revokes one key, or every key of the user; returns how many. */
  revoke(email: string, keyId?: string): Promise<number>;
  get(email: string): Promise<UserInfo | undefined>;
  list(): Promise<UserInfo[]>;
  count(): Promise<number>;
  /** Keys still hashed the pre-schema-4 way (scrypt). */
  legacyKeyCount(): Promise<number>;
  verify(email: string, key: string): Promise<Principal | undefined>;
  /**
   * Checks a key. An implementation may remember an answer (a memo keyed by a
   * hash of email and key) as long as it checks changeEpoch() before trusting
   * it, so a revoked key stops working as soon as the epoch says so.
   * `mayCheckScrypt` is asked before a legacy (slow) hash is computed.
   */
  verifyKey(email: string, key: string, mayCheckScrypt: () => boolean): Promise<KeyCheck>;
  /** The accounts and zones a user reaches. */
  reach(userId: string): Promise<{ accounts: Set<string>; zones: Map<string, string> }>;
  accountRows(ids: Iterable<string>): Promise<{ id: string; created_on: string }[]>;
  zoneRows(accounts: Iterable<string>, zoneIds: Iterable<string>): Promise<{ id: string; account_id: string; created_on: string }[]>;
  zoneAccount(zoneId: string): Promise<string | undefined>;
}

/** API tokens (Authorization: Bearer). */
export interface TokensRepo {
  create(input: { email: string; name: string; accounts?: string[]; readOnly?: boolean }): Promise<{ info: TokenInfo; token: string }>;
  get(id: string): Promise<TokenInfo | undefined>;
  list(email?: string): Promise<TokenInfo[]>;
  revoke(id: string): Promise<void>;
  verify(token: string): Promise<Principal | undefined>;
}

/** Rulesets and their versions. Version numbers are 1, 2, ... per ruleset, without gaps or duplicates under concurrent writers. */
export interface RulesetsRepo {
  get(id: string): Promise<RulesetRow | undefined>;
  entrypoint(level: Visibility, phase: string): Promise<RulesetRow | undefined>;
  managedByName(name: string): Promise<RulesetRow | undefined>;
  managed(): Promise<RulesetRow[]>;
  /** A page of a level's rulesets after the row `afterRowid` (keyset pagination; rowid is the insertion order). */
  list(level: Visibility, afterRowid: number, limit: number): Promise<RulesetRow[]>;
  stamp(id: string, version?: number): Promise<VersionStamp | undefined>;
  /** Memoised like UsersRepo.verifyKey: only while changeEpoch() is unchanged. */
  entrypointStamp(level: Visibility, phase: string, version?: number): Promise<VersionStamp | undefined>;
  version(id: string, version: number): Promise<VersionRow | undefined>;
  versions(id: string): Promise<{ version: number; description: string; last_updated: string }[]>;
  insert(row: Omit<RulesetRow, 'rowid' | 'latest_version' | 'last_version'>): Promise<void>;
  /** Adds the next version (last_version + 1, never reused after a delete); returns its number. */
  addVersion(id: string, description: string, lastUpdated: string, rules: readonly StoredRule[], refs: Refs): Promise<number>;
  setRefs(id: string, refs: Refs): Promise<void>;
  deleteVersion(id: string, version: number): Promise<void>;
  delete(id: string): Promise<void>;
  executedBy(targetId: string): Promise<{ ruleset_id: string; target_version: number | null }[]>;
}

/** Account IP lists, items, bulk operations (a durable queue) and managed lists. */
export interface ListsRepo {
  accountListNames(accountId: string): Promise<Set<string>>;
  create(accountId: string, input: { name: string; kind: string; description: string }, maxLists: number): Promise<ListObject>;
  all(accountId: string): Promise<ListObject[]>;
  get(accountId: string, listId: string): Promise<ListObject | undefined>;
  getOrThrow(accountId: string, listId: string): Promise<ListObject>;
  updateDescription(accountId: string, listId: string, description: string): Promise<ListObject>;
  delete(accountId: string, listId: string): Promise<void>;
  items(accountId: string, listId: string, options: { cursor?: string | undefined; perPage: number; search?: string | undefined }): Promise<ItemPage>;
  item(accountId: string, listId: string, itemId: string): Promise<ListItemObject>;
  /** Queues a bulk operation; returns its id. */
  enqueue(accountId: string, listId: string, op: BulkOp, payload: ItemInput[] | string[]): Promise<string>;
  operation(accountId: string, operationId: string): Promise<BulkOperationObject>;
  /** The oldest pending or running operation (a running one was interrupted: it is resumed). */
  nextOperation(): Promise<QueuedOperation | undefined>;
  markRunning(operationId: string): Promise<void>;
  /** Applies an operation atomically (all items or none) and records its outcome. */
  applyOperation(operationId: string, maxItems: number): Promise<BulkOperationObject['status']>;
  /** A key that changes whenever a list's content changes (the hub's memo of list entries). */
  contentKey(accountId: string, name: string): Promise<string | undefined>;
  entries(accountId: string, name: string): Promise<string[]>;
  loadManaged(name: string, entries: readonly string[], description: string): Promise<number>;
  managedEntries(name: string): Promise<string[]>;
}

/** Daemons of the control channel: identities and fleet status. */
export interface DaemonsRepo {
  create(input: { accountId: string; zoneId?: string | undefined; name: string }): Promise<{ info: DaemonInfo; token: string }>;
  get(id: string): Promise<DaemonInfo | undefined>;
  list(filter?: { accountId?: string | undefined }): Promise<DaemonInfo[]>;
  verify(token: string): Promise<DaemonIdentity | undefined>;
  revoke(idOrName: string, accountId?: string): Promise<DaemonInfo>;
  revokedAmong(ids: readonly string[]): Promise<string[]>;
  /** Records a batch of status updates in one transaction. */
  recordStatus(updates: readonly StatusUpdate[]): Promise<void>;
  /** A cheap fingerprint of what a daemon of the account (and zone) would be sent; changes when that may have changed. */
  deploymentFingerprint(accountId: string, zoneId: string | null): Promise<string>;
}

/** Load balancer monitors and pools, and their health. */
export interface LoadBalancingRepo {
  poolExists(accountId: string, poolId: string): Promise<boolean>;
  legacyPools(): Promise<{ accountId: string; poolId: string; poolName: string; notificationEmail: string }[]>;
  createMonitor(accountId: string, body: Record<string, unknown>): Promise<MonitorRow>;
  monitor(accountId: string, id: string): Promise<MonitorRow | undefined>;
  monitorOrThrow(accountId: string, id: string): Promise<MonitorRow>;
  monitors(accountId: string): Promise<MonitorRow[]>;
  /** Read, `update` (pure, synchronous) and write in one transaction. */
  updateMonitor(accountId: string, id: string, update: (current: Record<string, unknown>) => Record<string, unknown>): Promise<MonitorRow>;
  deleteMonitor(accountId: string, id: string): Promise<void>;
  createPool(accountId: string, name: string, monitorId: string | null, body: Record<string, unknown>): Promise<PoolRow>;
  pool(accountId: string, id: string): Promise<PoolRow | undefined>;
  poolOrThrow(accountId: string, id: string): Promise<PoolRow>;
  pools(accountId: string, offset: number, limit: number, monitorId?: string | null): Promise<{ rows: PoolRow[]; total: number }>;
  /** Read, `update` (pure, synchronous) and write in one transaction. */
  updatePool(accountId: string, id: string, update: (current: PoolRow) => { name: string; monitorId: string | null; body: Record<string, unknown> }): Promise<PoolRow>;
  deletePool(accountId: string, id: string): Promise<void>;
  bulkSetNotificationEmail(accountId: string, offset: number, limit: number, email: string): Promise<PoolRow[]>;
  /** Changes whenever a monitor or pool changes (the health monitor's schedule). */
  changeFingerprint(): Promise<string>;
  monitoredPools(): Promise<{ pool: PoolRow; monitor: MonitorRow }[]>;
  originHealth(poolId: string): Promise<Map<string, OriginHealthRow>>;
  poolHealth(poolId: string): Promise<Health | null>;
  /**
   * Records probes in one transaction, each in its own savepoint; every event
   * is handed to the Store's health event listeners inside it (see
   * Store.onHealthEvent). A probe whose listener throws is rolled back alone
   * and its error returned in its place.
   */
  recordProbes(probes: readonly ProbeRecord[]): Promise<(HealthEvent[] | Error)[]>;
  markStale(): Promise<void>;
  healthEvents(accountId: string): Promise<HealthEventRow[]>;
}

/** A notification policy as the API returns it (alerting v3). */
export interface PolicyObject {
  id: string;
  name: string;
  description: string;
  enabled: boolean;
  alert_type: string;
  alert_interval?: string;
  filters: Record<string, unknown>;
  mechanisms: Record<string, unknown>;
  created: string;
  modified: string;
}

/** A webhook destination as the API returns it (never its secret). */
export interface WebhookObject {
  id: string;
  name: string;
  url: string;
  type: string;
  created_at: string;
  last_success: string | null;
  last_failure: string | null;
}

/** What delivery needs of a webhook destination. */
export interface WebhookTarget {
  id: string;
  name: string;
  url: string;
  secret: string | null;
}

/** A checked webhook body (see notify's checkWebhook). */
export interface WebhookInput {
  name: string;
  url: URL;
  /** undefined: not given (an update keeps the stored one); "": none. */
  secret: string | undefined;
}

/**
 * Notification policies and webhook destinations. Bodies are validated by
 * the repository (filters per alert type, pool ids of the account through
 * LoadBalancingRepo.poolExists in the same transaction, mechanisms that
 * exist); invalid ones throw notify's FieldErrors with every problem.
 */
export interface AlertingRepo {
  policies(accountId: string): Promise<PolicyObject[]>;
  policy(accountId: string, id: string): Promise<PolicyObject>;
  enabledPolicies(accountId: string, type: string): Promise<PolicyObject[]>;
  createPolicy(accountId: string, body: unknown): Promise<string>;
  updatePolicy(accountId: string, id: string, body: unknown): Promise<string>;
  deletePolicy(accountId: string, id: string): Promise<void>;
  webhooks(accountId: string): Promise<WebhookObject[]>;
  webhook(accountId: string, id: string): Promise<WebhookObject>;
  webhookTarget(accountId: string, id: string): Promise<WebhookTarget | undefined>;
  webhookSecret(accountId: string, id: string): Promise<string | null>;
  insertWebhook(accountId: string, w: WebhookInput): Promise<string>;
  updateWebhook(accountId: string, id: string, w: WebhookInput): Promise<void>;
  deleteWebhook(accountId: string, id: string): Promise<void>;
  markWebhook(id: string, ok: boolean, at: string): Promise<void>;
}

/** One claimed notification. */
export interface OutboxRow {
  id: string;
  account_id: string;
  policy_id: string | null;
  event_id: string;
  mechanism_type: 'email' | 'webhook';
  target: string;
  /** The payload as JSON text (notify's NotificationPayload). */
  payload: string;
  created: string;
  status: string;
  attempts: number;
  next_attempt_ms: number;
  lease_owner: string | null;
  lease_until_ms: number | null;
  last_error: string | null;
}

/** A notification to queue. */
export interface NewOutboxRow {
  accountId: string;
  policyId: string | null;
  /** The event it notifies of (a fresh id for notices not caused by an event). */
  eventId: string;
  mechanismType: 'email' | 'webhook';
  target: string;
  /** JSON text. */
  payload: string;
  /** Due at (ms since the epoch); also its creation stamp. */
  nowMs: number;
}

/** What one attempt ended with. */
export interface AttemptOutcome {
  ok: boolean;
  statusCode?: number | undefined;
  /** Why it failed: "HTTP 503", "connect ECONNREFUSED 127.0.0.1:9", ... */
  error?: string | undefined;
  /** The registry code of the failure (9400, 9401, 9403). */
  code?: number | undefined;
  /** The receiver's Retry-After, in ms. */
  retryAfterMs?: number | undefined;
  /** Give up now (410 Gone, a deleted destination). */
  final?: boolean | undefined;
}

/** A history record as the API returns it. */
export interface HistoryObject {
  id: string;
  alert_body: string;
  alert_type: string;
  description: string;
  mechanism: string;
  mechanism_type: string;
  name: string;
  policy_id: string | null;
  sent: string;
  notification_id: string;
  outcome: 'delivered' | 'failed' | 'gave_up';
  attempt: number;
  status_code: number | null;
  error: string | null;
}

/**
 * The notification outbox (claimed with leases: at-least-once, a row never
 * sent by two workers at the same time, in one process or across replicas),
 * its history, alert incidents (correlation ids) and deprecation notices.
 */
export interface OutboxRepo {
  /** Claims up to `limit` due rows for `owner` until now + leaseMs (expired leases first recorded as interrupted attempts). */
  claim(owner: string, now: number, leaseMs: number, limit: number): Promise<OutboxRow[]>;
  /** Frees the leases of owners on `host` whose process is gone; returns how many rows. */
  releaseDeadOwners(host: string, alive: (pid: number) => boolean, now?: number): Promise<number>;
  /** When the next row is due (ms), if any. */
  nextDue(): Promise<number | undefined>;
  /**
   * Records the attempt of a claimed row. 'stale' (nothing written) when the
   * row is no longer this claim's: its lease ran out and another worker took
   * it, or it was recorded already. Only the lease's holder records.
   */
  record(row: OutboxRow, now: number, outcome: AttemptOutcome, retryAt: number | undefined): Promise<'delivered' | 'retry' | 'gave_up' | 'stale'>;
  /** Deletes history and finished rows older than the history window; returns how many. */
  prune(now: number): Promise<number>;
  history(accountId: string, q: { since?: string | undefined; before?: string | undefined; page: number; perPage: number }): Promise<{ items: HistoryObject[]; total: number }>;
  /** Queues one notification; returns its id. */
  enqueue(row: NewOutboxRow): Promise<string>;
  /** The correlation id of the open incident of a subject, if any. */
  openIncident(accountId: string, subject: string): Promise<string | undefined>;
  startIncident(accountId: string, subject: string, correlationId: string): Promise<void>;
  endIncident(accountId: string, subject: string): Promise<void>;
  /** When each (account, address) was last sent a deprecation notice. */
  deprecationNotices(): Promise<{ account_id: string; address: string; last_sent_ms: number }[]>;
  forgetDeprecationNotice(accountId: string, address: string): Promise<void>;
  recordDeprecationNotice(accountId: string, address: string, sentMs: number): Promise<void>;
}

/** The repositories, on the Store (each call its own transaction) or on a transaction's `tx`. */
export interface Repos {
  readonly users: UsersRepo;
  readonly tokens: TokensRepo;
  readonly rulesets: RulesetsRepo;
  readonly lists: ListsRepo;
  readonly daemons: DaemonsRepo;
  readonly loadBalancing: LoadBalancingRepo;
  readonly alerting: AlertingRepo;
  readonly outbox: OutboxRepo;
}

/**
 * "Something may have changed" signals, from this process's commits and from
 * other processes or replicas sharing the database (SQLite: PRAGMA
 * data_version, polled; PostgreSQL: LISTEN/NOTIFY). A signal carries nothing:
 * listeners read what changed, so signals may be merged or spurious, never
 * missing (after a reconnection of the feed, one signal, so listeners catch up).
 */
export interface ChangeFeed {
  readonly name: string;
  /** Calls `listener` (soon, never inside the writer's call) after changes; returns the unsubscribe function. */
  subscribe(listener: () => void): () => void;
  start(): void;
  stop(): Promise<void>;
}

/** Options of Store.write. */
export interface WriteOptions {
  /**
   * Durable (default): committed to stable storage before the promise
   * resolves. Relaxed: atomic and safe from a crash of the process, but a
   * crash of the machine may lose the last ones (health probe results: the
   * next probes find the edges again). An implementation may ignore it.
   */
  durability?: 'durable' | 'relaxed';
}

/** Called inside the transaction that records a health event (see LoadBalancingRepo.recordProbes): it may write through `tx`; it must not do other I/O. */
export type TxHealthEventListener = (event: HealthEvent, tx: Repos) => Promise<void>;

/**
 * The control plane's store: the repositories (each call its own
 * transaction), transactions over several calls, the change feed and the
 * change epoch.
 */
export interface Store extends Repos {
  /** `sqlite` or `postgres`: for logs and the few answers that name the backend. */
  readonly backend: 'sqlite' | 'postgres';
  /** Where the data lives, for logs (a file path; a URL without its password). */
  readonly location: string;

  /**
   * Runs `fn` in one write transaction: everything it wrote commits, or
   * nothing (it throws: rolled back, its error rethrown). Writers never both
   * read and then both write the same row (SQLite: IMMEDIATE, one writer;
   * PostgreSQL: SERIALIZABLE or row locks, on one pooled client, retrying
   * serialization failures, so `fn` may run more than once: it must do
   * nothing but database work through `tx`). An implementation may group the
   * writes of one event-loop turn into one commit, each in its own savepoint
   * (one that throws rolls back alone). The promise resolves after the
   * commit is durable (per `options.durability`) and after changeEpoch()
   * changed.
   */
  write<T>(fn: (tx: Repos) => Promise<T>, options?: WriteOptions): Promise<T>;

  /** Runs `fn` in one read-only transaction: a consistent snapshot across its queries. */
  read<T>(fn: (tx: Repos) => Promise<T>): Promise<T>;

  /**
   * A value that changes whenever anything may have been committed since it
   * was last read, by this process or another one sharing the database: what
   * a memo of a read checks before it trusts itself. A backend must
   * guarantee: (1) after a write of this process resolved, the value differs
   * from every value read before that write; (2) a commit of another process
   * changes it within the change feed's latency (SQLite: the next turn of the
   * event loop; PostgreSQL: when its notification arrives). Synchronous and
   * cheap: it is read on every request.
   */
  changeEpoch(): string;

  /** The change feed of this database (one per store; the control channel's hub subscribes to it). */
  readonly changes: ChangeFeed;

  /** Registers a listener of health events (see TxHealthEventListener). */
  onHealthEvent(listener: TxHealthEventListener): void;
  /** Registers a listener called after pools were written (notification_email may have changed); it only schedules work. */
  onPoolsWritten(listener: () => void): void;

  /**
   * Whether the store can take a write now (the readiness check); undefined
   * when it can, else why not. Waits at most `waitMs`.
   */
  writable(waitMs?: number): Promise<string | undefined>;

  /** Whether close() was called. */
  readonly closed: boolean;
  /** Closes the store (waits for the running transactions). */
  close(): Promise<void>;
}
