// Rulesets and their immutable versions on PostgreSQL: RulesetsRepo over one
// transaction's client, a faithful translation of ../rulesets.ts. Version
// numbers are last_version + 1 read under a row lock (FOR UPDATE) of the
// ruleset in a serializable transaction, so writers through several replicas
// get 1, 2, 3 ... without gaps or duplicates: the second of two concurrent
// writers waits for the first, fails with 40001 and runs again from the
// start (PgDatabase.write), reading the new last_version. SQLite's rowid is
// the identity column rowid (pg-migrations.ts, migration 9).

import { deepFreeze, newVersion, RS_COLUMNS, STAMP_COLUMNS, type Refs, type RulesetRow, type StoredRule, type VersionRow, type VersionStamp, type Visibility } from '../rulesets.js';
import type { RulesetsRepo } from '../types.js';
import type { PgRepoContext } from './pg-repo-context.js';
import { memo, VERSION_CACHE_SIZE, type PgShared } from './pg-shared.js';

// The rule pairs of a version ([[rule_id, rule_version], ...] as JSON text) in their order.
const RULE_PAIRS = 'jsonb_array_elements(v.rules::jsonb) WITH ORDINALITY AS j(value, ord)';

export class PgRulesetsRepo implements RulesetsRepo {
  constructor(
    private readonly ctx: PgRepoContext,
    private readonly shared: PgShared,
  ) {}

  private async rows<R>(sql: string, params: unknown[] = []): Promise<R[]> {
    return (await this.ctx.client.query(sql, params)).rows as R[];
  }

  private async one<R>(sql: string, params: unknown[] = []): Promise<R | undefined> {
    return (await this.rows<R>(sql, params))[0];
  }

  get(id: string): Promise<RulesetRow | undefined> {
    return this.one(`SELECT ${RS_COLUMNS} FROM rulesets WHERE id = $1`, [id]);
  }

  entrypoint(level: Visibility, phase: string): Promise<RulesetRow | undefined> {
    return level.zoneId === null
      ? this.one(`SELECT ${RS_COLUMNS} FROM rulesets WHERE account_id = $1 AND zone_id IS NULL AND phase = $2 AND kind = 'root'`, [level.accountId, phase])
      : this.one(`SELECT ${RS_COLUMNS} FROM rulesets WHERE zone_id = $1 AND phase = $2 AND kind = 'zone'`, [level.zoneId, phase]);
  }

  managedByName(name: string): Promise<RulesetRow | undefined> {
    return this.one(`SELECT ${RS_COLUMNS} FROM rulesets WHERE kind = 'managed' AND name = $1`, [name]);
  }

  managed(): Promise<RulesetRow[]> {
    return this.rows(`SELECT ${RS_COLUMNS} FROM rulesets WHERE kind = 'managed' ORDER BY name COLLATE "C"`);
  }

  list(level: Visibility, afterRowid: number, limit: number): Promise<RulesetRow[]> {
    return level.zoneId === null
      ? this.rows(`SELECT ${RS_COLUMNS} FROM rulesets WHERE ((account_id = $1 AND zone_id IS NULL) OR kind = 'managed') AND rowid > $2 ORDER BY rowid LIMIT $3`, [
          level.accountId,
          afterRowid,
          limit,
        ])
      : this.rows(`SELECT ${RS_COLUMNS} FROM rulesets WHERE (zone_id = $1 OR kind = 'managed') AND rowid > $2 ORDER BY rowid LIMIT $3`, [level.zoneId, afterRowid, limit]);
  }

  stamp(id: string, version?: number): Promise<VersionStamp | undefined> {
    return version === undefined
      ? this.one(`SELECT ${STAMP_COLUMNS} FROM rulesets r JOIN ruleset_versions v ON v.ruleset_id = r.id AND v.version = r.latest_version WHERE r.id = $1`, [id])
      : this.one(`SELECT ${STAMP_COLUMNS} FROM rulesets r JOIN ruleset_versions v ON v.ruleset_id = r.id AND v.version = $1 WHERE r.id = $2`, [version, id]);
  }

