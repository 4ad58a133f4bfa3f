// Rulesets and their immutable versions in the database. This is persistence
// only: the API layer validates and decides; these functions read and write
// rows, always inside a transaction the caller holds.

import { randomInt } from 'node:crypto';
import type { Database } from './database.js';

/** A rule as stored in a version (and returned by the API). */
export interface StoredRule {
  id: string;
  version: string;
  action: string;
  expression: string;
  description: string;
  last_updated: string;
  ref: string;
  enabled: boolean;
  action_parameters?: Record<string, unknown>;
  logging?: { enabled: boolean };
  categories?: string[];
}

/** The ruleset row (its identity and latest version number). */
export interface RulesetRow {
  rowid: number;
  id: string;
  account_id: string | null;
  zone_id: string | null;
  kind: string;
  phase: string;
  name: string;
  description: string;
  latest_version: number;
  last_version: number;
  created_on: string;
}

/** One version. */
export interface VersionRow {
  version: number;
  description: string;
  last_updated: string;
  rules: StoredRule[];
}

/**
 * What a cached read of a version needs: the ruleset's visibility and the
 * identity of one of its versions, its number and the random token of its row.
 * Versions are immutable and a token is never given twice, so (id, version,
 * token) names one version's content for good.
 */
export interface VersionStamp {
  id: string;
  kind: string;
  account_id: string | null;
  zone_id: string | null;
  stamp_version: number;
  stamp_token: number;
}

/** Which rulesets a listing shows. */
export interface Visibility {
  accountId: string;
  zoneId: string | null;
}

export const RS_COLUMNS = 'rowid, id, account_id, zone_id, kind, phase, name, description, latest_version, last_version, created_on';
// Only what a stamp needs: every column read is a value converted per request.
export const STAMP_COLUMNS = 'r.id, r.kind, r.account_id, r.zone_id, v.version AS stamp_version, v.token AS stamp_token';

/**
 * A new version v of ruleset `id`: its ruleset_versions values (ruleset_id,
 * version, description, last_updated, rules as [id, version] pairs, a fresh
 * random token), and its version-cache entry with the key it is cached under
 * (id/version/token). Both backends write versions with this.
 */
export function newVersion(
  id: string,
  v: number,
  description: string,
  lastUpdated: string,
  rules: readonly StoredRule[],
): { values: [string, number, string, string, string, number]; key: string; cached: VersionRow } {
  const token = randomInt(1, 2 ** 47);
  return {
    values: [id, v, description, lastUpdated, JSON.stringify(rules.map((r) => [r.id, Number(r.version)])), token],
    key: `${id}/${v}/${token}`,
    cached: { version: v, description, last_updated: lastUpdated, rules: rules.map((r) => structuredClone(r)) },
  };
}

