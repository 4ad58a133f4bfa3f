// Authentication and authorisation of every request: an API token
// (`Authorization: Bearer`, Cloudflare's recommended scheme) or
// X-Auth-Email/X-Auth-Key (the legacy global-key scheme) mapped to a user,
// then the account_id or zone_id of the path checked against what that user
// (or the token's scope) may reach; a read-only token may not write. Failed
// credentials are counted per client address (see auth-limit.ts).

import type { FastifyRequest } from 'fastify';
import { MoatError, type ErrorName } from '../errors/index.js';
import { isId, isWellFormedEmail, isWellFormedKey, isWellFormedToken, type Principal, type TokensRepo, type UsersRepo } from '../store/index.js';
import { apiError } from './api-error.js';
import { DEFAULT_AUTH_LIMIT, FailureLimiter, TokenBucket, type AuthLimitOptions } from './auth-limit.js';
import { shownPath } from './request.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the server's onRequest hook before any handler runs. */
    principal: Principal | null;
  }
}

/** The level a request addresses: an account, or a zone (with its account). */
export interface Scope {
  readonly level: 'account' | 'zone';
  readonly accountId: string;
  readonly zoneId: string | null;
}

function header(req: FastifyRequest, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** An error answered with a `Retry-After` header (429 over the failure limit, 503 when legacy checks are busy). */
export class RetryLaterError extends MoatError {
  constructor(
    name: ErrorName,
    message: string,
    /** Seconds, for the Retry-After header. */
    readonly retryAfter: number,
  ) {
    super(name, message);
  }
}

/** Methods that only read: all a read-only token may use. */
const READ_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** The principal of a bearer token; throws Cloudflare's errors for a malformed or unknown one. */
async function authenticateToken(authorization: string, tokens: TokensRepo): Promise<Principal> {
  const m = /^Bearer +(\S+)\s*$/i.exec(authorization);
  if (m === null || !isWellFormedToken(m[1]!)) {
    throw apiError('AUTH_MISSING_HEADERS', 'Invalid request headers', { chain: [apiError('AUTH_BAD_AUTHORIZATION_HEADER', 'Invalid format for Authorization header')] });
  }
  const p = await tokens.verify(m[1]!);
  if (p === undefined) throw apiError('AUTH_INVALID_TOKEN', 'Invalid API Token');
  return p;
}

/**
 * The principal of a request; throws the reference's errors for missing,
 * malformed or unknown credentials, and 403/7402 for a write with a read-only
 * token. X-Auth-Email/X-Auth-Key win when both schemes are sent.
 */
export async function authenticate(req: FastifyRequest, users: UsersRepo, tokens: TokensRepo, mayCheckScrypt: () => boolean = () => true): Promise<Principal> {
  const email = header(req, 'x-auth-email');
  const key = header(req, 'x-auth-key');
  const authorization = header(req, 'authorization');
  if ((email === undefined || email === '') && (key === undefined || key === '') && authorization !== undefined && authorization !== '') {
    const p = await authenticateToken(authorization, tokens);
    if (p.readOnly && !READ_METHODS.has(req.method)) {
      throw apiError('AUTH_TOKEN_READ_ONLY', `this API token is read-only: ${req.method} needs a token with edit access`);
    }
    return p;
  }
  if (email === undefined || key === undefined || email === '' || key === '') {
    throw apiError('AUTH_MISSING_HEADERS', 'Invalid request headers: send Authorization: Bearer <API token>, or X-Auth-Email and X-Auth-Key', {
      hint: 'send Authorization: Bearer <token>, or X-Auth-Email and X-Auth-Key',
    });
  }
  // Cloudflare's shape: 6003 "Invalid request headers" explained by 6102/6103 in error_chain.
  if (!isWellFormedEmail(email)) {
    throw apiError('AUTH_MISSING_HEADERS', 'Invalid request headers', { chain: [apiError('AUTH_BAD_EMAIL_HEADER', 'Invalid format for X-Auth-Email header')] });
  }
  if (!isWellFormedKey(key)) {
    throw apiError('AUTH_MISSING_HEADERS', 'Invalid request headers', { chain: [apiError('AUTH_BAD_KEY_HEADER', 'Invalid format for X-Auth-Key header')] });
  }
  const r = await users.verifyKey(email, key, mayCheckScrypt);
  if (r.outcome === 'ok') return r.principal;
  if (r.outcome === 'legacy-deferred') {
    throw new RetryLaterError('AUTH_LEGACY_BUSY', 'This key is still stored with the old scrypt hash and the server is checking as many of those as it allows; retry shortly', 1);
  }
  throw apiError('AUTH_UNKNOWN_KEY', 'Unknown X-Auth-Key or X-Auth-Email');
}

/** Errors that mean "these credentials are wrong": what the failure limit counts. */
const FAILED_CREDENTIALS = new Set<ErrorName>(['AUTH_UNKNOWN_KEY', 'AUTH_INVALID_TOKEN']);

function badId(req: FastifyRequest): never {
  throw apiError('API_BAD_IDENTIFIER', `Could not route to ${shownPath(req.url)}, perhaps your object identifier is invalid?`);
}

/**
 * The scope of a request from its `account_id` or `zone_id` path parameter,
 * after checking the principal may reach it. A zone is reachable through its
 * account or through a grant of that zone.
 */
export async function scopeOf(req: FastifyRequest, principal: Principal, users: UsersRepo): Promise<Scope> {
  const params = req.params as { account_id?: string; zone_id?: string };
  if (params.account_id !== undefined) {
    if (!isId(params.account_id)) badId(req);
    if (!principal.accounts.has(params.account_id)) throw apiError('AUTH_FORBIDDEN', 'Authentication error');
    return { level: 'account', accountId: params.account_id, zoneId: null };
  }
  if (params.zone_id !== undefined) {
    if (!isId(params.zone_id)) badId(req);
    const granted = principal.zones.get(params.zone_id);
    const account = granted ?? (await users.zoneAccount(params.zone_id));
    if (account === undefined || (granted === undefined && !principal.accounts.has(account))) {
      throw apiError('AUTH_FORBIDDEN', 'Authentication error');
    }
    return { level: 'zone', accountId: account, zoneId: params.zone_id };
  }
  throw apiError('API_NO_ROUTE', 'No route for that URI');
}

/** Throws 7003 unless `id` is a 32-hex identifier (ruleset, rule, list, item, operation ids). */
export function requireId(req: FastifyRequest, id: string): void {
  if (!isId(id)) badId(req);
}

/** The authenticated principal of a request (set by the onRequest hook). */
export function principalOf(req: FastifyRequest): Principal {
  if (req.principal === null) throw apiError('AUTH_MISSING_HEADERS', 'Invalid request headers');
  return req.principal;
}

/** Authentication and scopes over one set of users: what the server's hook and the routes call. */
export class Auth {
  /** Failed credentials per client address. */
  readonly failures: FailureLimiter;
  private readonly limit: AuthLimitOptions;
  /** Server-wide budget of scrypt checks (keys not yet re-hashed): 2 a second. */
  private readonly scryptBudget: TokenBucket;

  constructor(
    readonly users: UsersRepo,
    readonly tokens: TokensRepo,
    limit: Partial<AuthLimitOptions> = {},
    /** Told once per window when an address reaches the limit (the server logs it: an operator wants to see a flood). */
    private readonly onLimited: (address: string, limit: AuthLimitOptions) => void = () => {},
  ) {
    this.limit = { ...DEFAULT_AUTH_LIMIT, ...limit };
    this.failures = new FailureLimiter(this.limit);
    this.scryptBudget = new TokenBucket(2, 2);
  }

  /**
   * The principal of a request's credentials (see authenticate). An address
   * over the failure limit still gets in with correct credentials: their
   * check costs microseconds, and clients behind one address (every local
   * client of a loopback listener) must not be locked out by one of them.
   * Its failures are answered 429 with Retry-After instead of 403, and it may
   * not spend the scrypt budget.
   */
  async authenticate(req: FastifyRequest): Promise<Principal> {
    const address = req.ip;
    const limited = this.failures.retryAfter(address) > 0;
    try {
      return await authenticate(req, this.users, this.tokens, () => !limited && this.scryptBudget.take());
    } catch (err) {
      if (!(err instanceof MoatError) || !(FAILED_CREDENTIALS.has(err.errorName) || (limited && err.errorName === 'AUTH_LEGACY_BUSY'))) throw err;
      if (this.failures.fail(address)) this.onLimited(address ?? '?', this.limit);
      const wait = this.failures.retryAfter(address);
      if (limited && wait > 0) {
        throw new RetryLaterError('AUTH_TOO_MANY_FAILURES', `Too many failed authentications from this address; retry after ${wait} seconds`, wait);
      }
      throw err;
    }
  }

  /** The scope of an authenticated request's path (see scopeOf). */
  scope(req: FastifyRequest): Promise<Scope> {
    return scopeOf(req, principalOf(req), this.users);
  }
}
