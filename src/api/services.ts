// The control plane's composition root: the store-backed services the routes
// call (auth, rulesets, lists, daemons), the control channel's hub and the
// change feed it listens to, and the background runners, built once over one
// Store (src/store/types.ts), of any backend (SQLite's is made here from a
// Database), with notifications (policies, the health listener, the delivery
// worker). Routes receive the services they need as plugin options; the
// server starts the runners when it listens and stops them when it closes.
// What only SQLite has (its Database, the synchronous repositories tests and
// SQLite's tools use) is reachable only when the store is a SqliteStore.

import { dirname, join } from 'node:path';
import { HealthMonitor, ProbeShares, type HealthMonitorOptions } from '../health/index.js';
import { DeliveryWorker, DeprecationNotices, Notifier, createMailer, sqliteNotifyRepos, type Clock, type LegacyPools, type PoolDirectory, type Resolver } from '../notify/index.js';
import { Database, Leases, PgStore, SqliteStore, type Daemons, type Store, type Users } from '../store/index.js';
import { AlertingService } from './alerting-service.js';
import type { ChangeFeed } from './change-feed.js';
import { ChannelHub, type HubOptions } from './channel-hub.js';
import { Auth } from './auth.js';
import type { AuthLimitOptions } from './auth-limit.js';
import { DEFAULT_API_LIMITS, type ApiLimits } from './limits.js';
import { createListOperations, type ListOperationsRunner } from './list-operations.js';
import { ListService } from './lists-service.js';
import { LoadBalancingService, type LoadBalancingOptions } from './load-balancing-service.js';
import { Runners, type RunnerLogger } from './runner.js';
import { RulesetService } from './rulesets-service.js';

/** What the services are built from. */
export interface ServicesOptions {
  /** The store (any backend), or an SQLite database to make one of. */
  store: Store | Database;
  /** The users repository of an SQLite database given as `store` (default: a new one). */
  users?: Users | undefined;
  limits?: Partial<ApiLimits> | undefined;
  /** The failed-authentication limit (default DEFAULT_AUTH_LIMIT). */
  authLimit?: Partial<AuthLimitOptions> | undefined;
  /** Where the runners report (default: nowhere). */
  logger?: RunnerLogger | undefined;
  /** The control channel's settings (heartbeat, hello timeout, per-address cap). */
  channel?: HubOptions | undefined;
  /** Where the hub learns of commits (default: this database's own feed). */
  changes?: ChangeFeed | undefined;
  /** Notification settings (SMTP, private webhooks, the pools policies may name). */
  notify?: NotifyOptions | undefined;
  /** Load balancing settings (`moat serve --monitor-min-interval`). */
  loadBalancing?: LoadBalancingOptions | undefined;
  /** The health monitor's settings (concurrency, clock; tests shorten them). */
  health?: Omit<HealthMonitorOptions, 'store' | 'logger'> | undefined;
}

/** Settings of notifications. */
export interface NotifyOptions {
  /** Which pools exist (for policies' pool_id filters); default: none, until the pools store is wired. */
  pools?: PoolDirectory | undefined;
  /** SMTP server of emails (smtp://, smtps://); without it emails are .eml files in <data dir>/mail-spool. */
  smtpUrl?: string | undefined;
  /** From: of emails. */
  mailFrom?: string | undefined;
  /** Where emails are spooled without SMTP (default <data dir>/mail-spool on SQLite; required on other backends without smtpUrl). */
  spoolDir?: string | undefined;
  /** Allow webhooks to loopback, link-local and private addresses (`--allow-private-webhooks`). */
  allowPrivateWebhooks?: boolean | undefined;
  /** The delivery schedule's clock and jitter (tests). */
  clock?: Clock | undefined;
  random?: (() => number) | undefined;
  leaseMs?: number | undefined;
  /** The pools that still have a legacy notification_email (deprecation notices); default: none, until the pools store is wired. */
  legacyPools?: LegacyPools | undefined;
  /** Milliseconds between two deprecation notices to one address (default a day; 0: no notices). */
  deprecationIntervalMs?: number | undefined;
  /** Resolver of webhook hosts (tests). */
  resolver?: Resolver | undefined;
}

/** From: of notification emails when none is configured. */
export const DEFAULT_MAIL_FROM = 'Moat notifications <notifications@moat.local>';

