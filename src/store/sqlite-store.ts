// The SQLite implementation of the asynchronous Store (types.ts): thin
// adapters over the synchronous repositories of this folder, one connection,
// and transactions whose bodies may await. better-sqlite3's db.transaction(fn)
// cannot hold an async body, so a transaction here is statements (BEGIN,
// SAVEPOINT, RELEASE, COMMIT) and a gate: while one is open, no other call
// touches the connection (it would run inside it), it waits its turn.
// Group commit is kept: the writes queued in one turn of the event loop share
// one transaction and one COMMIT (one fsync), each in its own savepoint.
// Notifications' repositories are built by the caller (notify implements them
// over this database; the store may not import notify).
// The control plane's callers are all on the Store (#20); the synchronous
// repositories (`sync`) remain for tests and SQLite's own tools, which may use
// them on the same connection outside the gate: safe because a transaction
// here runs to its end in microtasks (no timer or I/O callback of theirs can
// run in between) as long as its body awaits only the database, which the
// Store contract requires anyway.

import { MoatError } from '../errors/index.js';
import type { Database } from './database.js';
import { Daemons } from './daemons.js';
import type { HealthEvent } from './health-event.js';
import { ListStore } from './lists.js';
import { LoadBalancingStore, type ProbeRecord } from './load-balancing.js';
import { RulesetStore } from './rulesets.js';
import { SqliteChangeFeed } from './sqlite-change-feed.js';
import { Tokens } from './tokens.js';
import type {
  AlertingRepo,
  DaemonsRepo,
  ListsRepo,
  LoadBalancingRepo,
  OutboxRepo,
  Repos,
  RulesetsRepo,
  Store,
  TokensRepo,
  TxHealthEventListener,
  UsersRepo,
  WriteOptions,
} from './types.js';
import { Users } from './users.js';

/** The synchronous form of an asynchronous repository: what an adapter wraps. */
export type Synchronous<T> = { [K in keyof T]: T[K] extends (...args: infer A) => Promise<infer R> ? (...args: A) => R : never };

/** The asynchronous form of a synchronous repository (what the adapters make of it). */
type Promised<T> = { [K in keyof T]: T[K] extends (...args: infer A) => infer R ? (...args: A) => Promise<R> : never };

// Compile-time proof that each synchronous repository, made asynchronous,
// is its interface: a signature that drifts fails tsc here.
type Conforms<Sync, Repo> = Promised<Pick<Sync, keyof Repo & keyof Sync>> extends Pick<Repo, keyof Sync & keyof Repo> ? true : never;
const conformance: [
  Conforms<Users, UsersRepo>,
  Conforms<Tokens, TokensRepo>,
  Conforms<RulesetStore, RulesetsRepo>,
  Conforms<ListStore, ListsRepo>,
  Conforms<Daemons, DaemonsRepo>,
  Conforms<LoadBalancingStore, LoadBalancingRepo>,
] = [true, true, true, true, true, true];
void conformance;

/** The notification repositories over one database (notify's AlertingStore and Outbox). */
export interface SqliteNotifyRepos {
  alerting: Synchronous<AlertingRepo>;
  outbox: Synchronous<OutboxRepo>;
}

/** Builds the notification repositories; `pools` is the load balancing repository of the same database (policies' pool_id filters). */
export type SqliteNotifyFactory = (database: Database, pools: { poolExists(accountId: string, poolId: string): boolean }) => SqliteNotifyRepos;

