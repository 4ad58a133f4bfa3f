// The control plane's composition root: the store-backed services the routes
// call (auth, rulesets, lists) and the background runners, built once over one
// database. Routes receive the services they need as plugin options; the
// server starts the runners when it listens and stops them when it closes.

import { Users, ListStore, Tokens, type Database } from '../store/index.js';
import { Auth } from './auth.js';
import type { AuthLimitOptions } from './auth-limit.js';
import { DEFAULT_API_LIMITS, type ApiLimits } from './limits.js';
import { createListOperations, type ListOperationsRunner } from './list-operations.js';
import { ListService } from './lists-service.js';
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
  /** Every background runner, not started: the server starts them once it listens. */
  readonly runners: Runners;
}

/** Builds the services over a database; nothing runs until `runners.start()`. */
export function createServices(options: ServicesOptions): Services {
  const { store, logger } = options;
  const limits: ApiLimits = { ...DEFAULT_API_LIMITS, ...(options.limits ?? {}) };
  const users = options.users ?? new Users(store);
  const listOperations = createListOperations({ lists: new ListStore(store), maxListItems: limits.maxListItems, logger });
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
    runners: new Runners([listOperations]),
  };
}
