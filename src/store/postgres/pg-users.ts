// Users, their API keys and reach on PostgreSQL: UsersRepo over one
// transaction's client, a faithful translation of ../users.ts (same checks,
// messages and codes, same row shapes and order). Keys are HMAC-SHA256 under
// the installation's secret, which lives in auth_secret and is created once
// by whichever replica opens an empty database first (PgStore.open); legacy
// scrypt rows are re-hashed on use, in a write of their own after the read
// that verified them.

import { hash, randomBytes, createHmac, timingSafeEqual } from 'node:crypto';
import { MoatError } from '../../errors/index.js';
import { isId, newId, nowStamp } from '../ids.js';
import type { UsersRepo } from '../types.js';
import { DUMMY_HASH, HMAC_SCHEME, isWellFormedEmail, isWellFormedKey, LEGACY_SCHEME, legacyMatch, NO_SALT, type KeyCheck, type Principal, type UserInfo } from '../users.js';
import type { PgRepoContext } from './pg-repo-context.js';
import { memo, type PgShared } from './pg-shared.js';

type UserRow = { id: string; email: string; created_on: string };

/** The memo key of an email and key: a one-shot SHA-256, never the key itself (as Users.verifyKey). */
export function keyMemoKey(email: string, key: string): string {
  return hash('sha256', `${email}\n${key}`, 'base64');
}

export class PgUsersRepo implements UsersRepo {
  constructor(
    private readonly ctx: PgRepoContext,
    private readonly shared: PgShared,
  ) {}

  private async rows<R>(sql: string, params: unknown[] = []): Promise<R[]> {
    return (await this.ctx.client.query(sql, params)).rows as R[];
  }

  private keyHash(key: string): Buffer {
    return createHmac('sha256', this.shared.secret).update(key).digest();
  }

  async legacyKeyCount(): Promise<number> {
    return (await this.rows<{ n: number }>('SELECT count(*) AS n FROM api_keys WHERE scheme = $1 AND revoked_on IS NULL', [LEGACY_SCHEME]))[0]!.n;
  }

  private async ensureAccount(accountId: string): Promise<void> {
    await this.ctx.client.query('INSERT INTO accounts (id, created_on) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING', [accountId, nowStamp()]);
  }

  private async ensureZone(zoneId: string, accountId: string): Promise<void> {
    const row = (await this.rows<{ account_id: string }>('SELECT account_id FROM zones WHERE id = $1', [zoneId]))[0];
    if (row !== undefined && row.account_id !== accountId) {
      throw new MoatError('USER_BAD_INPUT', `zone ${zoneId} belongs to account ${row.account_id}, not ${accountId}`);
    }
    if (row === undefined) await this.ctx.client.query('INSERT INTO zones (id, account_id, created_on) VALUES ($1, $2, $3)', [zoneId, accountId, nowStamp()]);
  }

  async create(input: { email: string; accounts: string[]; zones?: string[]; key?: string | undefined }): Promise<{ user: UserInfo; key: string }> {
    const { email } = input;
    if (!isWellFormedEmail(email)) throw new MoatError('USER_BAD_INPUT', `"${email}" is not an email address`);
    if (input.accounts.length === 0) throw new MoatError('USER_BAD_INPUT', 'give at least one --account');
    for (const id of [...input.accounts, ...(input.zones ?? [])]) {
      if (!isId(id)) throw new MoatError('USER_BAD_INPUT', `"${id}" is not an id: accounts and zones are 32 lowercase hex characters`);
    }
    const key = input.key ?? randomBytes(24).toString('hex').slice(0, 37);
    if (!isWellFormedKey(key)) throw new MoatError('USER_BAD_INPUT', 'a key is 16 to 128 characters of A-Z a-z 0-9 _ -');
    const userId = newId();
    // Two replicas creating the same email at once: the serializable
    // transaction of the second fails (40001), runs again and finds the first.
    if ((await this.rows('SELECT id FROM users WHERE email = $1', [email])).length > 0) {
      throw new MoatError('USER_BAD_INPUT', `a user with email ${email} already exists`);
    }
    await this.ctx.client.query('INSERT INTO users (id, email, created_on) VALUES ($1, $2, $3)', [userId, email, nowStamp()]);
    for (const a of input.accounts) {
      await this.ensureAccount(a);
      await this.ctx.client.query('INSERT INTO user_accounts (user_id, account_id) VALUES ($1, $2) ON CONFLICT DO NOTHING', [userId, a]);
    }
    for (const z of input.zones ?? []) {
      await this.ensureZone(z, input.accounts[0]!);
      await this.ctx.client.query('INSERT INTO user_zones (user_id, zone_id) VALUES ($1, $2) ON CONFLICT DO NOTHING', [userId, z]);
    }
    await this.insertKey(userId, key);
    return { user: (await this.get(email))!, key };
  }

