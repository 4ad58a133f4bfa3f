// The control plane's composition root: the store-backed services the routes
// call (auth, rulesets, lists, daemons), the control channel's hub and the
// change feed it listens to, and the background runners, built once over one
// Store (src/store/types.ts; SQLite's is made here from a Database), with
// notifications (policies, the health listener, the delivery worker). Routes receive the services they need as plugin options; the
// server starts the runners when it listens and stops them when it closes.

import { dirname, join } from 'node:path';
import { HealthMonitor, type HealthMonitorOptions } from '../health/index.js';
import { DeliveryWorker, DeprecationNotices, Notifier, createMailer, sqliteNotifyRepos, type Clock, type LegacyPools, type PoolDirectory, type Resolver } from '../notify/index.js';
import { Database, SqliteStore, type Daemons, type Store, type Users } from '../store/index.js';
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
  /** The store, or an SQLite database to make one of. */
  store: SqliteStore | Database;
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
  /** Where emails are spooled without SMTP (default <data dir>/mail-spool). */
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
  /**
   * The SQLite database behind `store`, for the services not yet on the
   * asynchronous Store (issue #20: they move to it one by one).
   */
  readonly database: Database;
  readonly limits: ApiLimits;
  readonly users: Users;
  readonly auth: Auth;
  readonly rulesets: RulesetService;
  readonly lists: ListService;
  /** The runner that applies queued list item writes. */
  readonly listOperations: ListOperationsRunner;
  /** Daemons of the control channel: identities and fleet status. */
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

/** Builds the services over a store; nothing runs until `runners.start()`. */
export function createServices(options: ServicesOptions): Services {
  const { logger } = options;
  const n = options.notify ?? {};
  const sqlite =
    options.store instanceof Database ? new SqliteStore(options.store, (database, pools) => sqliteNotifyRepos(database, n.pools ?? pools), { users: options.users }) : options.store;
  const store = sqlite.database;
  const limits: ApiLimits = { ...DEFAULT_API_LIMITS, ...(options.limits ?? {}) };
  const users = sqlite.sync.users;
  const listOperations = createListOperations({ lists: sqlite.lists, maxListItems: limits.maxListItems, logger });
  const changes: ChangeFeed = options.changes ?? sqlite.changes;
  const hub = new ChannelHub(store, changes, logger, options.channel);
  const lbStore = sqlite.sync.loadBalancing;
  const healthMonitor = new HealthMonitor({ ...(options.health ?? {}), store: sqlite.loadBalancing, logger });
  const mailer = createMailer({ smtpUrl: n.smtpUrl, from: n.mailFrom ?? DEFAULT_MAIL_FROM, spoolDir: n.spoolDir ?? join(dirname(store.file), 'mail-spool') });
  const delivery = new DeliveryWorker({
    store: sqlite,
    mailer,
    clock: n.clock,
    random: n.random,
    leaseMs: n.leaseMs,
    allowPrivateWebhooks: n.allowPrivateWebhooks,
    logger,
    deprecation:
      n.deprecationIntervalMs === 0 ? undefined : new DeprecationNotices(store, n.legacyPools ?? lbStore, n.deprecationIntervalMs),
  });
  const notifier = new Notifier(n.clock ?? { now: () => Date.now() }, () => setImmediate(() => delivery.wake()));
  // Health edges queue their notifications in the transaction that records them (issue #18 item 9).
  sqlite.onHealthEvent(notifier.onHealthEvent);
  // A legacy address set on a pool is told of the deprecation at once, not at the next periodic check (a minute later).
  lbStore.onPoolsWritten(() => setImmediate(() => delivery.legacyChanged()));
  return {
    store: sqlite,
    database: store,
    limits,
    users,
    auth: new Auth(sqlite.users, sqlite.tokens, options.authLimit, (address, l) =>
      logger?.warn({ address, failures: l.maxFailures, windowSeconds: l.windowSeconds }, 'too many failed authentications: further failures from this address are answered 429 until the window ends'),
    ),
    rulesets: new RulesetService(store, limits),
    lists: new ListService(sqlite.lists, limits, () => listOperations.wake()),
    listOperations,
    daemons: sqlite.sync.daemons,
    loadBalancing: new LoadBalancingService(sqlite.loadBalancing, options.loadBalancing, lbStore),
    healthMonitor,
    changes,
    hub,
    alerting: new AlertingService(sqlite.alerting, n.allowPrivateWebhooks === true, n.resolver),
    notifier,
    delivery,
    // The feed starts before the hub subscribes to it; the hub stops first, closing its connections.
    runners: new Runners([listOperations, changes, hub, healthMonitor, delivery]),
  };
}
