// API tokens on PostgreSQL: TokensRepo over one transaction's client, a
// faithful translation of ../tokens.ts (only a token's SHA-256 is stored; a
// verified token is remembered while the store's change epoch is unchanged).

import { randomBytes, timingSafeEqual } from 'node:crypto';
import { MoatError } from '../../errors/index.js';
import { newId, nowStamp } from '../ids.js';
import { digest, isWellFormedToken, tokenInput, type TokenInfo } from '../tokens.js';
import type { TokensRepo } from '../types.js';
import type { Principal } from '../users.js';
import type { PgRepoContext } from './pg-repo-context.js';
import { memo, type PgShared } from './pg-shared.js';


export class PgTokensRepo implements TokensRepo {
  constructor(
    private readonly ctx: PgRepoContext,
    private readonly shared: PgShared,
  ) {}

  private async rows<R>(sql: string, params: unknown[] = []): Promise<R[]> {
    return (await this.ctx.client.query(sql, params)).rows as R[];
  }

  async create(input: { email: string; name: string; accounts?: string[]; readOnly?: boolean }): Promise<{ info: TokenInfo; token: string }> {
    const { name, accounts } = tokenInput(input);
    const token = randomBytes(30).toString('base64url');
    const id = newId();
    const u = (await this.rows<{ id: string }>('SELECT id FROM users WHERE email = $1', [input.email]))[0];
    if (u === undefined) throw new MoatError('USER_NOT_FOUND', `no user with email ${input.email}`);
    const reach = (await this.ctx.tx.users.reach(u.id)).accounts;
    for (const a of accounts) {
      if (!reach.has(a)) throw new MoatError('USER_BAD_INPUT', `user ${input.email} has no access to account ${a}; a token reaches only accounts of its user`);
    }
    await this.ctx.client.query('INSERT INTO api_tokens (id, user_id, name, hash, read_only, created_on) VALUES ($1, $2, $3, $4, $5, $6)', [
      id,
      u.id,
      name,
      digest(token),
      input.readOnly === true ? 1 : 0,
      nowStamp(),
    ]);
    for (const a of accounts) await this.ctx.client.query('INSERT INTO api_token_accounts (token_id, account_id) VALUES ($1, $2)', [id, a]);
    return { info: (await this.get(id))!, token };
  }

  async get(id: string): Promise<TokenInfo | undefined> {
    return (await this.infos('WHERE t.id = $1', [id]))[0];
  }

  async list(email?: string): Promise<TokenInfo[]> {
    // As Tokens.list: oldest first, of one user when given (emails compared without case).
    return email === undefined ? this.infos('', []) : this.infos('WHERE lower(u.email::text) = lower($1)', [email]);
  }

  private async infos(where: string, params: unknown[]): Promise<TokenInfo[]> {
    const rows = await this.rows<{ id: string; name: string; email: string; read_only: number; created_on: string; revoked_on: string | null }>(
      `SELECT t.id, t.name, u.email::text AS email, t.read_only, t.created_on, t.revoked_on FROM api_tokens t JOIN users u ON u.id = t.user_id ${where}
       ORDER BY t.created_on COLLATE "C", t.id COLLATE "C"`,
      params,
    );
    const out: TokenInfo[] = [];
    for (const r of rows) {
      const accounts = await this.rows<{ account_id: string }>('SELECT account_id FROM api_token_accounts WHERE token_id = $1 ORDER BY account_id COLLATE "C"', [r.id]);
      out.push({
        id: r.id,
        name: r.name,
        email: r.email,
        accounts: accounts.map((a) => a.account_id),
        read_only: r.read_only === 1,
        created_on: r.created_on,
        revoked_on: r.revoked_on,
      });
    }
    return out;
  }

  async revoke(id: string): Promise<void> {
    const r = await this.ctx.client.query('UPDATE api_tokens SET revoked_on = $1 WHERE id = $2 AND revoked_on IS NULL', [nowStamp(), id]);
    if ((r.rowCount ?? 0) === 0) throw new MoatError('USER_NOT_FOUND', `no active token ${id} (see \`moat tokens list\`)`);
  }

  async verify(token: string): Promise<Principal | undefined> {
    if (!isWellFormedToken(token)) return undefined;
    const h = digest(token);
    const epoch = this.shared.epoch();
    const memoKey = h.toString('base64');
    const m = this.shared.verifiedTokens.get(memoKey);
    if (m !== undefined && m.epoch === epoch) return m.principal;
    const principal = await this.principalOf(h);
    // Remembered once the transaction ended (see PgUsersRepo.verifyKey).
    if (principal !== undefined) this.ctx.afterCommit(() => memo(this.shared.verifiedTokens, memoKey, { epoch, principal }));
    return principal;
  }

  private async principalOf(h: Buffer): Promise<Principal | undefined> {
    const row = (
      await this.rows<{ id: string; user_id: string; hash: Buffer; read_only: number; email: string }>(
        'SELECT t.id, t.user_id, t.hash, t.read_only, u.email::text AS email FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = $1 AND t.revoked_on IS NULL',
        [h],
      )
    )[0];
    if (row === undefined || !timingSafeEqual(row.hash, h)) return undefined;
    const reach = await this.ctx.tx.users.reach(row.user_id);
    const scoped = (await this.rows<{ account_id: string }>('SELECT account_id FROM api_token_accounts WHERE token_id = $1', [row.id])).map((r) => r.account_id);
    let { accounts, zones } = reach;
    if (scoped.length > 0) {
      accounts = new Set(scoped.filter((a) => reach.accounts.has(a)));
      zones = new Map([...reach.zones].filter(([, account]) => accounts.has(account)));
    }
    return { userId: row.user_id, email: row.email, keyId: row.id, via: 'token', readOnly: row.read_only === 1, accounts, zones };
  }
}