  async entrypointStamp(level: Visibility, phase: string, version?: number): Promise<VersionStamp | undefined> {
    // Remembered while the change epoch is unchanged (as RulesetStore.entrypointStamp).
    const epoch = this.shared.epoch();
    const key = stampMemoKey(level, phase, version);
    const m = this.shared.stamps.get(key);
    if (m !== undefined && m.epoch === epoch) return m.stamp;
    const stamp = await this.readEntrypointStamp(level, phase, version);
    // Remembered once the transaction ended (see PgUsersRepo.verifyKey).
    this.ctx.afterCommit(() => memo(this.shared.stamps, key, { epoch, stamp }));
    return stamp;
  }

  private readEntrypointStamp(level: Visibility, phase: string, version?: number): Promise<VersionStamp | undefined> {
    const args: unknown[] = version === undefined ? [] : [version];
    const on = version === undefined ? 'v.version = r.latest_version' : 'v.version = $1';
    const n = args.length;
    return level.zoneId === null
      ? this.one(
          `SELECT ${STAMP_COLUMNS} FROM rulesets r JOIN ruleset_versions v ON v.ruleset_id = r.id AND ${on} WHERE r.account_id = $${n + 1} AND r.zone_id IS NULL AND r.phase = $${n + 2} AND r.kind = 'root'`,
          [...args, level.accountId, phase],
        )
      : this.one(`SELECT ${STAMP_COLUMNS} FROM rulesets r JOIN ruleset_versions v ON v.ruleset_id = r.id AND ${on} WHERE r.zone_id = $${n + 1} AND r.phase = $${n + 2} AND r.kind = 'zone'`, [
          ...args,
          level.zoneId,
          phase,
        ]);
  }

  async version(id: string, version: number): Promise<VersionRow | undefined> {
    // The row is always read (by primary key): a version deleted by another
    // replica is not served, and its token tells it from a reused number.
    const r = await this.one<{ version: number; description: string; last_updated: string; token: number }>(
      'SELECT version, description, last_updated, token FROM ruleset_versions WHERE ruleset_id = $1 AND version = $2',
      [id, version],
    );
    if (r === undefined) return undefined;
    const key = `${id}/${version}/${r.token}`;
    const hit = this.shared.versions.get(key);
    if (hit !== undefined) return hit;
    const bodies = await this.rows<{ body: string }>(
      `SELECT rr.body FROM ruleset_versions v CROSS JOIN LATERAL ${RULE_PAIRS}
       JOIN ruleset_rules rr ON rr.ruleset_id = v.ruleset_id AND rr.rule_id = j.value ->> 0 AND rr.rule_version = (j.value ->> 1)::bigint
       WHERE v.ruleset_id = $1 AND v.version = $2 ORDER BY j.ord`,
      [id, version],
    );
    return this.remember(key, { version: r.version, description: r.description, last_updated: r.last_updated, rules: bodies.map((b) => JSON.parse(b.body) as StoredRule) });
  }

  private remember(key: string, row: VersionRow): VersionRow {
    deepFreeze(row);
    const cache = this.shared.versions;
    if (cache.size >= VERSION_CACHE_SIZE) cache.delete(cache.keys().next().value!);
    cache.set(key, row);
    return row;
  }

  versions(id: string): Promise<{ version: number; description: string; last_updated: string }[]> {
    return this.rows('SELECT version, description, last_updated FROM ruleset_versions WHERE ruleset_id = $1 ORDER BY version', [id]);
  }

  async insert(row: Omit<RulesetRow, 'rowid' | 'latest_version' | 'last_version'>): Promise<void> {
    await this.ctx.client.query(
      'INSERT INTO rulesets (id, account_id, zone_id, kind, phase, name, description, latest_version, last_version, created_on) VALUES ($1, $2, $3, $4, $5, $6, $7, 0, 0, $8)',
      [row.id, row.account_id, row.zone_id, row.kind, row.phase, row.name, row.description, row.created_on],
    );
  }