  async addKey(email: string, key?: string): Promise<string> {
    const k = key ?? randomBytes(24).toString('hex').slice(0, 37);
    if (!isWellFormedKey(k)) throw new MoatError('USER_BAD_INPUT', 'a key is 16 to 128 characters of A-Z a-z 0-9 _ -');
    const u = (await this.rows<{ id: string }>('SELECT id FROM users WHERE email = $1', [email]))[0];
    if (u === undefined) throw new MoatError('USER_NOT_FOUND', `no user with email ${email}`);
    await this.insertKey(u.id, k);
    return k;
  }

  private async insertKey(userId: string, key: string): Promise<void> {
    await this.ctx.client.query('INSERT INTO api_keys (id, user_id, salt, hash, hint, created_on, scheme) VALUES ($1, $2, $3, $4, $5, $6, $7)', [
      newId(),
      userId,
      NO_SALT,
      this.keyHash(key),
      key.slice(-4),
      nowStamp(),
      HMAC_SCHEME,
    ]);
  }

  async revoke(email: string, keyId?: string): Promise<number> {
    const u = (await this.rows<{ id: string }>('SELECT id FROM users WHERE email = $1', [email]))[0];
    if (u === undefined) throw new MoatError('USER_NOT_FOUND', `no user with email ${email}`);
    const r =
      keyId === undefined
        ? await this.ctx.client.query('UPDATE api_keys SET revoked_on = $1 WHERE user_id = $2 AND revoked_on IS NULL', [nowStamp(), u.id])
        : await this.ctx.client.query('UPDATE api_keys SET revoked_on = $1 WHERE user_id = $2 AND id = $3 AND revoked_on IS NULL', [nowStamp(), u.id, keyId]);
    const changes = r.rowCount ?? 0;
    if (keyId !== undefined && changes === 0) throw new MoatError('USER_NOT_FOUND', `user ${email} has no active key ${keyId}`);
    return changes;
  }

  async get(email: string): Promise<UserInfo | undefined> {
    const u = (await this.rows<UserRow>('SELECT id, email::text AS email, created_on FROM users WHERE email = $1', [email]))[0];
    return u === undefined ? undefined : this.info(u);
  }

  async list(): Promise<UserInfo[]> {
    // SQLite's NOCASE order: ASCII letters folded (lower() under "C" folds only those), then bytes.
    const rows = await this.rows<UserRow>('SELECT id, email::text AS email, created_on FROM users ORDER BY lower(email::text COLLATE "C")');
    const out: UserInfo[] = [];
    for (const u of rows) out.push(await this.info(u));
    return out;
  }

  private async info(u: UserRow): Promise<UserInfo> {
    // COLLATE "C": byte order, as SQLite's BINARY, whatever the database's locale.
    const accounts = await this.rows<{ account_id: string }>('SELECT account_id FROM user_accounts WHERE user_id = $1 ORDER BY account_id COLLATE "C"', [u.id]);
    const zones = await this.rows<{ id: string; account_id: string }>(
      'SELECT z.id, z.account_id FROM user_zones uz JOIN zones z ON z.id = uz.zone_id WHERE uz.user_id = $1 ORDER BY z.id COLLATE "C"',
      [u.id],
    );
    const keys = await this.rows<UserInfo['keys'][number]>('SELECT id, hint, created_on, revoked_on FROM api_keys WHERE user_id = $1 ORDER BY created_on COLLATE "C"', [u.id]);
    return { id: u.id, email: u.email, created_on: u.created_on, accounts: accounts.map((r) => r.account_id), zones, keys };
  }

  async verify(email: string, key: string): Promise<Principal | undefined> {
    const r = await this.verifyKey(email, key, () => true);
    return r.outcome === 'ok' ? r.principal : undefined;
  }

  async verifyKey(email: string, key: string, mayCheckScrypt: () => boolean): Promise<KeyCheck> {
    // The memo as Users.verifyKey (the epoch read before the queries).
    const epoch = this.shared.epoch();
    const memoKey = keyMemoKey(email, key);
    const m = this.shared.verifiedKeys.get(memoKey);
    if (m !== undefined && m.epoch === epoch) return m.check;
    const found = await this.verifyStored(email, key, this.keyHash(key), mayCheckScrypt);
    // Remembered once the transaction ended: an attempt rolled back (and run again) leaves nothing behind.
    if (found.outcome === 'ok') this.ctx.afterCommit(() => memo(this.shared.verifiedKeys, memoKey, { epoch, check: found }));
    return found;
  }

