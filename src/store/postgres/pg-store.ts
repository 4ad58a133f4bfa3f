// The Store (../types.ts) on PostgreSQL, for several `moat serve` replicas
// sharing one database. Each transaction gets a context (pg-repo-context.ts):
// its client and the repositories bound to it; PgDatabase.write runs a body
// again after a serialization failure, so a retry builds a fresh context and
// only the final attempt's afterCommit callbacks run, once, after its COMMIT.
// A repository method called on the store itself runs in a transaction of
// its own: a read-only one for the methods that only read.
//
// Changes: every write transaction sends pg_notify('moat_changes', payload)
// (delivered at COMMIT, never after a rollback) with a small JSON payload:
// {"from": the store's id, "repos": the repositories it wrote}. Each store
// LISTENs on its own connection from open() on: a notification from another
// store moves the change epoch and signals the change feed; after the
// connection is lost and back, the epoch moves and the feed signals (what
// was notified meanwhile is lost; listeners catch up from the database).
// While the connection is down the epoch is a new value at every read, so no
// memo is trusted while other replicas' commits could go unseen.

import { createHash, randomBytes } from 'node:crypto';
import type * as pg from 'pg';
import { MoatError } from '../../errors/index.js';
import type { ProbeRecord } from '../load-balancing.js';
import type { Visibility } from '../rulesets.js';
import type { ItemRow } from '../lists.js';
import type { Repos, Store, TxHealthEventListener, WriteOptions } from '../types.js';
import { REPO_METHODS } from '../sqlite-store.js';
import { isWellFormedToken } from '../tokens.js';
import { redactUrl } from './connection.js';
import { CHANGES_CHANNEL, PgChangeFeed } from './pg-change-feed.js';
import { PgDatabase, type PgClient, type PgLog, type PgOpenOptions } from './pg-database.js';
import type { PgListener } from './pg-listener.js';
import type { PgNotifyFactory } from './pg-notify-factory.js';
import type { PgRepoContext } from './pg-repo-context.js';
import type { PgShared } from './pg-shared.js';
import { FINGERPRINT_SQL, PgDaemonsRepo } from './pg-daemons.js';
import { itemsAnswer, itemsQuery, PgListsRepo } from './pg-lists.js';
import { PgLoadBalancingRepo } from './pg-load-balancing.js';
import { PgRulesetsRepo, stampMemoKey } from './pg-rulesets.js';
import { PgTokensRepo } from './pg-tokens.js';
import { keyMemoKey, PgUsersRepo } from './pg-users.js';

/** The methods that only read, per repository: called on the store, they run in a read-only transaction. */
const READS: { readonly [K in keyof Repos]: ReadonlySet<string> } = {
  users: new Set(['get', 'list', 'count', 'legacyKeyCount', 'verify', 'verifyKey', 'reach', 'accountRows', 'zoneRows', 'zoneAccount']),
  tokens: new Set(['get', 'list', 'verify']),
  rulesets: new Set(['get', 'entrypoint', 'managedByName', 'managed', 'list', 'stamp', 'entrypointStamp', 'version', 'versions', 'executedBy']),
  lists: new Set(['accountListNames', 'all', 'get', 'getOrThrow', 'items', 'item', 'operation', 'nextOperation', 'contentKey', 'entries', 'managedEntries']),
  daemons: new Set(['get', 'list', 'verify', 'revokedAmong', 'deploymentFingerprint']),
  loadBalancing: new Set(['poolExists', 'legacyPools', 'monitor', 'monitorOrThrow', 'monitors', 'pool', 'poolOrThrow', 'pools', 'changeFingerprint', 'monitoredPools', 'originHealth', 'poolHealth', 'healthEvents']),
  alerting: new Set(['policies', 'policy', 'enabledPolicies', 'webhooks', 'webhook', 'webhookTarget', 'webhookSecret']),
  outbox: new Set(['nextDue', 'history', 'openIncident', 'deprecationNotices']),
};

/**
 * Writes that change nothing a daemon is sent: committed without signalling
 * the feed (as SQLite's recordStatus); the change epoch still moves. Besides
 * fleet status, the writes every replica makes on its own schedule (the
 * outbox's poll each second, health probes): as loud writes they made every
 * replica's hub re-read each group's deployment fingerprint about once a
 * second per replica, for nothing, and hid a lost notification behind the
 * next poll instead of the LISTEN connection's catch-up.
 */