// The method names of each interface, listed once: the adapters wrap exactly these.
const USERS: readonly (keyof UsersRepo)[] = ['create', 'addKey', 'revoke', 'get', 'list', 'count', 'legacyKeyCount', 'verify', 'verifyKey', 'reach', 'accountRows', 'zoneRows', 'zoneAccount'];
const TOKENS: readonly (keyof TokensRepo)[] = ['create', 'get', 'list', 'revoke', 'verify'];
const RULESETS: readonly (keyof RulesetsRepo)[] = [
  'get', 'entrypoint', 'managedByName', 'managed', 'list', 'stamp', 'entrypointStamp', 'version', 'versions', 'insert', 'addVersion', 'setRefs', 'deleteVersion', 'delete', 'executedBy',
];
const LISTS: readonly (keyof ListsRepo)[] = [
  'accountListNames', 'create', 'all', 'get', 'getOrThrow', 'updateDescription', 'delete', 'items', 'item', 'enqueue', 'operation', 'nextOperation', 'markRunning', 'applyOperation',
  'contentKey', 'entries', 'loadManaged', 'managedEntries',
];
const DAEMONS: readonly (keyof DaemonsRepo)[] = ['create', 'get', 'list', 'verify', 'revoke', 'revokedAmong', 'recordStatus', 'deploymentFingerprint'];
const LOAD_BALANCING: readonly (keyof LoadBalancingRepo)[] = [
  'poolExists', 'legacyPools', 'createMonitor', 'monitor', 'monitorOrThrow', 'monitors', 'updateMonitor', 'deleteMonitor', 'createPool', 'pool', 'poolOrThrow', 'pools', 'updatePool',
  'deletePool', 'bulkSetNotificationEmail', 'changeFingerprint', 'monitoredPools', 'originHealth', 'poolHealth', 'markStale', 'healthEvents',
];
const ALERTING: readonly (keyof AlertingRepo)[] = [
  'policies', 'policy', 'enabledPolicies', 'createPolicy', 'updatePolicy', 'deletePolicy', 'webhooks', 'webhook', 'webhookTarget', 'webhookSecret', 'insertWebhook', 'updateWebhook',
  'deleteWebhook', 'markWebhook',
];
const OUTBOX: readonly (keyof OutboxRepo)[] = [
  'claim', 'releaseDeadOwners', 'nextDue', 'record', 'prune', 'history', 'enqueue', 'openIncident', 'startIncident', 'endIncident', 'deprecationNotices', 'forgetDeprecationNotice',
  'recordDeprecationNotice',
];

/** Every method of each repository interface (the PostgreSQL store routes the same). */
export const REPO_METHODS: { readonly [K in keyof Repos]: readonly (keyof Repos[K])[] } = {
  users: USERS,
  tokens: TOKENS,
  rulesets: RULESETS,
  lists: LISTS,
  daemons: DAEMONS,
  loadBalancing: [...LOAD_BALANCING, 'recordProbes'],
  alerting: ALERTING,
  outbox: OUTBOX,
};

interface Job {
  fn: (tx: Repos) => Promise<unknown>;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

/** The Store over one SQLite database. */
export class SqliteStore implements Store {
  readonly backend = 'sqlite';
  readonly location: string;
  readonly changes: SqliteChangeFeed;

  readonly users: UsersRepo;
  readonly tokens: TokensRepo;
  readonly rulesets: RulesetsRepo;
  readonly lists: ListsRepo;
  readonly daemons: DaemonsRepo;
  readonly loadBalancing: LoadBalancingRepo;
  readonly alerting: AlertingRepo;
  readonly outbox: OutboxRepo;

  /** The synchronous repositories (tests and SQLite's own tools). */
  readonly sync: {
    readonly users: Users;
    readonly tokens: Tokens;
    readonly rulesets: RulesetStore;
    readonly lists: ListStore;
    readonly daemons: Daemons;
    readonly loadBalancing: LoadBalancingStore;
    readonly alerting: Synchronous<AlertingRepo>;
    readonly outbox: Synchronous<OutboxRepo>;
  };

  /** The repositories bound to the open transaction (they run at once: the caller holds the gate). */
  private readonly tx: Repos;
  private readonly healthListeners: TxHealthEventListener[] = [];

  /** A transaction is open on the connection: other calls wait in `waiting`. */
  private gateHeld = false;
  private readonly waiting: Array<() => void> = [];
  private queues: { durable: Job[]; relaxed: Job[] } = { durable: [], relaxed: [] };
  private flushScheduled = false;
  private isClosed = false;