  private async verifyStored(email: string, key: string, h: Buffer, mayCheckScrypt: () => boolean): Promise<KeyCheck> {
    const row = (
      await this.rows<{ id: string; hash: Buffer; user_id: string; email: string }>(
        'SELECT k.id, k.hash, u.id AS user_id, u.email::text AS email FROM api_keys k JOIN users u ON u.id = k.user_id ' +
          'WHERE k.hash = $1 AND k.scheme = $2 AND k.revoked_on IS NULL AND u.email = $3',
        [h, HMAC_SCHEME, email],
      )
    )[0];
    const matched = timingSafeEqual(row?.hash ?? DUMMY_HASH, h) && row !== undefined;
    if (matched) return this.principal(row.user_id, row.email, row.id);
    if (!this.shared.legacyLeft) return { outcome: 'unknown' };
    const legacy = await this.rows<{ id: string; salt: Buffer; hash: Buffer; user_id: string; email: string }>(
      'SELECT k.id, k.salt, k.hash, u.id AS user_id, u.email::text AS email FROM api_keys k JOIN users u ON u.id = k.user_id WHERE u.email = $1 AND k.scheme = $2 AND k.revoked_on IS NULL',
      [email, LEGACY_SCHEME],
    );
    if (legacy.length === 0) return { outcome: 'unknown' };
    if (!mayCheckScrypt()) return { outcome: 'legacy-deferred' };
    const k = legacyMatch(legacy, key);
    if (k === undefined) return { outcome: 'unknown' };
    this.upgrade(k.id, h);
    return this.principal(k.user_id, k.email, k.id);
  }

  /**
   * Re-hashes a legacy row whose key just verified, after this transaction
   * (which may be a read) and in a write of its own; a failure only postpones
   * it to the key's next use.
   */
  private upgrade(keyId: string, h: Buffer): void {
    const shared = this.shared;
    this.ctx.afterCommit(() =>
      shared.background(async (client) => {
        await client.query('UPDATE api_keys SET scheme = $1, salt = $2, hash = $3 WHERE id = $4 AND scheme = $5', [HMAC_SCHEME, NO_SALT, h, keyId, LEGACY_SCHEME]);
        const n = (await client.query<{ n: number }>('SELECT count(*) AS n FROM api_keys WHERE scheme = $1 AND revoked_on IS NULL', [LEGACY_SCHEME])).rows[0]!.n;
        if (n === 0) shared.legacyLeft = false;
      }),
    );
  }

  private async principal(userId: string, email: string, keyId: string): Promise<KeyCheck> {
    return { outcome: 'ok', principal: { userId, email, keyId, via: 'key', readOnly: false, ...(await this.reach(userId)) } };
  }

  async reach(userId: string): Promise<{ accounts: Set<string>; zones: Map<string, string> }> {
    const accounts = new Set((await this.rows<{ account_id: string }>('SELECT account_id FROM user_accounts WHERE user_id = $1', [userId])).map((r) => r.account_id));
    const zones = new Map(
      (await this.rows<{ id: string; account_id: string }>('SELECT z.id, z.account_id FROM user_zones uz JOIN zones z ON z.id = uz.zone_id WHERE uz.user_id = $1', [userId])).map(
        (r) => [r.id, r.account_id] as const,
      ),
    );
    return { accounts, zones };
  }

  async accountRows(ids: Iterable<string>): Promise<{ id: string; created_on: string }[]> {
    return this.rows('SELECT id, created_on FROM accounts WHERE id = ANY($1::text[]) ORDER BY id COLLATE "C"', [[...new Set(ids)]]);
  }

  async zoneRows(accounts: Iterable<string>, zoneIds: Iterable<string>): Promise<{ id: string; account_id: string; created_on: string }[]> {
    return this.rows('SELECT id, account_id, created_on FROM zones WHERE account_id = ANY($1::text[]) OR id = ANY($2::text[]) ORDER BY id COLLATE "C"', [
      [...new Set(accounts)],
      [...new Set(zoneIds)],
    ]);
  }

  async zoneAccount(zoneId: string): Promise<string | undefined> {
    return (await this.rows<{ account_id: string }>('SELECT account_id FROM zones WHERE id = $1', [zoneId]))[0]?.account_id;
  }

  async count(): Promise<number> {
    return (await this.rows<{ n: number }>('SELECT count(*) AS n FROM users'))[0]!.n;
  }
}
