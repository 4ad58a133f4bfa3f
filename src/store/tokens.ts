// API tokens (`Authorization: Bearer <token>`, Cloudflare's recommended scheme):
// each belongs to a user, reaches some of that user's accounts (or all of
// them) and may read only or read and edit. A token is 40 random characters
// shown once; only its SHA-256 is stored: tokens are random, not passwords, so
// a fast hash is enough, and the lookup by hash is one indexed read per
// request, so a revocation takes effect on the next one.

import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { MoatError } from '../errors/index.js';
import type { Database } from './database.js';
import { isId, newId, nowStamp } from './ids.js';
import type { Principal, Users } from './users.js';

/** A token as the CLI lists it (never the token itself). */
export interface TokenInfo {
  id: string;
  name: string;
  email: string;
  /** The accounts it reaches; empty means every account of its user. */
  accounts: string[];
  read_only: boolean;
  created_on: string;
  revoked_on: string | null;
}

/** The accepted shape of a token in a header. */
const TOKEN = /^[A-Za-z0-9_-]{40}$/;

/** True when a bearer token has the shape Moat gives tokens (40 of A-Z a-z 0-9 _ -). */
export function isWellFormedToken(token: string): boolean {
  return TOKEN.test(token);
}

/** What is stored of a token: its SHA-256 (both backends). */
export function digest(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

/** A new token's checked name and accounts (trimmed, deduplicated), or USER_BAD_INPUT; both backends check with this. */
export function tokenInput(input: { name: string; accounts?: string[] }): { name: string; accounts: string[] } {
  const name = input.name.trim();
  if (name === '' || name.length > 120) throw new MoatError('USER_BAD_INPUT', 'a token needs a --name of 1 to 120 characters');
  const accounts = [...new Set(input.accounts ?? [])];
  for (const a of accounts) if (!isId(a)) throw new MoatError('USER_BAD_INPUT', `"${a}" is not an id: accounts are 32 lowercase hex characters`);
  return { name, accounts };
}

/** The tokens of the users in one database. */
export class Tokens {
  constructor(
    private readonly store: Database,
    private readonly users: Users,
  ) {}

  /**
   * Creates a token for a user, scoped to `accounts` (all of the user's when
   * empty; each must be one the user reaches) and to reading only when
   * `readOnly`; returns it in clear (shown once).
   */
  create(input: { email: string; name: string; accounts?: string[]; readOnly?: boolean }): { info: TokenInfo; token: string } {
    const { name, accounts } = tokenInput(input);
    const token = randomBytes(30).toString('base64url');
    const id = newId();
    this.store.write(() => {
      const u = this.store.db.prepare('SELECT id FROM users WHERE email = ?').get(input.email) as { id: string } | undefined;
      if (u === undefined) throw new MoatError('USER_NOT_FOUND', `no user with email ${input.email}`);
      const reach = this.users.reach(u.id).accounts;
      for (const a of accounts) {
        if (!reach.has(a)) throw new MoatError('USER_BAD_INPUT', `user ${input.email} has no access to account ${a}; a token reaches only accounts of its user`);
      }
      this.store.db
        .prepare('INSERT INTO api_tokens (id, user_id, name, hash, read_only, created_on) VALUES (?, ?, ?, ?, ?, ?)')
        .run(id, u.id, name, digest(token), input.readOnly === true ? 1 : 0, nowStamp());
      for (const a of accounts) this.store.db.prepare('INSERT INTO api_token_accounts (token_id, account_id) VALUES (?, ?)').run(id, a);
    });
    return { info: this.get(id)!, token };
  }

  /** One token by id, or undefined. */
  get(id: string): TokenInfo | undefined {
    return this.list().find((t) => t.id === id);
  }

  /** Every token (of one user when `email` is given), oldest first. */
  list(email?: string): TokenInfo[] {
    const db = this.store.db;
    const rows = db
      .prepare(
        'SELECT t.id, t.name, u.email, t.read_only, t.created_on, t.revoked_on FROM api_tokens t JOIN users u ON u.id = t.user_id ORDER BY t.created_on, t.id',
      )
      .all() as { id: string; name: string; email: string; read_only: number; created_on: string; revoked_on: string | null }[];
    return rows
      .filter((r) => email === undefined || r.email.toLowerCase() === email.toLowerCase())
      .map((r) => ({
        id: r.id,
        name: r.name,
        email: r.email,
        accounts: (db.prepare('SELECT account_id FROM api_token_accounts WHERE token_id = ? ORDER BY account_id').all(r.id) as { account_id: string }[]).map(
          (a) => a.account_id,
        ),
        read_only: r.read_only === 1,
        created_on: r.created_on,
        revoked_on: r.revoked_on,
      }));
  }

  /** Revokes a token by id; takes effect on the next request. */
  revoke(id: string): void {
    this.store.write(() => {
      const r = this.store.db.prepare('UPDATE api_tokens SET revoked_on = ? WHERE id = ? AND revoked_on IS NULL').run(nowStamp(), id);
      if (r.changes === 0) throw new MoatError('USER_NOT_FOUND', `no active token ${id} (see \`moat tokens list\`)`);
    });
  }

  /** The principal of a bearer token, or undefined when it is not an active token. */
  verify(token: string): Principal | undefined {
    if (!isWellFormedToken(token)) return undefined;
    const h = digest(token);
    // A token verified since the last commit anywhere comes from the memo
    // (see Database.changeEpoch; as Users.verifyKey): no query at all. Only
    // matches are kept.
    const epoch = this.store.changeEpoch();
    const memoKey = h.toString('base64');
    const memo = this.verified.get(memoKey);
    if (memo !== undefined && memo.epoch === epoch) return memo.principal;
    // Its queries (token, accounts, zones, scope) in one read transaction: one
    // snapshot, and SQLite's WAL read lock taken once instead of per query
    // (measured in process: 30 us per verify before, 14 us after).
    const principal = this.store.read(() => this.principalOf(h));
    if (principal !== undefined) {
      if (this.verified.size >= 10_000) this.verified.clear();
      this.verified.set(memoKey, { epoch, principal });
    }
    return principal;
  }

  /** Tokens that matched, by hash, with the change epoch they were read at. */
  private readonly verified = new Map<string, { epoch: string; principal: Principal }>();

  private principalOf(h: Buffer): Principal | undefined {
    const row = this.store.db
      .prepare('SELECT t.id, t.user_id, t.hash, t.read_only, u.email FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ? AND t.revoked_on IS NULL')
      .get(h) as { id: string; user_id: string; hash: Buffer; read_only: number; email: string } | undefined;
    // The index finds the row; the comparison that decides is constant-time.
    if (row === undefined || !timingSafeEqual(row.hash, h)) return undefined;
    const reach = this.users.reach(row.user_id);
    const scoped = (this.store.db.prepare('SELECT account_id FROM api_token_accounts WHERE token_id = ?').all(row.id) as { account_id: string }[]).map(
      (r) => r.account_id,
    );
    let { accounts, zones } = reach;
    if (scoped.length > 0) {
      // Scoped: the token's accounts that the user still reaches, and the user's zones in them.
      accounts = new Set(scoped.filter((a) => reach.accounts.has(a)));
      zones = new Map([...reach.zones].filter(([, account]) => accounts.has(account)));
    }
    return { userId: row.user_id, email: row.email, keyId: row.id, via: 'token', readOnly: row.read_only === 1, accounts, zones };
  }
}