const QUIET = new Set(['daemons.recordStatus', 'outbox.claim', 'outbox.record', 'outbox.releaseDeadOwners', 'outbox.prune', 'loadBalancing.recordProbes', 'loadBalancing.markStale']);
/** Pool writes: named in the notification, so other replicas run their Store.onPoolsWritten listeners. */
const POOL_WRITES = new Set(['loadBalancing.createPool', 'loadBalancing.updatePool', 'loadBalancing.deletePool', 'loadBalancing.bulkSetNotificationEmail']);
/** The name of pool writes in a notification's payload. */
const POOLS = 'pools';

/**
 * Attempts of a write transaction before 8003. Under SERIALIZABLE, writers of
 * one row queued on its lock all fail (40001) when the holder commits, since
 * their snapshots predate its commit, and retry after a random pause: each
 * round lets one through, so N writers racing for one ruleset need about N
 * attempts. PgDatabase's default (10) made 12 writers through three replicas
 * fail with 8003 (test/store/postgres/pg-store.test.ts); 30 keeps a burst of
 * a few dozen writers of one ruleset from failing, at most about 3.5 s of
 * pauses (capped at 128 ms each) before a client is told to try again.
 */
const WRITE_ATTEMPTS = 30;

/** What a store NOTIFYs after a write. */
interface ChangePayload {
  from: string;
  /** Repositories written ("users", "rulesets", ...; "pools" for pool writes); "quiet" alone: nothing to signal. */
  repos: string[];
}

export interface PgStoreOptions extends PgOpenOptions {
  log?: PgLog;
}

/** The Store over one PostgreSQL database. */
export class PgStore implements Store {
  readonly backend = 'postgres';
  readonly location: string;
  readonly changes = new PgChangeFeed();
  /** This store's id in its notifications (its own come back to it and are ignored). */
  readonly id = randomBytes(8).toString('hex');

  readonly users: Repos['users'];
  readonly tokens: Repos['tokens'];
  readonly rulesets: Repos['rulesets'];
  readonly lists: Repos['lists'];
  readonly daemons: Repos['daemons'];
  readonly loadBalancing: Repos['loadBalancing'];
  readonly alerting: Repos['alerting'];
  readonly outbox: Repos['outbox'];

  /** Counters for tests and metrics. */
  readonly stats = { commits: 0, afterCommitRuns: 0, backgroundWrites: 0 };

  private readonly shared: PgShared;
  private readonly healthListeners: TxHealthEventListener[] = [];
  private readonly poolListeners: Array<() => void> = [];
  private listener: PgListener | undefined;
  /** Commits seen: this store's, and other stores' notifications and reconnections of the LISTEN connection. */
  private seen = 0;
  /** Epoch reads while the LISTEN connection is down (each one new). */
  private blind = 0;
  private isClosed = false;
  private readonly running = new Set<Promise<unknown>>();
  /** The end of the last write transaction queued on this replica (writes run one at a time, see runWrite). */
  private writeTail: Promise<void> = Promise.resolve();