  constructor(
    readonly database: Database,
    notify: SqliteNotifyFactory,
    options: { users?: Users | undefined; pollMs?: number | undefined } = {},
  ) {
    this.location = database.file;
    const users = options.users ?? new Users(database);
    const loadBalancing = new LoadBalancingStore(database);
    const n = notify(database, loadBalancing);
    this.sync = {
      users,
      tokens: new Tokens(database, users),
      rulesets: new RulesetStore(database),
      lists: new ListStore(database),
      daemons: new Daemons(database),
      loadBalancing,
      alerting: n.alerting,
      outbox: n.outbox,
    };
    this.changes = new SqliteChangeFeed(database, options.pollMs);
    const s = this.sync;
    const gated = (fn: () => unknown): Promise<unknown> => this.gated(fn);
    const direct = (fn: () => unknown): Promise<unknown> => settle(fn);
    this.users = adapt(s.users, USERS, gated);
    this.tokens = adapt(s.tokens, TOKENS, gated);
    this.rulesets = adapt(s.rulesets, RULESETS, gated);
    this.lists = adapt(s.lists, LISTS, gated);
    this.daemons = adapt(s.daemons, DAEMONS, gated);
    this.alerting = adapt(s.alerting, ALERTING, gated);
    this.outbox = adapt(s.outbox, OUTBOX, gated);
    this.loadBalancing = {
      ...adapt(s.loadBalancing, LOAD_BALANCING, gated),
      // Outside a transaction: one of its own (relaxed durability: see WriteOptions).
      recordProbes: (probes) => this.write((tx) => tx.loadBalancing.recordProbes(probes), { durability: 'relaxed' }),
    };
    this.tx = {
      users: adapt(s.users, USERS, direct),
      tokens: adapt(s.tokens, TOKENS, direct),
      rulesets: adapt(s.rulesets, RULESETS, direct),
      lists: adapt(s.lists, LISTS, direct),
      daemons: adapt(s.daemons, DAEMONS, direct),
      alerting: adapt(s.alerting, ALERTING, direct),
      outbox: adapt(s.outbox, OUTBOX, direct),
      loadBalancing: { ...adapt(s.loadBalancing, LOAD_BALANCING, direct), recordProbes: (probes) => this.recordProbesInTx(probes) },
    };
  }

  changeEpoch(): string {
    return this.database.changeEpoch();
  }

  onHealthEvent(listener: TxHealthEventListener): void {
    this.healthListeners.push(listener);
  }

  onPoolsWritten(listener: () => void): void {
    this.sync.loadBalancing.onPoolsWritten(listener);
  }

  /** Closed by close(), or its database closed underneath it. */
  get closed(): boolean {
    return this.isClosed || !this.database.db.open;
  }

