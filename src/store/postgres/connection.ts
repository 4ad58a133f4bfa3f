// Where the PostgreSQL store connects, and what its failures mean: the URL
// (from --database or MOAT_DATABASE_URL) checked and described without its
// password, the pg client configuration every connection shares, and the
// mapping of pg's errors onto the registry (8021 unreachable, 8022 login
// refused). A password never reaches a message: the description is built from
// the URL's host, port and database only, and every message is scrubbed of the
// password in case a driver ever echoes it.

import type * as pg from 'pg';
import { pgModule } from './pg-module.js';
import { MoatError } from '../../errors/index.js';

/** The environment variable that selects PostgreSQL when --database is not given. */
export const DATABASE_URL_ENV = 'MOAT_DATABASE_URL';

/** A checked postgres:// URL and how to name its server in messages. */
export interface PgTarget {
  /** The URL as given (with its password: for the driver only, never for a message). */
  readonly url: string;
  /** `host:port/database`, what messages and logs name. */
  readonly description: string;
  /** The password in the URL, to scrub from messages ('' when none). */
  readonly password: string;
}

/** The URL with its password replaced by `***` (for a message about a bad URL). */
export function redactUrl(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:@/?#]*:)[^@/?#]*@/i, '$1***@');
}

/**
 * The database URL Moat should use: `option` (--database) when given, else
 * MOAT_DATABASE_URL, else undefined (SQLite in the data directory).
 */
export function databaseUrlFrom(option: string | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (option !== undefined && option !== '') return option;
  const fromEnv = env[DATABASE_URL_ENV];
  return fromEnv === undefined || fromEnv === '' ? undefined : fromEnv;
}

/** Checks a postgres:// (or postgresql://) URL; 8020 naming it (password hidden) when it is not one. */
export function parseTarget(url: string): PgTarget {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new MoatError('STORE_BAD_URL', `${redactUrl(url)}: not a URL; give postgres://user:password@host:port/database`);
  }
  if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:') {
    throw new MoatError('STORE_BAD_URL', `${redactUrl(url)}: a database URL starts with postgres:// or postgresql://, not ${u.protocol}//`);
  }
  const password = decodeURIComponent(u.password);
  // host=/path in the query string is a Unix socket directory (libpq's convention, which pg follows).
  const socketDir = u.searchParams.get('host');
  const host = socketDir ?? (u.hostname === '' ? 'localhost' : u.hostname);
  const port = u.port === '' ? '5432' : u.port;
  const database = decodeURIComponent(u.pathname.slice(1)) || decodeURIComponent(u.username) || 'postgres';
  return { url, description: `${host}:${port}/${database}`, password };
}

const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'ENOENT']);
// SQLSTATEs of a server that is going away or not yet there: admin_shutdown,
// crash_shutdown, cannot_connect_now, and class 08 (connection exceptions).
const GONE_STATES = new Set(['57P01', '57P02', '57P03']);
const LOGIN_STATES = new Set(['28P01', '28000', '3D000']);

/** SQLSTATEs after which a transaction can simply be run again: serialization_failure, deadlock_detected. */
export const RETRYABLE_STATES: ReadonlySet<string> = new Set(['40001', '40P01']);

/** The SQLSTATE (or Node error code) of an error, '' when none. */
export function errorCode(err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : '';
}

function scrub(text: string, password: string): string {
  return password === '' ? text : text.split(password).join('***');
}

/** Whether `err` says the server is unreachable or the connection was lost. */
export function isConnectionError(err: unknown): boolean {
  const code = errorCode(err);
  if (NETWORK_CODES.has(code) || GONE_STATES.has(code) || code.startsWith('08')) return true;
  const message = err instanceof Error ? err.message : '';
  // A database closed to new sessions (ALTER DATABASE ... ALLOW_CONNECTIONS
  // false, as during maintenance) answers 55000, a class shared with unrelated
  // SQL errors: only its own message makes it "unreachable". Without this the
  // same outage answered 503 or 500 depending on whether the pool still held
  // a (terminated) connection when the request came.
  if (code === '55000' && /is not currently accepting connections/i.test(message)) return true;
  return /Connection terminated|connection timeout|timeout expired|Client has encountered a connection error|not queryable/i.test(message);
}

/**
 * The registry error for a pg failure: 8021 when the server cannot be reached
 * or the connection was lost, 8022 when it refused the login, the error itself
 * otherwise (SQL errors are the caller's: a unique violation is an answer).
 */
export function mapPgError(err: unknown, target: PgTarget): unknown {
  if (err instanceof MoatError) return err;
  const message = scrub(err instanceof Error ? err.message : String(err), target.password);
  const code = errorCode(err);
  if (LOGIN_STATES.has(code)) {
    return new MoatError('STORE_LOGIN_REFUSED', `the PostgreSQL server at ${target.description} refused the login: ${message}`);
  }
  if (isConnectionError(err)) {
    return new MoatError('STORE_UNREACHABLE', `cannot reach the PostgreSQL server at ${target.description}: ${message || code}`);
  }
  return err;
}

// BIGINT (int8) comes back as a JS number, as SQLite's INTEGER does from
// better-sqlite3 (pg's default is a string, to be safe past 2^53): every
// integer Moat stores (versions, counters, millisecond times, 47-bit tokens)
// is below 2^53, and one that is not is an error rather than a rounded value.
function parseInt8(text: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new RangeError(`BIGINT ${text} is beyond JavaScript's safe integers`);
  return n;
}

const INT8_OID = 20;

/** Type parsers of every Moat connection: pg's, but int8 as a number. */
export const TYPES: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === INT8_OID && format !== 'binary' ? parseInt8 : pgModule().types.getTypeParser(oid, format)) as pg.CustomTypesConfig['getTypeParser'],
};

/** The pg client configuration for `target` (shared by the pool and the listener). */
export function clientConfig(target: PgTarget, applicationName: string, connectTimeoutMs: number): pg.ClientConfig {
  return {
    connectionString: target.url,
    application_name: applicationName,
    // pg waits forever for a connection by default; a replica must fail over instead.
    connectionTimeoutMillis: connectTimeoutMs,
    // Detects a server that vanished without closing the connection (host down, partition).
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    types: TYPES,
  };
}
