// Users, their API keys and the accounts and zones they may reach. Keys are
// long random strings, not passwords: each is stored as an HMAC-SHA256 under a
// per-installation secret (table auth_secret, in the owner-only database), so
// checking one costs microseconds, and a key is found by its hash before its
// email is compared, so a wrong key costs the same whether or not the email
// exists. Keys written by earlier versions hold a salted scrypt hash until
// their next successful use re-hashes them; the caller decides whether such a
// slow check may run now (see verifyKey). Rows are read on every request, so
// a revocation from the CLI takes effect at once.

import { createHmac, hash, randomBytes, scryptSync, timingSafeEqual } from 'node:crypto';
import { MoatError } from '../errors/index.js';
import type { Database } from './database.js';
import { isId, newId, nowStamp } from './ids.js';

/** Who a request is: the user, the key or token used, and what it may reach. */
export interface Principal {
  readonly userId: string;
  readonly email: string;
  /** The id of the key (X-Auth-Key) or of the token (Authorization: Bearer) used. */
  readonly keyId: string;
  /** How the request authenticated. */
  readonly via: 'key' | 'token';
  /** A read-only token: the request may read, not write. */
  readonly readOnly: boolean;
  /** Accounts the user may reach (and every zone in them). */
  readonly accounts: ReadonlySet<string>;
  /** Zones granted one by one, with the account each belongs to. */
  readonly zones: ReadonlyMap<string, string>;
}

/** A user as the CLI lists it. */
export interface UserInfo {
  id: string;
  email: string;
  created_on: string;
  accounts: string[];
  zones: { id: string; account_id: string }[];
  keys: { id: string; hint: string; created_on: string; revoked_on: string | null }[];
}

const EMAIL = /^[^\s@]+@[^\s@]+$/;
const KEY = /^[A-Za-z0-9_-]{16,128}$/;
const SCRYPT_KEYLEN = 32;

/** How a key row's hash was made: the current scheme, or the one rows written before schema 4 keep until re-hashed. */
export const HMAC_SCHEME = 'hmac-sha256';
export const LEGACY_SCHEME = 'scrypt';

/** The legacy hash: salted scrypt (about 40-60 ms a check, on the calling thread). */
export function scryptHash(key: string, salt: Buffer): Buffer {
  return scryptSync(key, salt, SCRYPT_KEYLEN);
}

/** The legacy (scrypt) key row among `rows` that `key` verifies against, if any (both backends). */
export function legacyMatch<K extends { salt: Buffer; hash: Buffer }>(rows: readonly K[], key: string): K | undefined {
  for (const k of rows) if (timingSafeEqual(scryptHash(key, k.salt), k.hash)) return k;
  return undefined;
}

/** Compared against when no row matches, so a miss does the same work as a hit. */
export const DUMMY_HASH = randomBytes(32);
export const NO_SALT = Buffer.alloc(0);

/** What checking an email and key found. */
export type KeyCheck =
  | { readonly outcome: 'ok'; readonly principal: Principal }
  | { readonly outcome: 'unknown' }
  /** The email has keys still stored as scrypt hashes, and the caller did not allow a scrypt check now. */
  | { readonly outcome: 'legacy-deferred' };

/** True when a key has the accepted shape (16-128 of A-Z a-z 0-9 _ -). */
export function isWellFormedKey(key: string): boolean {
  return KEY.test(key);
}

/** True when an email has the accepted shape. */
export function isWellFormedEmail(email: string): boolean {
  return EMAIL.test(email) && email.length <= 254;
}

/** Users and keys in the database. */
/** Verified keys remembered at most (the memo is emptied when full). */
const VERIFIED_MEMO = 10_000;

export class Users {
  /** The HMAC key of this installation's key hashes. */
  private readonly secret: Buffer;
  /** Whether any key row still holds a scrypt hash; only ever goes from true to false (new rows are HMAC). */
  private legacyLeft: boolean;

  /** Checks that matched, by email and key hash, with the change epoch they were read at (see verifyKey). */
  private readonly verified = new Map<string, { epoch: string; check: KeyCheck }>();

  constructor(private readonly store: Database) {
    this.secret = this.loadSecret();
    this.legacyLeft = this.legacyKeyCount() > 0;
  }

  /** The installation's secret, created (32 random bytes) by the first Users over a new database. */
  private loadSecret(): Buffer {
    const get = () => this.store.db.prepare('SELECT secret FROM auth_secret WHERE id = 1').get() as { secret: Buffer } | undefined;
    let row = get();
    if (row === undefined) {
      // OR IGNORE: a server and a CLI command opening a new database at once agree on the first one written.
      this.store.db.prepare('INSERT OR IGNORE INTO auth_secret (id, secret) VALUES (1, ?)').run(randomBytes(32));
      row = get();
    }
    return row!.secret;
  }