  private constructor(
    readonly database: PgDatabase,
    private readonly notify: PgNotifyFactory,
    secret: Buffer,
    legacyLeft: boolean,
    private readonly log: PgLog | undefined,
  ) {
    this.location = redactUrl(database.target.url);
    this.shared = {
      secret,
      legacyLeft,
      epoch: () => this.changeEpoch(),
      verifiedKeys: new Map(),
      verifiedTokens: new Map(),
      stamps: new Map(),
      versions: new Map(),
      background: (fn) => this.background(fn),
    };
    this.users = this.route('users', {
      // A memo hit answers without a transaction (the memo as on SQLite).
      verifyKey: (email: string, key: string) => {
        const m = this.shared.verifiedKeys.get(keyMemoKey(email, key));
        return m !== undefined && m.epoch === this.changeEpoch() ? m.check : undefined;
      },
      verify: (email: string, key: string) => {
        const m = this.shared.verifiedKeys.get(keyMemoKey(email, key));
        return m !== undefined && m.epoch === this.changeEpoch() && m.check.outcome === 'ok' ? m.check.principal : undefined;
      },
    });
    this.tokens = this.route('tokens', {
      verify: (token: string) => {
        if (!isWellFormedToken(token)) return undefined;
        const m = this.shared.verifiedTokens.get(createHash('sha256').update(token).digest('base64'));
        return m !== undefined && m.epoch === this.changeEpoch() ? m.principal : undefined;
      },
    });
    this.rulesets = this.route('rulesets', {
      // A memo hit answers without a transaction, as verifyKey's: every cached GET of an entrypoint asks it, and
      // BEGIN and COMMIT around a remembered answer took 3 round trips (bench api: 95 us of server CPU per GET
      // against SQLite's 24). The stamp of a missing entrypoint (undefined) is read again, as on a miss.
      entrypointStamp: (level: Visibility, phase: string, version?: number) => {
        const m = this.shared.stamps.get(stampMemoKey(level, phase, version));
        return m !== undefined && m.epoch === this.changeEpoch() ? m.stamp : undefined;
      },
    });
    this.lists = this.route('lists', {}, {
      // A page of items is read per request: one statement (see poolRead).
      items: async (accountId: string, listId: string, options: { cursor?: string | undefined; perPage: number; search?: string | undefined }) => {
        const q = itemsQuery(accountId, listId, options);
        return itemsAnswer(q, await this.poolRead<ItemRow & { found: number | null }>(q.sql, q.args));
      },
    });
    this.daemons = this.route('daemons', {}, {
      // Asked by every hub after every change: one statement (see poolRead).
      deploymentFingerprint: async (accountId: string, zoneId: string | null) => (await this.poolRead<{ fp: string }>(FINGERPRINT_SQL, [accountId, zoneId]))[0]!.fp,
    });
    this.loadBalancing = this.route('loadBalancing', {}, {
      // Outside a transaction: one of its own (durability is PostgreSQL's either way).
      recordProbes: (probes: readonly ProbeRecord[]) => this.write((tx) => tx.loadBalancing.recordProbes(probes), { durability: 'relaxed' }),
    });
    this.alerting = this.route('alerting', {});
    this.outbox = this.route('outbox', {});
  }

  /**
   * Connects to `url` (migrating the schema, once across replicas), reads or
   * creates the installation's key-hashing secret, and starts listening for
   * other stores' changes.
   */
  static async open(url: string, notify: PgNotifyFactory, options: PgStoreOptions = {}): Promise<PgStore> {
    return PgStore.over(await PgDatabase.connect(url, options), notify, options.log);
  }

  /**
   * A store over an open database (closed with it on failure and by close()).
   * `notify` builds the notification repositories (notify's pgNotifyRepos:
   * the store may not import notify).
   */
  static async over(database: PgDatabase, notify: PgNotifyFactory, log?: PgLog): Promise<PgStore> {
    try {
      // Read first (a database opened read-only has it already); when missing,
      // ON CONFLICT DO NOTHING: replicas opening an empty database at once
      // agree on the first secret committed (the others wait on its row, then
      // insert nothing), as SQLite's INSERT OR IGNORE.
      const readSecret = async () => (await database.query<{ secret: Buffer }>('SELECT secret FROM auth_secret WHERE id = 1'))[0]?.secret;
      let secret = await readSecret();
      if (secret === undefined) {
        await database.query('INSERT INTO auth_secret (id, secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING', [randomBytes(32)]);
        secret = (await readSecret())!;
      }
      const legacy = (await database.query<{ n: number }>("SELECT count(*) AS n FROM api_keys WHERE scheme = 'scrypt' AND revoked_on IS NULL"))[0]!.n;
      const store = new PgStore(database, notify, secret, legacy > 0, log);
      store.listener = await database.listen([CHANGES_CHANNEL], {
        onNotify: (_channel, payload) => store.notified(payload),
        onReconnect: () => {
          store.seen++;
          store.changes.signal();
          for (const l of store.poolListeners) store.safely(l);
        },
      });
      return store;
    } catch (err) {
      await database.close();
      throw err;
    }
  }

  changeEpoch(): string {
    // While the LISTEN connection is down, other replicas' commits go unseen:
    // a value never returned before, so no memo is trusted meanwhile.
    if (this.listener?.pid === undefined) return `${this.seen}/blind${++this.blind}`;
    return String(this.seen);
  }

  onHealthEvent(listener: TxHealthEventListener): void {
    this.healthListeners.push(listener);
  }

  onPoolsWritten(listener: () => void): void {
    this.poolListeners.push(listener);
  }

  get closed(): boolean {
    return this.isClosed;
  }

  write<T>(fn: (tx: Repos) => Promise<T>, _options: WriteOptions = {}): Promise<T> {
    if (this.isClosed) return Promise.reject(closedError());
    return this.track(this.runWrite(fn));
  }

