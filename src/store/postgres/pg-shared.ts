// What the PostgreSQL repositories of one PgStore share across transactions:
// the installation's key-hashing secret (read once at open), the change
// epoch, the memos of verified keys and tokens and of entrypoint stamps
// (trusted only while the epoch is unchanged, as on SQLite), the cache of
// parsed versions (immutable, keyed by their row's random token), and a way
// to run a small write after a read (a legacy key re-hashed on use).

import type { KeyCheck, Principal } from '../users.js';
import type { VersionRow, VersionStamp } from '../rulesets.js';
import type { PgClient } from './pg-database.js';

/** Entries a memo holds at most (emptied when full, as the SQLite repositories do). */
export const MEMO_LIMIT = 10_000;
/** Parsed versions kept (as RulesetStore's VERSION_CACHE_SIZE). */
export const VERSION_CACHE_SIZE = 512;

export interface PgShared {
  /** The HMAC key of this installation's key hashes (table auth_secret). */
  readonly secret: Buffer;
  /** Whether any key row still holds a scrypt hash (only goes from true to false). */
  legacyLeft: boolean;
  /** The store's change epoch (see Store.changeEpoch). */
  epoch(): string;
  readonly verifiedKeys: Map<string, { epoch: string; check: KeyCheck }>;
  readonly verifiedTokens: Map<string, { epoch: string; principal: Principal }>;
  readonly stamps: Map<string, { epoch: string; stamp: VersionStamp | undefined }>;
  readonly versions: Map<string, VersionRow>;
  /** Runs `fn` later in a write transaction of its own; a failure is logged, never thrown at the caller. */
  background(fn: (client: PgClient) => Promise<void>): void;
}

/** Remembers `value` under `key`, emptying the memo when it is full. */
export function memo<V>(map: Map<string, V>, key: string, value: V): void {
  if (map.size >= MEMO_LIMIT) map.clear();
  map.set(key, value);
}