  /** The stored hash of a key: HMAC-SHA256 under the installation's secret. */
  private keyHash(key: string): Buffer {
    return createHmac('sha256', this.secret).update(key).digest();
  }

  /** Active and revoked keys still stored as scrypt hashes (they are re-hashed on their next successful use). */
  legacyKeyCount(): number {
    return (this.store.db.prepare('SELECT count(*) AS n FROM api_keys WHERE scheme = ? AND revoked_on IS NULL').get(LEGACY_SCHEME) as { n: number }).n;
  }

  /** Creates the account (and zone) rows on first use. */
  private ensureAccount(accountId: string): void {
    this.store.db.prepare('INSERT OR IGNORE INTO accounts (id, created_on) VALUES (?, ?)').run(accountId, nowStamp());
  }

  private ensureZone(zoneId: string, accountId: string): void {
    const row = this.store.db.prepare('SELECT account_id FROM zones WHERE id = ?').get(zoneId) as { account_id: string } | undefined;
    if (row !== undefined && row.account_id !== accountId) {
      throw new MoatError('USER_BAD_INPUT', `zone ${zoneId} belongs to account ${row.account_id}, not ${accountId}`);
    }
    if (row === undefined) this.store.db.prepare('INSERT INTO zones (id, account_id, created_on) VALUES (?, ?, ?)').run(zoneId, accountId, nowStamp());
  }

  /**
   * Creates a user with access to `accounts` (and to `zones`, which belong to
   * the first account) and one key; returns the key in clear (shown once).
   */
  create(input: { email: string; accounts: string[]; zones?: string[]; key?: string | undefined }): { user: UserInfo; key: string } {
    const { email } = input;
    if (!isWellFormedEmail(email)) throw new MoatError('USER_BAD_INPUT', `"${email}" is not an email address`);
    if (input.accounts.length === 0) throw new MoatError('USER_BAD_INPUT', 'give at least one --account');
    for (const id of [...input.accounts, ...(input.zones ?? [])]) {
      if (!isId(id)) throw new MoatError('USER_BAD_INPUT', `"${id}" is not an id: accounts and zones are 32 lowercase hex characters`);
    }
    const key = input.key ?? randomBytes(24).toString('hex').slice(0, 37);
    if (!isWellFormedKey(key)) throw new MoatError('USER_BAD_INPUT', 'a key is 16 to 128 characters of A-Z a-z 0-9 _ -');
    const userId = newId();
    this.store.write(() => {
      const exists = this.store.db.prepare('SELECT id FROM users WHERE email = ?').get(email);
      if (exists !== undefined) throw new MoatError('USER_BAD_INPUT', `a user with email ${email} already exists`);
      this.store.db.prepare('INSERT INTO users (id, email, created_on) VALUES (?, ?, ?)').run(userId, email, nowStamp());
      for (const a of input.accounts) {
        this.ensureAccount(a);
        this.store.db.prepare('INSERT OR IGNORE INTO user_accounts (user_id, account_id) VALUES (?, ?)').run(userId, a);
      }
      for (const z of input.zones ?? []) {
        this.ensureZone(z, input.accounts[0]!);
        this.store.db.prepare('INSERT OR IGNORE INTO user_zones (user_id, zone_id) VALUES (?, ?)').run(userId, z);
      }
      this.insertKey(userId, key);
    });
    return { user: this.get(email)!, key };
  }

  /** Adds a new key to an existing user; returns it in clear. */
  addKey(email: string, key?: string): string {
    const k = key ?? randomBytes(24).toString('hex').slice(0, 37);
    if (!isWellFormedKey(k)) throw new MoatError('USER_BAD_INPUT', 'a key is 16 to 128 characters of A-Z a-z 0-9 _ -');
    this.store.write(() => {
      const u = this.store.db.prepare('SELECT id FROM users WHERE email = ?').get(email) as { id: string } | undefined;
      if (u === undefined) throw new MoatError('USER_NOT_FOUND', `no user with email ${email}`);
      this.insertKey(u.id, k);
    });
    return k;
  }

  private insertKey(userId: string, key: string): void {
    this.store.db
      .prepare('INSERT INTO api_keys (id, user_id, salt, hash, hint, created_on, scheme) VALUES (?, ?, ?, ?, ?, ?, ?)')
      .run(newId(), userId, NO_SALT, this.keyHash(key), key.slice(-4), nowStamp(), HMAC_SCHEME);
  }