  read<T>(fn: (tx: Repos) => Promise<T>): Promise<T> {
    if (this.isClosed) return Promise.reject(closedError());
    return this.track(this.runRead(fn));
  }

  async writable(waitMs = 2000): Promise<string | undefined> {
    if (this.isClosed) return 'the store is closed';
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<string>((resolve) => {
      timer = setTimeout(() => resolve(`PostgreSQL ${this.database.target.description} did not answer within ${waitMs} ms`), waitMs);
    });
    const check = this.database
      .query<{ recovery: boolean; ro: string }>("SELECT pg_is_in_recovery() AS recovery, current_setting('default_transaction_read_only') AS ro")
      .then(
        ([r]) =>
          r!.recovery
            ? `PostgreSQL ${this.database.target.description} is a standby (in recovery): it takes no writes`
            : r!.ro === 'on'
              ? `PostgreSQL ${this.database.target.description} makes transactions read-only (default_transaction_read_only)`
              : undefined,
        (err: unknown) => (err as Error).message,
      );
    try {
      return await Promise.race([check, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    if (this.isClosed) return;
    this.isClosed = true;
    // The transactions already accepted run to their end; then the connections close.
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
    await this.changes.stop();
    await this.database.close();
  }

  /**
   * A read that is one statement runs on the pool as it is: a statement sees
   * one snapshot, so BEGIN and COMMIT around it (two more round trips) buy
   * nothing.
   */
  private poolRead<T extends pg.QueryResultRow>(sql: string, args: unknown[]): Promise<T[]> {
    if (this.isClosed) return Promise.reject(closedError());
    return this.track(this.database.query<T>(sql, args));
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.running.add(p);
    const done = (): void => void this.running.delete(p);
    p.then(done, done);
    return p;
  }

  /**
   * One write transaction at a time per replica, as SQLite's single writer:
   * under SERIALIZABLE, concurrent writers of one row (16 clients adding rules
   * to one ruleset) all but one fail with 40001 at each round and retry, so
   * the API bench measured 44 POST rule/s with 1,300-2,000 retries on one
   * replica against SQLite's 722/s. Queued here, the writers of one replica
   * never collide; only writers on different replicas can, and they retry.
   */
  private async runWrite<T>(fn: (tx: Repos) => Promise<T>): Promise<T> {
    const previous = this.writeTail;
    let release!: () => void;
    this.writeTail = new Promise<void>((resolve) => (release = resolve));
    await previous;
    try {
      return await this.runWriteNow(fn);
    } finally {
      release();
    }
  }

  private async runWriteNow<T>(fn: (tx: Repos) => Promise<T>): Promise<T> {
    let after: Array<() => void> = [];
    let touched = new Set<string>();
    const value = await this.database.write(async (client) => {
      // A fresh context per attempt: a retried body starts from nothing.
      after = [];
      touched = new Set();
      const result = await fn(this.context(client, after, touched));
      const payload: ChangePayload = { from: this.id, repos: changedRepos(touched) };
      await this.database.notify(CHANGES_CHANNEL, JSON.stringify(payload), client);
      return result;
    }, { attempts: WRITE_ATTEMPTS });
    this.seen++;
    this.stats.commits++;
    // Pool listeners are called by the load balancing repository (afterCommit).
    this.committed(changedRepos(touched), false);
    this.afterCommit(after);
    return value;
  }

  private async runRead<T>(fn: (tx: Repos) => Promise<T>): Promise<T> {
    const after: Array<() => void> = [];
    const value = await this.database.read((client) => fn(this.context(client, after, new Set())));
    this.afterCommit(after);
    return value;
  }

  /** Runs the final attempt's afterCommit callbacks (PgRepoContext.afterCommit). */
  private afterCommit(callbacks: ReadonlyArray<() => void>): void {
    for (const f of callbacks) {
      this.stats.afterCommitRuns++;
      this.safely(f);
    }
  }

  /** After a commit (this store's or another's): the feed, and for another's pool writes the pool listeners. */
  private committed(repos: readonly string[], remote: boolean): void {
    if (repos.length === 1 && repos[0] === 'quiet') return;
    this.changes.signal();
    if (remote && repos.includes(POOLS)) for (const l of this.poolListeners) this.safely(l);
  }

  /** A notification on CHANGES_CHANNEL. */
  private notified(text: string): void {
    let payload: ChangePayload | undefined;
    try {
      const p = JSON.parse(text) as Partial<ChangePayload>;
      if (typeof p.from === 'string' && Array.isArray(p.repos)) payload = { from: p.from, repos: p.repos.filter((r): r is string => typeof r === 'string') };
    } catch {
      // Not Moat's payload (someone else's NOTIFY on the channel): still a change, maybe.
    }
    if (payload?.from === this.id) return;
    this.seen++;
    // An unknown payload signals everything.
    this.committed(payload?.repos ?? [POOLS], true);
  }

  private safely(f: () => void): void {
    try {
      f();
    } catch (err) {
      this.log?.warn(`a listener after a commit failed: ${(err as Error).message}`);
    }
  }

  /** A small write after a read (see PgShared.background); tracked so close() waits for it. */
  private background(fn: (client: PgClient) => Promise<void>): void {
    if (this.isClosed) return;
    this.stats.backgroundWrites++;
    // Cannot reject: its failure is logged here.
    void this.track(
      this.database.write(fn).then(
        () => void this.seen++,
        (err: unknown) => this.log?.warn(`a background write failed (it is retried on the next occasion): ${(err as Error).message}`),
      ),
    );
  }

  /** The repositories bound to one transaction's client, recording which methods are called (for the notification). */
  private context(client: PgClient, after: Array<() => void>, touched: Set<string>): Repos {
    const ctx: { -readonly [K in keyof PgRepoContext]: PgRepoContext[K] } = {
      client,
      tx: undefined as unknown as Repos,
      healthListeners: this.healthListeners,
      afterCommit: (f) => after.push(f),
    };
    const record = <K extends keyof Repos>(name: K, repo: Repos[K]): Repos[K] =>
      new Proxy(repo, {
        get(target, prop, receiver) {
          const v = Reflect.get(target, prop, receiver) as unknown;
          if (typeof v !== 'function' || typeof prop !== 'string') return v;
          return (...args: unknown[]) => {
            if (!READS[name].has(prop)) touched.add(`${name}.${prop}`);
            return (v as (...a: unknown[]) => unknown).apply(target, args);
          };
        },
      });
    const n = this.notify(ctx);
    ctx.tx = {
      users: record('users', new PgUsersRepo(ctx, this.shared)),
      tokens: record('tokens', new PgTokensRepo(ctx, this.shared)),
      rulesets: record('rulesets', new PgRulesetsRepo(ctx, this.shared)),
      lists: record('lists', new PgListsRepo(ctx)),
      daemons: record('daemons', new PgDaemonsRepo(ctx)),
      loadBalancing: record('loadBalancing', new PgLoadBalancingRepo(ctx, this.poolListeners)),
      alerting: record('alerting', n.alerting),
      outbox: record('outbox', n.outbox),
    };
    return ctx.tx;
  }

  /**
   * A repository on the store: each method in a transaction of its own (read
   * or write, see READS), after `memos` had a chance to answer without one.
   */
  private route<K extends keyof Repos>(
    name: K,
    memos: Record<string, (...args: never[]) => unknown>,
    overrides: Record<string, (...args: never[]) => Promise<unknown>> = {},
  ): Repos[K] {
    const out: Record<string, (...args: unknown[]) => Promise<unknown>> = {};
    for (const prop of REPO_METHODS[name] as readonly string[]) {
      const override = overrides[prop] as ((...args: unknown[]) => Promise<unknown>) | undefined;
      if (override !== undefined) {
        out[prop] = override;
        continue;
      }
      const quick = memos[prop] as ((...args: unknown[]) => unknown) | undefined;
      const reads = READS[name].has(prop);
      out[prop] = (...args: unknown[]) => {
        const hit = quick?.(...args);
        if (hit !== undefined) return Promise.resolve(hit);
        const call = (tx: Repos): Promise<unknown> => (tx[name] as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[prop]!(...args);
        return reads ? this.read(call) : this.write(call);
      };
    }
    return out as unknown as Repos[K];
  }
}

/** The repositories a transaction wrote, as a notification names them. */
function changedRepos(touched: ReadonlySet<string>): string[] {
  const repos = new Set<string>();
  let loud = false;
  for (const t of touched) {
    if (POOL_WRITES.has(t)) repos.add(POOLS);
    if (!QUIET.has(t)) loud = true;
    repos.add(t.slice(0, t.indexOf('.')));
  }
  if (touched.size > 0 && !loud) return ['quiet'];
  return [...repos].sort();
}

function closedError(): MoatError {
  return new MoatError('STORE_OPEN', 'the store is closed');
}
