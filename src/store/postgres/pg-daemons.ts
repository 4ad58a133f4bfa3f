// Daemons of the control channel on PostgreSQL: DaemonsRepo over one
// transaction's client, a faithful translation of ../daemons.ts (identities
// with a token stored as its SHA-256, fleet status written by whichever
// replica holds a daemon's connection, the deployment fingerprint the hubs
// compare after a change).

import { randomBytes, timingSafeEqual } from 'node:crypto';
import { MoatError } from '../../errors/index.js';
import {
  DAEMON_COLUMNS,
  DAEMON_TOKEN,
  DAEMON_TOKEN_PREFIX,
  daemonInfo,
  daemonInput,
  statusStatement,
  tokenDigest,
  type DaemonIdentity,
  type DaemonInfo,
  type DaemonRow,
  type StatusUpdate,
} from '../daemons.js';
import { newId, nowStamp } from '../ids.js';
import type { DaemonsRepo } from '../types.js';
import type { PgRepoContext } from './pg-repo-context.js';

export class PgDaemonsRepo implements DaemonsRepo {
  constructor(private readonly ctx: PgRepoContext) {}

  private async rows<R>(sql: string, params: unknown[] = []): Promise<R[]> {
    return (await this.ctx.client.query(sql, params)).rows as R[];
  }

  async create(input: { accountId: string; zoneId?: string | undefined; name: string }): Promise<{ info: DaemonInfo; token: string }> {
    const { name, zoneId } = daemonInput(input);
    const token = DAEMON_TOKEN_PREFIX + randomBytes(30).toString('base64url');
    const id = newId();
    if ((await this.rows('SELECT 1 FROM accounts WHERE id = $1', [input.accountId])).length === 0) {
      throw new MoatError('USER_NOT_FOUND', `no account ${input.accountId} (accounts are created with their first user: \`moat users create --account\`)`);
    }
    if (zoneId !== null) {
      const z = (await this.rows<{ account_id: string }>('SELECT account_id FROM zones WHERE id = $1', [zoneId]))[0];
      if (z?.account_id !== input.accountId) throw new MoatError('USER_BAD_INPUT', `zone ${zoneId} is not a zone of account ${input.accountId}`);
    }
    if ((await this.rows('SELECT 1 FROM daemons WHERE account_id = $1 AND name = $2', [input.accountId, name])).length > 0) {
      throw new MoatError('USER_BAD_INPUT', `account ${input.accountId} already has a daemon named "${name}" (names are unique per account; see \`moat daemons list\`)`);
    }
    await this.ctx.client.query('INSERT INTO daemons (id, account_id, zone_id, name, hash, created_on) VALUES ($1, $2, $3, $4, $5, $6)', [
      id,
      input.accountId,
      zoneId,
      name,
      tokenDigest(token),
      nowStamp(),
    ]);
    return { info: (await this.get(id))!, token };
  }

  async get(id: string): Promise<DaemonInfo | undefined> {
    const r = (await this.rows<DaemonRow>(`SELECT ${DAEMON_COLUMNS} FROM daemons WHERE id = $1`, [id]))[0];
    return r === undefined ? undefined : daemonInfo(r);
  }

  async list(filter: { accountId?: string | undefined } = {}): Promise<DaemonInfo[]> {
    // COLLATE "C": SQLite's byte order for names, whatever the database's locale.
    const rows =
      filter.accountId === undefined
        ? await this.rows<DaemonRow>(`SELECT ${DAEMON_COLUMNS} FROM daemons ORDER BY account_id COLLATE "C", name COLLATE "C", id COLLATE "C"`)
        : await this.rows<DaemonRow>(`SELECT ${DAEMON_COLUMNS} FROM daemons WHERE account_id = $1 ORDER BY name COLLATE "C", id COLLATE "C"`, [filter.accountId]);
    return rows.map(daemonInfo);
  }

  async verify(token: string): Promise<DaemonIdentity | undefined> {
    if (!DAEMON_TOKEN.test(token)) return undefined;
    const h = tokenDigest(token);
    const r = (
      await this.rows<{ id: string; name: string; account_id: string; zone_id: string | null; hash: Buffer; revoked_on: string | null }>(
        'SELECT id, name, account_id, zone_id, hash, revoked_on FROM daemons WHERE hash = $1',
        [h],
      )
    )[0];
    if (r === undefined || !timingSafeEqual(r.hash, h)) return undefined;
    return { id: r.id, name: r.name, account_id: r.account_id, zone_id: r.zone_id, revoked: r.revoked_on !== null };
  }