  /** Revokes every key of a user (or one key by id); returns how many were revoked. */
  revoke(email: string, keyId?: string): number {
    return this.store.write(() => {
      const u = this.store.db.prepare('SELECT id FROM users WHERE email = ?').get(email) as { id: string } | undefined;
      if (u === undefined) throw new MoatError('USER_NOT_FOUND', `no user with email ${email}`);
      const r =
        keyId === undefined
          ? this.store.db.prepare('UPDATE api_keys SET revoked_on = ? WHERE user_id = ? AND revoked_on IS NULL').run(nowStamp(), u.id)
          : this.store.db.prepare('UPDATE api_keys SET revoked_on = ? WHERE user_id = ? AND id = ? AND revoked_on IS NULL').run(nowStamp(), u.id, keyId);
      if (keyId !== undefined && r.changes === 0) throw new MoatError('USER_NOT_FOUND', `user ${email} has no active key ${keyId}`);
      return r.changes;
    });
  }

  /** One user by email, or undefined. */
  get(email: string): UserInfo | undefined {
    const u = this.store.db.prepare('SELECT id, email, created_on FROM users WHERE email = ?').get(email) as
      | { id: string; email: string; created_on: string }
      | undefined;
    return u === undefined ? undefined : this.info(u);
  }

  /** Every user, by email. */
  list(): UserInfo[] {
    const rows = this.store.db.prepare('SELECT id, email, created_on FROM users ORDER BY email').all() as { id: string; email: string; created_on: string }[];
    return rows.map((u) => this.info(u));
  }

  private info(u: { id: string; email: string; created_on: string }): UserInfo {
    const db = this.store.db;
    return {
      id: u.id,
      email: u.email,
      created_on: u.created_on,
      accounts: (db.prepare('SELECT account_id FROM user_accounts WHERE user_id = ? ORDER BY account_id').all(u.id) as { account_id: string }[]).map(
        (r) => r.account_id,
      ),
      zones: db
        .prepare('SELECT z.id, z.account_id FROM user_zones uz JOIN zones z ON z.id = uz.zone_id WHERE uz.user_id = ? ORDER BY z.id')
        .all(u.id) as { id: string; account_id: string }[],
      keys: db.prepare('SELECT id, hint, created_on, revoked_on FROM api_keys WHERE user_id = ? ORDER BY created_on').all(u.id) as UserInfo['keys'],
    };
  }

  /** The principal for an email and key, or undefined when they do not match an active key (scrypt checks allowed). */
  verify(email: string, key: string): Principal | undefined {
    const r = this.verifyKey(email, key, () => true);
    return r.outcome === 'ok' ? r.principal : undefined;
  }

  /**
   * Checks an email and key. The key's HMAC is looked up by the hash index and
   * only then is the email compared, with one constant-time comparison
   * against the row found or a dummy: a few microseconds, the same work for a
   * known and an unknown email. Only when that fails and the email has keys
   * still stored as scrypt hashes is `mayCheckScrypt` asked whether a slow
   * check may run now; one that matches is re-hashed to HMAC.
   */
  verifyKey(email: string, key: string, mayCheckScrypt: () => boolean): KeyCheck {
    const db = this.store.db;
    // A key verified since the last commit anywhere is taken from the memo:
    // one statement (the change epoch) instead of the key's and the user's
    // reach queries, each taking SQLite's WAL read lock (measured: auth was
    // 18% of the server's CPU on GET of a cached entrypoint). Only matches
    // are kept, so a wrong key costs the same for known and unknown emails.
    // The memo is keyed by a one-shot SHA-256 of email and key (never the
    // key itself), which costs less than the HMAC object a miss then makes
    // (measured: X-Auth-Key GETs 0.40x the bare server with the HMAC on every
    // request, against 0.51x for API tokens' one-shot hash).
    const epoch = this.store.changeEpoch();
    const memoKey = hash('sha256', `${email}\n${key}`, 'base64');
    const memo = this.verified.get(memoKey);
    if (memo !== undefined && memo.epoch === epoch) return memo.check;
    const h = this.keyHash(key);
    const found = this.verifyStored(db, email, key, h, mayCheckScrypt);
    if (found.outcome === 'ok') {
      if (this.verified.size >= VERIFIED_MEMO) this.verified.clear();
      this.verified.set(memoKey, { epoch, check: found });
    }
    return found;
  }

