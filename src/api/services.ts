// The control plane's composition root: the store-backed services the routes
// call (auth, rulesets, lists, daemons), the control channel's hub and the
// change feed it listens to, and the background runners, built once over one
// database. Routes receive the services they need as plugin options; the
// server starts the runners when it listens and stops them when it closes.

import { HealthMonitor, type HealthMonitorOptions } from '../health/index.js';
import { Users, ListStore, Tokens, Daemons, LoadBalancingStore, type Database } from '../store/index.js';
import { SqliteChangeFeed, type ChangeFeed } from './change-feed.js';
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
  store: Database;
  /** The users repository (default: one over `store`). */
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
  /** Load balancing settings (`moat serve --monitor-min-interval`). */
  loadBalancing?: LoadBalancingOptions | undefined;
  /** The health monitor's settings (concurrency, clock; tests shorten them). */
  health?: Omit<HealthMonitorOptions, 'store' | 'logger'> | undefined;
}

/** The services of one control plane. */
export interface Services {
  readonly store: Database;
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
  /** Load balancer monitors, pools and their health. */
  readonly loadBalancing: LoadBalancingService;
  /** The probe scheduler: origins' health and its events (register listeners on `loadBalancing.store`). */
  readonly healthMonitor: HealthMonitor;
  /** Every background runner, not started: the server starts them once it listens. */
  readonly runners: Runners;
}

/** Builds the services over a database; nothing runs until `runners.start()`. */
export function createServices(options: ServicesOptions): Services {
  const { store, logger } = options;
  const limits: ApiLimits = { ...DEFAULT_API_LIMITS, ...(options.limits ?? {}) };
  const users = options.users ?? new Users(store);
  const listOperations = createListOperations({ lists: new ListStore(store), maxListItems: limits.maxListItems, logger });
  const changes = options.changes ?? new SqliteChangeFeed(store);
  const hub = new ChannelHub(store, changes, logger, options.channel);
  const lbStore = new LoadBalancingStore(store);
  const healthMonitor = new HealthMonitor({ ...(options.health ?? {}), store: lbStore, logger });
  return {
    store,
    limits,
    users,
    auth: new Auth(users, new Tokens(store, users), options.authLimit, (address, l) =>
      logger?.warn({ address, failures: l.maxFailures, windowSeconds: l.windowSeconds }, 'too many failed authentications: further failures from this address are answered 429 until the window ends'),
    ),
    rulesets: new RulesetService(store, limits),
    lists: new ListService(store, limits, () => listOperations.wake()),
    listOperations,
    daemons: new Daemons(store),
    loadBalancing: new LoadBalancingService(store, options.loadBalancing, lbStore),
    healthMonitor,
    changes,
    hub,
    // The feed starts before the hub subscribes to it; the hub stops first, closing its connections.
    runners: new Runners([listOperations, changes, hub, healthMonitor]),
  };
}