  async revoke(idOrName: string, accountId?: string): Promise<DaemonInfo> {
    type R = { id: string; account_id: string; revoked_on: string | null };
    // FOR UPDATE: two replicas revoking the same daemon at once; the second waits, then finds it revoked.
    let rows = await this.rows<R>('SELECT id, account_id, revoked_on FROM daemons WHERE id = $1 FOR UPDATE', [idOrName]);
    if (rows.length === 0) rows = await this.rows<R>('SELECT id, account_id, revoked_on FROM daemons WHERE name = $1 FOR UPDATE', [idOrName]);
    if (accountId !== undefined) rows = rows.filter((r) => r.account_id === accountId);
    if (rows.length === 0) throw new MoatError('USER_NOT_FOUND', `no daemon ${idOrName} (see \`moat daemons list\`)`);
    if (rows.length > 1) throw new MoatError('USER_BAD_INPUT', `${rows.length} daemons are named "${idOrName}" (in different accounts): revoke by id (see \`moat daemons list\`)`);
    const row = rows[0]!;
    if (row.revoked_on !== null) throw new MoatError('USER_NOT_FOUND', `daemon ${idOrName} is already revoked (on ${row.revoked_on})`);
    await this.ctx.client.query('UPDATE daemons SET revoked_on = $1 WHERE id = $2', [nowStamp(), row.id]);
    return (await this.get(row.id))!;
  }

  async revokedAmong(ids: readonly string[]): Promise<string[]> {
    if (ids.length === 0) return [];
    // One array parameter: no variable limit to chunk around, unlike SQLite.
    return (await this.rows<{ id: string }>('SELECT id FROM daemons WHERE revoked_on IS NOT NULL AND id = ANY($1::text[])', [[...ids]])).map((r) => r.id);
  }

  async recordStatus(updates: readonly StatusUpdate[]): Promise<void> {
    const c = this.ctx.client;
    for (const u of updates) {
      const [sql, params] = statusStatement(u);
      // The shared statement has SQLite's ? placeholders (and no ? in text): PostgreSQL's are numbered.
      let n = 0;
      await c.query(
        sql.replace(/\?/g, () => `$${++n}`),
        params,
      );
    }
  }

  /** As deploymentFingerprint of ../daemons.ts: the same reads, compared only with itself. */
  async deploymentFingerprint(accountId: string, zoneId: string | null): Promise<string> {
    const entries = [
      (
        await this.rows(
          `SELECT r.id, r.latest_version AS v, t.token FROM rulesets r LEFT JOIN ruleset_versions t ON t.ruleset_id = r.id AND t.version = r.latest_version
           WHERE r.account_id = $1 AND r.zone_id IS NULL AND r.phase = 'network_transit' AND r.kind = 'root'`,
          [accountId],
        )
      )[0],
      zoneId === null
        ? undefined
        : (
            await this.rows(
              `SELECT r.id, r.latest_version AS v, t.token FROM rulesets r LEFT JOIN ruleset_versions t ON t.ruleset_id = r.id AND t.version = r.latest_version
               WHERE r.zone_id = $1 AND r.phase = 'network_transit' AND r.kind = 'zone'`,
              [zoneId],
            )
          )[0],
    ] as Array<{ id: string; v: number; token: number } | undefined>;
    const targets: unknown[] = [];
    for (const e of entries) {
      if (e === undefined) continue;
      targets.push(
        await this.rows(
          `SELECT x.target_id, x.target_version, r.latest_version,
              (SELECT token FROM ruleset_versions WHERE ruleset_id = x.target_id AND version = coalesce(x.target_version, r.latest_version)) AS token
            FROM ruleset_execute_refs x LEFT JOIN rulesets r ON r.id = x.target_id WHERE x.ruleset_id = $1 ORDER BY x.target_id COLLATE "C"`,
          [e.id],
        ),
      );
    }
    const lists = await this.rows('SELECT id, generation FROM lists WHERE account_id = $1 ORDER BY id COLLATE "C"', [accountId]);
    const managed = await this.rows('SELECT name, generation FROM managed_lists ORDER BY name COLLATE "C"');
    return JSON.stringify([entries, targets, lists, managed]);
  }
}