  private verifyStored(db: Database['db'], email: string, key: string, h: Buffer, mayCheckScrypt: () => boolean): KeyCheck {
    const row = db
      .prepare(
        'SELECT k.id, k.hash, u.id AS user_id, u.email FROM api_keys k INDEXED BY api_keys_hash JOIN users u ON u.id = k.user_id ' +
          'WHERE k.hash = ? AND k.scheme = ? AND k.revoked_on IS NULL AND u.email = ?',
      )
      .get(h, HMAC_SCHEME, email) as { id: string; hash: Buffer; user_id: string; email: string } | undefined;
    // The index found the row; the comparison that decides is constant-time, and made on a miss too.
    const matched = timingSafeEqual(row?.hash ?? DUMMY_HASH, h) && row !== undefined;
    if (matched) return this.principal(row.user_id, row.email, row.id);
    if (!this.legacyLeft) return { outcome: 'unknown' };
    const legacy = db
      .prepare('SELECT k.id, k.salt, k.hash, u.id AS user_id, u.email FROM api_keys k JOIN users u ON u.id = k.user_id WHERE u.email = ? AND k.scheme = ? AND k.revoked_on IS NULL')
      .all(email, LEGACY_SCHEME) as { id: string; salt: Buffer; hash: Buffer; user_id: string; email: string }[];
    if (legacy.length === 0) return { outcome: 'unknown' };
    if (!mayCheckScrypt()) return { outcome: 'legacy-deferred' };
    const k = legacyMatch(legacy, key);
    if (k === undefined) return { outcome: 'unknown' };
    this.upgrade(k.id, h);
    return this.principal(k.user_id, k.email, k.id);
  }

  /** Re-hashes a legacy row whose key just verified; a busy database only postpones it to the key's next use. */
  private upgrade(keyId: string, hash: Buffer): void {
    try {
      this.store.write(() => {
        this.store.db.prepare('UPDATE api_keys SET scheme = ?, salt = ?, hash = ? WHERE id = ? AND scheme = ?').run(HMAC_SCHEME, NO_SALT, hash, keyId, LEGACY_SCHEME);
      });
      this.legacyLeft = this.legacyKeyCount() > 0;
    } catch (err) {
      if (!(err instanceof MoatError && err.errorName === 'STORE_BUSY')) throw err;
    }
  }

  private principal(userId: string, email: string, keyId: string): KeyCheck {
    return { outcome: 'ok', principal: { userId, email, keyId, via: 'key', readOnly: false, ...this.reach(userId) } };
  }

  /** The accounts and zones a user may reach. */
  reach(userId: string): { accounts: Set<string>; zones: Map<string, string> } {
    const db = this.store.db;
    const accounts = new Set(
      (db.prepare('SELECT account_id FROM user_accounts WHERE user_id = ?').all(userId) as { account_id: string }[]).map((r) => r.account_id),
    );
    const zones = new Map(
      (
        db.prepare('SELECT z.id, z.account_id FROM user_zones uz JOIN zones z ON z.id = uz.zone_id WHERE uz.user_id = ?').all(userId) as {
          id: string;
          account_id: string;
        }[]
      ).map((r) => [r.id, r.account_id]),
    );
    return { accounts, zones };
  }

  /** Account rows by id (unknown ids left out), ordered by id. */
  accountRows(ids: Iterable<string>): { id: string; created_on: string }[] {
    const st = this.store.db.prepare('SELECT id, created_on FROM accounts WHERE id = ?');
    return [...new Set(ids)]
      .sort()
      .map((id) => st.get(id) as { id: string; created_on: string } | undefined)
      .filter((r) => r !== undefined);
  }

  /** Zone rows in `accounts` plus the zones of `zoneIds`, ordered by id. */
  zoneRows(accounts: Iterable<string>, zoneIds: Iterable<string>): { id: string; account_id: string; created_on: string }[] {
    const db = this.store.db;
    const byId = new Map<string, { id: string; account_id: string; created_on: string }>();
    for (const a of new Set(accounts)) {
      for (const z of db.prepare('SELECT id, account_id, created_on FROM zones WHERE account_id = ?').all(a) as { id: string; account_id: string; created_on: string }[]) {
        byId.set(z.id, z);
      }
    }
    for (const id of zoneIds) {
      const z = db.prepare('SELECT id, account_id, created_on FROM zones WHERE id = ?').get(id) as { id: string; account_id: string; created_on: string } | undefined;
      if (z !== undefined) byId.set(z.id, z);
    }
    return [...byId.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  /** The account a zone belongs to, or undefined for an unknown zone. */
  zoneAccount(zoneId: string): string | undefined {
    const r = this.store.db.prepare('SELECT account_id FROM zones WHERE id = ?').get(zoneId) as { account_id: string } | undefined;
    return r?.account_id;
  }

  /** Number of users (the server creates a first one on an empty database). */
  count(): number {
    return (this.store.db.prepare('SELECT count(*) AS n FROM users').get() as { n: number }).n;
  }
}