export function deepFreeze<T>(o: T): T {
  if (typeof o === 'object' && o !== null && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}

// Versions are immutable, so their parsed rules can be shared: parsing the
// rules JSON was 8.9% of the server's CPU in a profile of GET entrypoint of 50
// rules under load (the scenario of bench/api.bench.ts). Entries are frozen (a
// caller cannot change a cached version) and keyed by the row's random token
// as well as its number.
const VERSION_CACHE_SIZE = 512;

/** Ruleset rows and versions of one database. */
export class RulesetStore {
  private readonly cache = new Map<string, VersionRow>();
  /** Entrypoint stamps by level, phase and version, with the change epoch they were read at. */
  private readonly stamps = new Map<string, { epoch: string; stamp: VersionStamp | undefined }>();

  constructor(readonly store: Database) {}

  /** A ruleset by id, or undefined. */
  get(id: string): RulesetRow | undefined {
    return this.store.db.prepare(`SELECT ${RS_COLUMNS} FROM rulesets WHERE id = ?`).get(id) as RulesetRow | undefined;
  }

  /** The entrypoint of a phase at a level, or undefined. */
  entrypoint(level: Visibility, phase: string): RulesetRow | undefined {
    return (
      level.zoneId === null
        ? this.store.db.prepare(`SELECT ${RS_COLUMNS} FROM rulesets WHERE account_id = ? AND zone_id IS NULL AND phase = ? AND kind = 'root'`).get(level.accountId, phase)
        : this.store.db.prepare(`SELECT ${RS_COLUMNS} FROM rulesets WHERE zone_id = ? AND phase = ? AND kind = 'zone'`).get(level.zoneId, phase)
    ) as RulesetRow | undefined;
  }

  /** A managed ruleset by name, or undefined. */
  managedByName(name: string): RulesetRow | undefined {
    return this.store.db.prepare(`SELECT ${RS_COLUMNS} FROM rulesets WHERE kind = 'managed' AND name = ?`).get(name) as RulesetRow | undefined;
  }

  /** Every managed ruleset, by name. */
  managed(): RulesetRow[] {
    return this.store.db.prepare(`SELECT ${RS_COLUMNS} FROM rulesets WHERE kind = 'managed' ORDER BY name`).all() as RulesetRow[];
  }

  /**
   * Rulesets visible at a level, in creation order, after `afterRowid`: the
   * level's own and the managed ones (which every account may deploy).
   */
  list(level: Visibility, afterRowid: number, limit: number): RulesetRow[] {
    return (
      level.zoneId === null
        ? this.store.db
            .prepare(`SELECT ${RS_COLUMNS} FROM rulesets WHERE ((account_id = ? AND zone_id IS NULL) OR kind = 'managed') AND rowid > ? ORDER BY rowid LIMIT ?`)
            .all(level.accountId, afterRowid, limit)
        : this.store.db
            .prepare(`SELECT ${RS_COLUMNS} FROM rulesets WHERE (zone_id = ? OR kind = 'managed') AND rowid > ? ORDER BY rowid LIMIT ?`)
            .all(level.zoneId, afterRowid, limit)
    ) as RulesetRow[];
  }

  // The stamps: one statement each (a consistent snapshot without a
  // transaction), by primary key or the entrypoint's index. They are what every
  // cached read of a version pays, so that a cache keyed by them cannot serve
  // a version another process deleted or made no longer the latest.

  /** A ruleset and the stamp of its latest version (or of `version`), or undefined when either is missing. */
  stamp(id: string, version?: number): VersionStamp | undefined {
    const db = this.store.db;
    return (
      version === undefined
        ? db.prepare(`SELECT ${STAMP_COLUMNS} FROM rulesets r JOIN ruleset_versions v ON v.ruleset_id = r.id AND v.version = r.latest_version WHERE r.id = ?`).get(id)
        : db.prepare(`SELECT ${STAMP_COLUMNS} FROM rulesets r JOIN ruleset_versions v ON v.ruleset_id = r.id AND v.version = ? WHERE r.id = ?`).get(version, id)
    ) as VersionStamp | undefined;
  }

  /** The entrypoint of a phase at a level and the stamp of its latest version (or of `version`), or undefined. */
  entrypointStamp(level: Visibility, phase: string, version?: number): VersionStamp | undefined {
    // Remembered until anything commits (see Database.changeEpoch): one
    // statement reading no table instead of a join of two.
    const epoch = this.store.changeEpoch();
    const key = `${level.accountId}/${level.zoneId ?? ''}/${phase}/${version ?? ''}`;
    const memo = this.stamps.get(key);
    if (memo !== undefined && memo.epoch === epoch) return memo.stamp;
    const stamp = this.readEntrypointStamp(level, phase, version);
    if (this.stamps.size >= 10_000) this.stamps.clear();
    this.stamps.set(key, { epoch, stamp });
    return stamp;
  }

  private readEntrypointStamp(level: Visibility, phase: string, version?: number): VersionStamp | undefined {
    const db = this.store.db;
    const on = version === undefined ? 'v.version = r.latest_version' : 'v.version = ?';
    const args: unknown[] = version === undefined ? [] : [version];
    return (
      level.zoneId === null
        ? db
            .prepare(`SELECT ${STAMP_COLUMNS} FROM rulesets r JOIN ruleset_versions v ON v.ruleset_id = r.id AND ${on} WHERE r.account_id = ? AND r.zone_id IS NULL AND r.phase = ? AND r.kind = 'root'`)
            .get(...args, level.accountId, phase)
        : db.prepare(`SELECT ${STAMP_COLUMNS} FROM rulesets r JOIN ruleset_versions v ON v.ruleset_id = r.id AND ${on} WHERE r.zone_id = ? AND r.phase = ? AND r.kind = 'zone'`).get(...args, level.zoneId, phase)
    ) as VersionStamp | undefined;
  }

  /** One version with its rules (frozen), or undefined. */
  version(id: string, version: number): VersionRow | undefined {
    // The row is always read (by primary key, cheap): a version deleted by
    // another process is not served, and the token tells this row from one
    // that had the same number and was rolled back.
    const r = this.store.db.prepare('SELECT version, description, last_updated, token FROM ruleset_versions WHERE ruleset_id = ? AND version = ?').get(id, version) as
      | { version: number; description: string; last_updated: string; token: number }
      | undefined;
    if (r === undefined) return undefined;
    const key = `${id}/${version}/${r.token}`;
    const hit = this.cache.get(key);
    if (hit !== undefined) return hit;
    const bodies = this.store.db
      .prepare(
        `SELECT rr.body FROM ruleset_versions v, json_each(v.rules) j
         JOIN ruleset_rules rr ON rr.ruleset_id = v.ruleset_id AND rr.rule_id = j.value ->> 0 AND rr.rule_version = j.value ->> 1
         WHERE v.ruleset_id = ? AND v.version = ? ORDER BY j.key`,
      )
      .all(id, version) as { body: string }[];
    return this.remember(key, { version: r.version, description: r.description, last_updated: r.last_updated, rules: bodies.map((b) => JSON.parse(b.body) as StoredRule) });
  }

  private remember(key: string, row: VersionRow): VersionRow {
    deepFreeze(row);
    if (this.cache.size >= VERSION_CACHE_SIZE) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(key, row);
    return row;
  }

  /** Every version (without rules), oldest first. */
  versions(id: string): { version: number; description: string; last_updated: string }[] {
    return this.store.db.prepare('SELECT version, description, last_updated FROM ruleset_versions WHERE ruleset_id = ? ORDER BY version').all(id) as {
      version: number;
      description: string;
      last_updated: string;
    }[];
  }

  /** Inserts a new ruleset row (version numbers set by the first addVersion). */
  insert(row: Omit<RulesetRow, 'rowid' | 'latest_version' | 'last_version'>): void {
    this.store.db
      .prepare(
        'INSERT INTO rulesets (id, account_id, zone_id, kind, phase, name, description, latest_version, last_version, created_on) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, ?)',
      )
      .run(row.id, row.account_id, row.zone_id, row.kind, row.phase, row.name, row.description, row.created_on);
  }

  /**
   * Adds the next version (last_version + 1, never a reused number), makes it
   * the latest, and records what it references. Returns its number.
   */
  addVersion(id: string, description: string, lastUpdated: string, rules: readonly StoredRule[], refs: Refs): number {
    const row = this.get(id);
    if (row === undefined) throw new Error(`ruleset ${id} vanished inside its transaction`);
    const v = row.last_version + 1;
    // A rule version's body is written once: unchanged rules keep their (id, version) row.
    const addRule = this.store.db.prepare('INSERT OR IGNORE INTO ruleset_rules (ruleset_id, rule_id, rule_version, body) VALUES (?, ?, ?, ?)');
    for (const r of rules) addRule.run(id, r.id, Number(r.version), JSON.stringify(r));
    const n = newVersion(id, v, description, lastUpdated, rules);
    this.store.db.prepare('INSERT INTO ruleset_versions (ruleset_id, version, description, last_updated, rules, token) VALUES (?, ?, ?, ?, ?, ?)').run(...n.values);
    // The next write to this ruleset starts from this version: keep it parsed.
    this.remember(n.key, n.cached);
    this.store.db.prepare('UPDATE rulesets SET latest_version = ?, last_version = ?, description = ? WHERE id = ?').run(v, v, description, id);
    this.setRefs(id, refs);
    return v;
  }

  /** Replaces the reference rows of a ruleset (they describe its latest version). */
  setRefs(id: string, refs: Refs): void {
    const db = this.store.db;
    db.prepare('DELETE FROM ruleset_list_refs WHERE ruleset_id = ?').run(id);
    db.prepare('DELETE FROM ruleset_execute_refs WHERE ruleset_id = ?').run(id);
    const addList = db.prepare('INSERT OR IGNORE INTO ruleset_list_refs (ruleset_id, list_name) VALUES (?, ?)');
    for (const name of refs.lists) addList.run(id, name);
    const addExec = db.prepare('INSERT OR REPLACE INTO ruleset_execute_refs (ruleset_id, target_id, target_version) VALUES (?, ?, ?)');
    for (const e of refs.executes) addExec.run(id, e.id, e.version);
  }

  /** Deletes one version; the caller has checked it may. Moves `latest` back when needed. */
  deleteVersion(id: string, version: number): void {
    this.store.db.prepare('DELETE FROM ruleset_versions WHERE ruleset_id = ? AND version = ?').run(id, version);
    // Rule bodies no remaining version refers to go too.
    this.store.db
      .prepare(
        `DELETE FROM ruleset_rules WHERE ruleset_id = ? AND NOT EXISTS (
           SELECT 1 FROM ruleset_versions v, json_each(v.rules) j
           WHERE v.ruleset_id = ruleset_rules.ruleset_id AND j.value ->> 0 = ruleset_rules.rule_id AND j.value ->> 1 = ruleset_rules.rule_version)`,
      )
      .run(id);
    const top = this.store.db.prepare('SELECT max(version) AS v FROM ruleset_versions WHERE ruleset_id = ?').get(id) as { v: number | null };
    if (top.v !== null) {
      const latest = this.version(id, top.v)!;
      this.store.db.prepare('UPDATE rulesets SET latest_version = ?, description = ? WHERE id = ?').run(top.v, latest.description, id);
    }
  }

  /** Deletes a ruleset with all its versions and references. */
  delete(id: string): void {
    this.store.db.prepare('DELETE FROM rulesets WHERE id = ?').run(id);
  }

  /** Rulesets whose latest version executes `targetId` (with the version they pin, null = latest). */
  executedBy(targetId: string): { ruleset_id: string; target_version: number | null }[] {
    return this.store.db.prepare('SELECT ruleset_id, target_version FROM ruleset_execute_refs WHERE target_id = ?').all(targetId) as {
      ruleset_id: string;
      target_version: number | null;
    }[];
  }
}

/** What a version refers to. */
export interface Refs {
  lists: readonly string[];
  executes: readonly { id: string; version: number | null }[];
}
