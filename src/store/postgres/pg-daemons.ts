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

  /**
   * Writes a batch of status updates in order, one statement per run of
   * updates of one kind for distinct daemons (a run ends where a daemon
   * comes again, so each daemon's updates keep their order). One statement
   * per update, as before, was a round trip each: the hub's batch of 500 acks
   * held the replica's one write transaction ~100 ms, and every API write
   * meanwhile waited (channel bench, 2 replicas: the API's write p50 38 ms,
   * write to every ack p99 443 ms).
   */
  async recordStatus(updates: readonly StatusUpdate[]): Promise<void> {
    let i = 0;
    while (i < updates.length) {
      const kind = updates[i]!.kind;
      const ids = new Set<string>();
      let j = i;
      while (j < updates.length && updates[j]!.kind === kind && !ids.has(updates[j]!.id)) ids.add(updates[j++]!.id);
      await this.recordRun(updates.slice(i, j));
      i = j;
    }
  }

  /** One UPDATE ... FROM unnest(arrays) for updates of one kind, each of a different daemon. */
  private async recordRun(run: readonly StatusUpdate[]): Promise<void> {
    const c = this.ctx.client;
    if (run.length === 1) {
      const [sql, params] = statusStatement(run[0]!);
      // The shared statement has SQLite's ? placeholders (and no ? in text): PostgreSQL's are numbered.
      let n = 0;
      await c.query(
        sql.replace(/\?/g, () => `$${++n}`),
        params,
      );
      return;
    }
    const col = <T extends StatusUpdate>(f: (u: T) => string | null): (string | null)[] => (run as T[]).map(f);
    const id = col((u) => u.id);
    const at = col((u) => u.at);
    const first = run[0]!;
    switch (first.kind) {
      case 'connected':
        await c.query(
          `UPDATE daemons d SET connected = 1, connected_since = v.at, remote_address = v.address, moat_version = v.moat, last_seen = v.at
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS v(id, at, address, moat) WHERE d.id = v.id`,
          [id, at, col<Extract<StatusUpdate, { kind: 'connected' }>>((u) => u.remoteAddress), col<Extract<StatusUpdate, { kind: 'connected' }>>((u) => u.moatVersion)],
        );
        return;
      case 'disconnected':
        // Only the connection that is recorded (as statusStatement).
        await c.query(
          `UPDATE daemons d SET connected = 0, disconnected_at = v.at, last_seen = v.at
             FROM unnest($1::text[], $2::text[], $3::text[]) AS v(id, at, since) WHERE d.id = v.id AND d.connected_since = v.since`,
          [id, at, col<Extract<StatusUpdate, { kind: 'disconnected' }>>((u) => u.since)],
        );
        return;
      case 'applied': {
        type Applied = Extract<StatusUpdate, { kind: 'applied' }>;
        await c.query(
          `UPDATE daemons d SET digest = v.digest, account_version = v.account, zone_version = v.zone, runs = v.runs, applied_on = v.at, last_seen = v.at
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS v(id, at, digest, account, zone, runs) WHERE d.id = v.id`,
          [id, at, col<Applied>((u) => u.digest), col<Applied>((u) => u.versions.account), col<Applied>((u) => u.versions.zone), col<Applied>((u) => JSON.stringify(u.rulesets))],
        );
        return;
      }
      case 'rejected':
        await c.query(
          `UPDATE daemons d SET last_rejection = v.rejection, last_seen = v.at
             FROM unnest($1::text[], $2::text[], $3::text[]) AS v(id, at, rejection) WHERE d.id = v.id`,
          [id, at, col<Extract<StatusUpdate, { kind: 'rejected' }>>((u) => JSON.stringify(u.rejection))],
        );
        return;
      case 'seen':
        // No counters: last_seen only (as statusStatement), the counters kept.
        await c.query(
          `UPDATE daemons d SET counters = coalesce(v.counters, d.counters), last_seen = v.at
             FROM unnest($1::text[], $2::text[], $3::text[]) AS v(id, at, counters) WHERE d.id = v.id`,
          [id, at, col<Extract<StatusUpdate, { kind: 'seen' }>>((u) => (u.counters === undefined ? null : JSON.stringify(u.counters)))],
        );
        return;
    }
  }

  /** As deploymentFingerprint of ../daemons.ts: the same facts, compared only with itself (FINGERPRINT_SQL). */
  async deploymentFingerprint(accountId: string, zoneId: string | null): Promise<string> {
    return (await this.rows<{ fp: string }>(FINGERPRINT_SQL, [accountId, zoneId]))[0]!.fp;
  }
}

/**
 * The deployment fingerprint of ../daemons.ts in one statement (one snapshot,
 * so it needs no transaction of its own: PgStore runs it on the pool): the
 * entrypoints' latest versions with their version rows' tokens, the rulesets
 * their execute rules name at the versions they run, and the generations of
 * the account's lists and of the managed lists. Each hub asks it after every
 * change signal, for each group: as six statements inside a read transaction
 * (eight round trips) it took 1.3-4 ms per group of the channel bench's
 * replicas; $2 is the zone (null: the account level only).
 */
export const FINGERPRINT_SQL = `
  WITH e AS (
    SELECT 0 AS k, r.id, r.latest_version AS v, t.token FROM rulesets r LEFT JOIN ruleset_versions t ON t.ruleset_id = r.id AND t.version = r.latest_version
      WHERE r.account_id = $1 AND r.zone_id IS NULL AND r.phase = 'network_transit' AND r.kind = 'root'
    UNION ALL
    SELECT 1, r.id, r.latest_version, t.token FROM rulesets r LEFT JOIN ruleset_versions t ON t.ruleset_id = r.id AND t.version = r.latest_version
      WHERE $2::text IS NOT NULL AND r.zone_id = $2::text AND r.phase = 'network_transit' AND r.kind = 'zone'
  )
  SELECT json_build_array(
    (SELECT coalesce(json_agg(json_build_array(e.k, e.id, e.v, e.token) ORDER BY e.k), '[]') FROM e),
    (SELECT coalesce(json_agg(json_build_array(x.ruleset_id, x.target_id, x.target_version, r.latest_version,
        (SELECT token FROM ruleset_versions WHERE ruleset_id = x.target_id AND version = coalesce(x.target_version, r.latest_version)))
        ORDER BY x.ruleset_id COLLATE "C", x.target_id COLLATE "C"), '[]')
      FROM ruleset_execute_refs x LEFT JOIN rulesets r ON r.id = x.target_id WHERE x.ruleset_id IN (SELECT id FROM e)),
    (SELECT coalesce(json_agg(json_build_array(id, generation) ORDER BY id COLLATE "C"), '[]') FROM lists WHERE account_id = $1),
    (SELECT coalesce(json_agg(json_build_array(name, generation) ORDER BY name COLLATE "C"), '[]') FROM managed_lists)
  )::text AS fp`;