  async addVersion(id: string, description: string, lastUpdated: string, rules: readonly StoredRule[], refs: Refs): Promise<number> {
    // The row lock orders concurrent writers of this ruleset (see the header).
    const row = await this.one<{ last_version: number }>('SELECT last_version FROM rulesets WHERE id = $1 FOR UPDATE', [id]);
    if (row === undefined) throw new Error(`ruleset ${id} vanished inside its transaction`);
    const v = row.last_version + 1;
    // One statement for every rule of the version (arrays as parameters): a
    // round trip per rule made POST rule on a 20-rule entrypoint ~50
    // statements, each a round trip, held in the replica's one write transaction.
    if (rules.length > 0) {
      await this.ctx.client.query(
        `INSERT INTO ruleset_rules (ruleset_id, rule_id, rule_version, body)
           SELECT $1, r.id, r.version, r.body FROM unnest($2::text[], $3::bigint[], $4::text[]) AS r(id, version, body) ON CONFLICT DO NOTHING`,
        [id, rules.map((r) => r.id), rules.map((r) => Number(r.version)), rules.map((r) => JSON.stringify(r))],
      );
    }
    const n = newVersion(id, v, description, lastUpdated, rules);
    await this.ctx.client.query('INSERT INTO ruleset_versions (ruleset_id, version, description, last_updated, rules, token) VALUES ($1, $2, $3, $4, $5, $6)', n.values);
    // Cached under its token: a rolled-back attempt's entry is never asked for.
    this.remember(n.key, n.cached);
    await this.ctx.client.query('UPDATE rulesets SET latest_version = $1, last_version = $2, description = $3 WHERE id = $4', [v, v, description, id]);
    await this.setRefs(id, refs);
    return v;
  }

  async setRefs(id: string, refs: Refs): Promise<void> {
    const c = this.ctx.client;
    await c.query('DELETE FROM ruleset_list_refs WHERE ruleset_id = $1', [id]);
    await c.query('DELETE FROM ruleset_execute_refs WHERE ruleset_id = $1', [id]);
    if (refs.lists.length > 0) {
      await c.query('INSERT INTO ruleset_list_refs (ruleset_id, list_name) SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING', [id, [...refs.lists]]);
    }
    // One row per target, the last named winning (as one statement per target
    // did: DO UPDATE may not touch a row twice in one statement).
    const executes = new Map(refs.executes.map((e) => [e.id, e.version] as const));
    if (executes.size > 0) {
      await c.query(
        `INSERT INTO ruleset_execute_refs (ruleset_id, target_id, target_version)
           SELECT $1, e.id, e.version FROM unnest($2::text[], $3::bigint[]) AS e(id, version)
           ON CONFLICT (ruleset_id, target_id) DO UPDATE SET target_version = EXCLUDED.target_version`,
        [id, [...executes.keys()], [...executes.values()]],
      );
    }
  }

  async deleteVersion(id: string, version: number): Promise<void> {
    const c = this.ctx.client;
    await c.query('DELETE FROM ruleset_versions WHERE ruleset_id = $1 AND version = $2', [id, version]);
    await c.query(
      `DELETE FROM ruleset_rules rr WHERE rr.ruleset_id = $1 AND NOT EXISTS (
         SELECT 1 FROM ruleset_versions v CROSS JOIN LATERAL ${RULE_PAIRS}
         WHERE v.ruleset_id = rr.ruleset_id AND j.value ->> 0 = rr.rule_id AND (j.value ->> 1)::bigint = rr.rule_version)`,
      [id],
    );
    const top = await this.one<{ v: number | null }>('SELECT max(version) AS v FROM ruleset_versions WHERE ruleset_id = $1', [id]);
    if (top !== undefined && top.v !== null) {
      const latest = (await this.version(id, top.v))!;
      await c.query('UPDATE rulesets SET latest_version = $1, description = $2 WHERE id = $3', [top.v, latest.description, id]);
    }
  }

  async delete(id: string): Promise<void> {
    await this.ctx.client.query('DELETE FROM rulesets WHERE id = $1', [id]);
  }

  executedBy(targetId: string): Promise<{ ruleset_id: string; target_version: number | null }[]> {
    return this.rows('SELECT ruleset_id, target_version FROM ruleset_execute_refs WHERE target_id = $1', [targetId]);
  }
}

/** The key of an entrypoint's remembered stamp in PgShared.stamps (also read by PgStore without a transaction). */
export function stampMemoKey(level: Visibility, phase: string, version?: number): string {
  return `${level.accountId}/${level.zoneId ?? ''}/${phase}/${version ?? ''}`;
}