  write<T>(fn: (tx: Repos) => Promise<T>, options: WriteOptions = {}): Promise<T> {
    if (this.isClosed) return Promise.reject(closedError());
    return new Promise<T>((resolve, reject) => {
      this.queues[options.durability === 'relaxed' ? 'relaxed' : 'durable'].push({ fn, resolve: resolve as (v: unknown) => void, reject });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  async read<T>(fn: (tx: Repos) => Promise<T>): Promise<T> {
    if (this.isClosed) throw closedError();
    await this.acquire();
    const db = this.database.db;
    try {
      db.prepare('BEGIN DEFERRED').run();
      try {
        const result = await fn(this.tx);
        db.prepare('COMMIT').run();
        return result;
      } catch (err) {
        if (db.inTransaction) db.prepare('ROLLBACK').run();
        throw err;
      }
    } finally {
      this.release();
    }
  }

  async writable(waitMs?: number): Promise<string | undefined> {
    await this.acquire();
    try {
      return this.database.writable(waitMs);
    } finally {
      this.release();
    }
  }

  async close(): Promise<void> {
    if (this.isClosed) return;
    this.isClosed = true;
    await this.changes.stop();
    // The queued writes still run (they were accepted); then the connection closes.
    for (;;) {
      if (this.flushScheduled) await new Promise((resolve) => setImmediate(resolve));
      else if (this.gateHeld) await this.acquire().then(() => this.release());
      else break;
    }
    this.database.close();
  }

  /** Runs `fn` now when no transaction is open, else after it (FIFO). */
  private gated(fn: () => unknown): Promise<unknown> {
    if (!this.gateHeld) return settle(fn);
    return new Promise((resolve, reject) => {
      this.waiting.push(() => {
        try {
          resolve(fn());
        } catch (err) {
          reject(err);
        }
      });
    });
  }

  private acquire(): Promise<void> {
    if (!this.gateHeld) {
      this.gateHeld = true;
      return Promise.resolve();
    }
    return new Promise((resolve) =>
      this.waiting.push(() => {
        this.gateHeld = true;
        resolve();
      }),
    );
  }

  /** Lets the waiting calls run in order, until one opens a transaction again. */
  private release(): void {
    this.gateHeld = false;
    while (!this.gateHeld && this.waiting.length > 0) this.waiting.shift()!();
  }

  private async flush(): Promise<void> {
    this.flushScheduled = false;
    const { durable, relaxed } = this.queues;
    this.queues = { durable: [], relaxed: [] };
    await this.acquire();
    try {
      if (durable.length > 0) await this.commitGroup(durable);
      if (relaxed.length > 0) {
        // synchronous=NORMAL: no fsync at COMMIT (see WriteOptions); set outside the transaction, as SQLite requires.
        this.database.db.pragma('synchronous = NORMAL');
        try {
          await this.commitGroup(relaxed);
        } finally {
          this.database.db.pragma('synchronous = FULL');
        }
      }
    } finally {
      this.release();
    }
  }

  /** One transaction, each job in its own savepoint, one COMMIT; then every job settles. */
  private async commitGroup(jobs: Job[]): Promise<void> {
    const db = this.database.db;
    const outcomes: Array<{ ok: boolean; value: unknown }> = [];
    try {
      try {
        db.prepare('BEGIN IMMEDIATE').run();
      } catch (err) {
        throw (err as { code?: string }).code === 'SQLITE_BUSY' ? new MoatError('STORE_BUSY', 'the database is busy (another writer holds it); try again', { cause: err }) : err;
      }
      for (const job of jobs) outcomes.push(await this.inSavepoint(() => job.fn(this.tx)));
      db.prepare('COMMIT').run();
    } catch (err) {
      if (db.inTransaction) db.prepare('ROLLBACK').run();
      for (const job of jobs) job.reject(err);
      return;
    }
    this.database.committed();
    jobs.forEach((job, i) => (outcomes[i]!.ok ? job.resolve(outcomes[i]!.value) : job.reject(outcomes[i]!.value)));
  }

  /** Runs `fn` in a savepoint: kept when it resolves, rolled back alone when it throws. */
  private async inSavepoint<T>(fn: () => Promise<T>): Promise<{ ok: boolean; value: T | unknown }> {
    const db = this.database.db;
    db.prepare('SAVEPOINT moat_job').run();
    try {
      const value = await fn();
      db.prepare('RELEASE moat_job').run();
      return { ok: true, value };
    } catch (err) {
      db.prepare('ROLLBACK TO moat_job').run();
      db.prepare('RELEASE moat_job').run();
      return { ok: false, value: err };
    }
  }

  /** LoadBalancingRepo.recordProbes inside a transaction: each probe in a savepoint, its events handed to the listeners there. */
  private async recordProbesInTx(probes: readonly ProbeRecord[]): Promise<(HealthEvent[] | Error)[]> {
    const out: (HealthEvent[] | Error)[] = [];
    for (const p of probes) {
      const r = await this.inSavepoint(async () => {
        // The synchronous repository's own listeners first (notify's Notifier, until it is on the Store), then the Store's.
        const events = this.sync.loadBalancing.recordProbe(p);
        for (const e of events) for (const l of this.healthListeners) await l(e, this.tx);
        return events;
      });
      out.push(r.ok ? (r.value as HealthEvent[]) : r.value instanceof Error ? r.value : new Error(String(r.value)));
    }
    return out;
  }
}

function closedError(): MoatError {
  return new MoatError('STORE_OPEN', 'the store is closed');
}

/** The outcome of a synchronous call as a promise (a throw becomes a rejection, never an exception of the caller). */
function settle(fn: () => unknown): Promise<unknown> {
  try {
    return Promise.resolve(fn());
  } catch (err) {
    return Promise.reject(err instanceof Error ? err : new Error(String(err)));
  }
}

/** An asynchronous repository over a synchronous one: each listed method, run through `run`. */
function adapt<Repo>(impl: object, methods: readonly (keyof Repo)[], run: (fn: () => unknown) => Promise<unknown>): Repo {
  const out: Record<string, unknown> = {};
  const target = impl as Record<string, (...args: unknown[]) => unknown>;
  for (const name of methods as readonly string[]) {
    const method = target[name];
    if (typeof method !== 'function') throw new Error(`${name} is not a method of the repository`);
    out[name] = (...args: unknown[]) => run(() => method.apply(impl, args));
  }
  return out as Repo;
}