/** The services of one control plane. */
export interface Services {
  readonly store: Store;
  /** SQLite only (tests, SQLite's tools): the database behind `store`; throws on another backend. */
  readonly database: Database;
  readonly limits: ApiLimits;
  /** SQLite only: the synchronous users repository; throws on another backend. */
  readonly users: Users;
  readonly auth: Auth;
  readonly rulesets: RulesetService;
  readonly lists: ListService;
  /** The runner that applies queued list item writes. */
  readonly listOperations: ListOperationsRunner;
  /** SQLite only: the synchronous daemons repository (identities and fleet status; the API uses store.daemons); throws on another backend. */
  readonly daemons: Daemons;
  /** Signals after commits, here or in other processes. */
  readonly changes: ChangeFeed;
  /** The control channel's server end; the server attaches it to its listener. */
  readonly hub: ChannelHub;
  /** Notification policies, webhook destinations (alerting v3). */
  readonly alerting: AlertingService;
  /** The health event listener that queues notifications (the health monitor calls it). */
  readonly notifier: Notifier;
  /** The notification delivery worker (a runner). */
  readonly delivery: DeliveryWorker;
  /** Load balancer monitors, pools and their health. */
  readonly loadBalancing: LoadBalancingService;
  /** The probe scheduler: origins' health and its events (register listeners with `store.onHealthEvent`). */
  readonly healthMonitor: HealthMonitor;
  /** Every background runner, not started: the server starts them once it listens. */
  readonly runners: Runners;
}

/** What only an SQLite store has; a getter of another backend's services throws. */
function sqliteOnly<T>(sqlite: SqliteStore | undefined, what: string, get: (s: SqliteStore) => T): () => T {
  return () => {
    if (sqlite === undefined) throw new Error(`${what} exists only on SQLite stores; use the Store's asynchronous repositories`);
    return get(sqlite);
  };
}

/** Builds the services over a store; nothing runs until `runners.start()`. */
export function createServices(options: ServicesOptions): Services {
  const { logger } = options;
  const n = options.notify ?? {};
  const store: Store =
    options.store instanceof Database ? new SqliteStore(options.store, (database, pools) => sqliteNotifyRepos(database, n.pools ?? pools), { users: options.users }) : options.store;
  const sqlite = store instanceof SqliteStore ? store : undefined;
  const limits: ApiLimits = { ...DEFAULT_API_LIMITS, ...(options.limits ?? {}) };
  const listOperations = createListOperations({ lists: store.lists, maxListItems: limits.maxListItems, logger });
  const changes: ChangeFeed = options.changes ?? store.changes;
  const hub = new ChannelHub(store, changes, logger, options.channel);
  // On PostgreSQL the replicas share the probes through leases (issue #20); on SQLite this process probes everything.
  const shares = store instanceof PgStore ? new ProbeShares(new Leases(store.database)) : undefined;
  const healthMonitor = new HealthMonitor({ shares, ...(options.health ?? {}), store: store.loadBalancing, logger });
  const spoolDir = n.spoolDir ?? (sqlite === undefined ? undefined : join(dirname(sqlite.database.file), 'mail-spool'));
  if (spoolDir === undefined && n.smtpUrl === undefined) throw new Error(`notify.spoolDir or notify.smtpUrl is needed with a ${store.backend} store (emails go somewhere)`);
  const mailer = createMailer({ smtpUrl: n.smtpUrl, from: n.mailFrom ?? DEFAULT_MAIL_FROM, spoolDir: spoolDir ?? '', stallMs: Math.floor((n.leaseMs ?? 60_000) / 4) });
  const delivery = new DeliveryWorker({
    store,
    mailer,
    clock: n.clock,
    random: n.random,
    leaseMs: n.leaseMs,
    allowPrivateWebhooks: n.allowPrivateWebhooks,
    logger,
    deprecation: n.deprecationIntervalMs === 0 ? undefined : new DeprecationNotices(store, n.legacyPools ?? store.loadBalancing, n.deprecationIntervalMs),
  });
  const notifier = new Notifier(n.clock ?? { now: () => Date.now() }, () => setImmediate(() => delivery.wake()));
  // Health edges queue their notifications in the transaction that records them (issue #18 item 9).
  store.onHealthEvent(notifier.onHealthEvent);
  // A legacy address set on a pool is told of the deprecation at once, not at the next periodic check (a minute later).
  store.onPoolsWritten(() => setImmediate(() => delivery.legacyChanged()));
  const database = sqliteOnly(sqlite, 'services.database', (s) => s.database);
  const users = sqliteOnly(sqlite, 'services.users', (s) => s.sync.users);
  const daemons = sqliteOnly(sqlite, 'services.daemons', (s) => s.sync.daemons);
  return {
    store,
    get database() {
      return database();
    },
    limits,
    get users() {
      return users();
    },
    auth: new Auth(store.users, store.tokens, options.authLimit, (address, l) =>
      logger?.warn({ address, failures: l.maxFailures, windowSeconds: l.windowSeconds }, 'too many failed authentications: further failures from this address are answered 429 until the window ends'),
    ),
    rulesets: new RulesetService(store, limits),
    lists: new ListService(store.lists, limits, () => listOperations.wake()),
    listOperations,
    get daemons() {
      return daemons();
    },
    loadBalancing: new LoadBalancingService(store.loadBalancing, options.loadBalancing, sqlite?.sync.loadBalancing),
    healthMonitor,
    changes,
    hub,
    alerting: new AlertingService(store.alerting, n.allowPrivateWebhooks === true, n.resolver),
    notifier,
    delivery,
    // The feed starts before the hub subscribes to it; the hub stops first, closing its connections.
    runners: new Runners([listOperations, changes, hub, healthMonitor, delivery]),
  };
}
