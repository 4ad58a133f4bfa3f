// Daemons of the control channel: their identities (a token bound to one
// account and optionally one of its zones, shown once and stored as its
// SHA-256, as API tokens are) and their fleet status (connected, what they
// run, their last rejection and counters). Status is written by the hub that
// holds a daemon's connection and read by `moat daemons list` and the fleet
// API, possibly in other processes: it lives in the database, not in memory.

import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { MoatError } from '../errors/index.js';
import type { Database } from './database.js';
import { isId, newId, nowStamp } from './ids.js';

/** The prefix of every daemon token (tells it apart from an API token in logs and config files). */
export const DAEMON_TOKEN_PREFIX = 'moatd_';

export const DAEMON_TOKEN = /^moatd_[A-Za-z0-9_-]{40}$/;

/** A ruleset a daemon runs: an entrypoint or a managed ruleset, at a version. */
export interface RunningRuleset {
  id: string;
  version: string;
}

/** A rejected bundle as the daemon reported it. */
export interface Rejection {
  digest: string;
  on: string;
  errors: Array<{ code: number; message: string; pointer?: string | undefined }>;
}

/** Counters a daemon reports with its heartbeats. */
export interface DaemonCounters {
  passed: number;
  dropped: number;
  undecodable: number;
  swaps: number;
}

/** One daemon as the CLI and the fleet API show it (never the token). */
export interface DaemonInfo {
  id: string;
  name: string;
  account_id: string;
  zone_id: string | null;
  created_on: string;
  revoked_on: string | null;
  connected: boolean;
  connected_since: string | null;
  disconnected_at: string | null;
  remote_address: string | null;
  moat_version: string | null;
  /** The digest of the bundle it last applied (or was up to date with). */
  digest: string | null;
  versions: { account: string | null; zone: string | null };
  /** Every ruleset of the bundle it runs: entrypoints and managed rulesets. */
  rulesets: RunningRuleset[];
  applied_on: string | null;
  last_rejection: Rejection | null;
  counters: DaemonCounters | null;
  last_seen: string | null;
}

/** A daemons row as stored (the PostgreSQL repository reads the same). */
export interface DaemonRow {
  id: string;
  name: string;
  account_id: string;
  zone_id: string | null;
  created_on: string;
  revoked_on: string | null;
  connected: number;
  connected_since: string | null;
  disconnected_at: string | null;
  remote_address: string | null;
  moat_version: string | null;
  digest: string | null;
  account_version: string | null;
  zone_version: string | null;
  runs: string;
  applied_on: string | null;
  last_rejection: string | null;
  counters: string | null;
  last_seen: string | null;
}

export const DAEMON_COLUMNS =
  'id, name, account_id, zone_id, created_on, revoked_on, connected, connected_since, disconnected_at, remote_address, moat_version, digest, account_version, zone_version, runs, applied_on, last_rejection, counters, last_seen';

export function daemonInfo(r: DaemonRow): DaemonInfo {
  return {
    id: r.id,
    name: r.name,
    account_id: r.account_id,
    zone_id: r.zone_id,
    created_on: r.created_on,
    revoked_on: r.revoked_on,
    connected: r.connected === 1,
    connected_since: r.connected_since,
    disconnected_at: r.disconnected_at,
    remote_address: r.remote_address,
    moat_version: r.moat_version,
    digest: r.digest,
    versions: { account: r.account_version, zone: r.zone_version },
    rulesets: JSON.parse(r.runs) as RunningRuleset[],
    applied_on: r.applied_on,
    last_rejection: r.last_rejection === null ? null : (JSON.parse(r.last_rejection) as Rejection),
    counters: r.counters === null ? null : (JSON.parse(r.counters) as DaemonCounters),
    last_seen: r.last_seen,
  };
}

export function tokenDigest(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

/** A daemon's identity as the hub needs it on hello. */
export interface DaemonIdentity {
  id: string;
  name: string;
  account_id: string;
  zone_id: string | null;
  revoked: boolean;
}

/** The daemons of one database. */
export class Daemons {
  constructor(private readonly store: Database) {}

  /** See deploymentFingerprint (the function). */
  deploymentFingerprint(accountId: string, zoneId: string | null): string {
    return deploymentFingerprint(this.store, accountId, zoneId);
  }

  /**
   * Registers a daemon of an account (and optionally one of its zones) under a
   * name unique in the account; returns its token in clear (shown once).
   */
  create(input: { accountId: string; zoneId?: string | undefined; name: string }): { info: DaemonInfo; token: string } {
    const { name, zoneId } = daemonInput(input);
    const token = DAEMON_TOKEN_PREFIX + randomBytes(30).toString('base64url');
    const id = newId();
    this.store.write(() => {
      const db = this.store.db;
      if (db.prepare('SELECT 1 FROM accounts WHERE id = ?').get(input.accountId) === undefined) {
        throw new MoatError('USER_NOT_FOUND', `no account ${input.accountId} (accounts are created with their first user: \`moat users create --account\`)`);
      }
      if (zoneId !== null) {
        const z = db.prepare('SELECT account_id FROM zones WHERE id = ?').get(zoneId) as { account_id: string } | undefined;
        if (z?.account_id !== input.accountId) throw new MoatError('USER_BAD_INPUT', `zone ${zoneId} is not a zone of account ${input.accountId}`);
      }
      if (db.prepare('SELECT 1 FROM daemons WHERE account_id = ? AND name = ?').get(input.accountId, name) !== undefined) {
        throw new MoatError('USER_BAD_INPUT', `account ${input.accountId} already has a daemon named "${name}" (names are unique per account; see \`moat daemons list\`)`);
      }
      db.prepare('INSERT INTO daemons (id, account_id, zone_id, name, hash, created_on) VALUES (?, ?, ?, ?, ?, ?)').run(id, input.accountId, zoneId, name, tokenDigest(token), nowStamp());
    });
    return { info: this.get(id)!, token };
  }

  /** One daemon by id, or undefined. */
  get(id: string): DaemonInfo | undefined {
    const r = this.store.db.prepare(`SELECT ${DAEMON_COLUMNS} FROM daemons WHERE id = ?`).get(id) as DaemonRow | undefined;
    return r === undefined ? undefined : daemonInfo(r);
  }

  /** Daemons (of one account when given), by name; `page` counts from 1. */
  list(filter: { accountId?: string | undefined } = {}): DaemonInfo[] {
    const rows = (
      filter.accountId === undefined
        ? this.store.db.prepare(`SELECT ${DAEMON_COLUMNS} FROM daemons ORDER BY account_id, name, id`).all()
        : this.store.db.prepare(`SELECT ${DAEMON_COLUMNS} FROM daemons WHERE account_id = ? ORDER BY name, id`).all(filter.accountId)
    ) as DaemonRow[];
    return rows.map(daemonInfo);
  }

  /** The daemon a token names (revoked ones too, flagged), or undefined for an unknown token. */
  verify(token: string): DaemonIdentity | undefined {
    if (!DAEMON_TOKEN.test(token)) return undefined;
    const h = tokenDigest(token);
    const r = this.store.db.prepare('SELECT id, name, account_id, zone_id, hash, revoked_on FROM daemons WHERE hash = ?').get(h) as
      | { id: string; name: string; account_id: string; zone_id: string | null; hash: Buffer; revoked_on: string | null }
      | undefined;
    // The index finds the row; the comparison that decides is constant-time.
    if (r === undefined || !timingSafeEqual(r.hash, h)) return undefined;
    return { id: r.id, name: r.name, account_id: r.account_id, zone_id: r.zone_id, revoked: r.revoked_on !== null };
  }

  /**
   * Revokes a daemon by id, or by name (within `accountId` when given; a name
   * used in several accounts needs the account or the id). Returns it.
   */
  revoke(idOrName: string, accountId?: string): DaemonInfo {
    const id = this.store.write(() => {
      const db = this.store.db;
      let rows = db.prepare('SELECT id, account_id, revoked_on FROM daemons WHERE id = ?').all(idOrName) as { id: string; account_id: string; revoked_on: string | null }[];
      if (rows.length === 0) rows = db.prepare('SELECT id, account_id, revoked_on FROM daemons WHERE name = ?').all(idOrName) as typeof rows;
      if (accountId !== undefined) rows = rows.filter((r) => r.account_id === accountId);
      if (rows.length === 0) throw new MoatError('USER_NOT_FOUND', `no daemon ${idOrName} (see \`moat daemons list\`)`);
      if (rows.length > 1) throw new MoatError('USER_BAD_INPUT', `${rows.length} daemons are named "${idOrName}" (in different accounts): revoke by id (see \`moat daemons list\`)`);
      const row = rows[0]!;
      if (row.revoked_on !== null) throw new MoatError('USER_NOT_FOUND', `daemon ${idOrName} is already revoked (on ${row.revoked_on})`);
      db.prepare('UPDATE daemons SET revoked_on = ? WHERE id = ?').run(nowStamp(), row.id);
      return row.id;
    });
    return this.get(id)!;
  }

  /** Of `ids`, those revoked (the hub closes their connections). */
  revokedAmong(ids: readonly string[]): string[] {
    if (ids.length === 0) return [];
    const out: string[] = [];
    // Chunks keep the statement under SQLite's variable limit; few texts, so the statement cache holds them.
    for (let i = 0; i < ids.length; i += 500) {
      const chunk = ids.slice(i, i + 500);
      const rows = this.store.db.prepare(`SELECT id FROM daemons WHERE revoked_on IS NOT NULL AND id IN (${chunk.map(() => '?').join(',')})`).all(...chunk) as { id: string }[];
      for (const r of rows) out.push(r.id);
    }
    return out;
  }

  /**
   * Status writes of the hub, each batch in one IMMEDIATE transaction. Not
   * through Database.write: its commit listeners tell the hub that
   * deployments may have changed, and status never changes one.
   */
  recordStatus(updates: readonly StatusUpdate[]): void {
    if (updates.length === 0) return;
    const db = this.store.db;
    // Status is not worth an fsync: with synchronous=NORMAL a WAL commit is
    // durable at the next checkpoint or the next FULL commit, and a power cut
    // loses at most the last heartbeats' status, never an API write. The
    // fsync blocked the event loop (better-sqlite3 is synchronous) while
    // bundles were being pushed to 1,000 daemons.
    db.pragma('synchronous = NORMAL');
    try {
      this.statusTransaction(updates);
    } finally {
      db.pragma('synchronous = FULL');
    }
  }

  private statusTransaction(updates: readonly StatusUpdate[]): void {
    const db = this.store.db;
    db.transaction(() => {
      for (const u of updates) {
        const [sql, params] = statusStatement(u);
        db.prepare(sql).run(...params);
      }
    }).immediate();
  }
}

/** One status change the hub records. */
/** A new daemon's checked name (trimmed) and zone, or USER_BAD_INPUT; both backends check with this. */
export function daemonInput(input: { accountId: string; zoneId?: string | undefined; name: string }): { name: string; zoneId: string | null } {
  const name = input.name.trim();
  if (name === '' || name.length > 120 || [...name].some((ch) => ch.charCodeAt(0) < 0x20)) throw new MoatError('USER_BAD_INPUT', 'a daemon needs a --name of 1 to 120 printable characters');
  if (!isId(input.accountId)) throw new MoatError('USER_BAD_INPUT', `"${input.accountId}" is not an id: accounts are 32 lowercase hex characters`);
  const zoneId = input.zoneId ?? null;
  if (zoneId !== null && !isId(zoneId)) throw new MoatError('USER_BAD_INPUT', `"${zoneId}" is not an id: zones are 32 lowercase hex characters`);
  return { name, zoneId };
}

/**
 * The UPDATE that records one status update, with `?` placeholders (in order)
 * and its parameters: both backends run it (PostgreSQL numbers the placeholders).
 */
export function statusStatement(u: StatusUpdate): [sql: string, params: unknown[]] {
  switch (u.kind) {
    case 'connected':
      return ['UPDATE daemons SET connected = 1, connected_since = ?, remote_address = ?, moat_version = ?, last_seen = ? WHERE id = ?', [u.at, u.remoteAddress, u.moatVersion, u.at, u.id]];
    case 'disconnected':
      // Only the connection that is recorded: one the daemon opened since (to another control plane or replica) stays connected.
      return ['UPDATE daemons SET connected = 0, disconnected_at = ?, last_seen = ? WHERE id = ? AND connected_since = ?', [u.at, u.at, u.id, u.since]];
    case 'applied':
      return [
        'UPDATE daemons SET digest = ?, account_version = ?, zone_version = ?, runs = ?, applied_on = ?, last_seen = ? WHERE id = ?',
        [u.digest, u.versions.account, u.versions.zone, JSON.stringify(u.rulesets), u.at, u.at, u.id],
      ];
    case 'rejected':
      return ['UPDATE daemons SET last_rejection = ?, last_seen = ? WHERE id = ?', [JSON.stringify(u.rejection), u.at, u.id]];
    case 'seen':
      if (u.counters === undefined) return ['UPDATE daemons SET last_seen = ? WHERE id = ?', [u.at, u.id]];
      return ['UPDATE daemons SET counters = ?, last_seen = ? WHERE id = ?', [JSON.stringify(u.counters), u.at, u.id]];
  }
}

export type StatusUpdate =
  | { kind: 'connected'; id: string; at: string; remoteAddress: string; moatVersion: string }
  | { kind: 'disconnected'; id: string; at: string; since: string }
  | { kind: 'applied'; id: string; at: string; digest: string; versions: { account: string | null; zone: string | null }; rulesets: RunningRuleset[] }
  | { kind: 'rejected'; id: string; at: string; rejection: Rejection }
  | { kind: 'seen'; id: string; at: string; counters?: DaemonCounters | undefined };

/**
 * A cheap fingerprint of what an account (and zone) deploys, for the hub to
 * tell whether to rebuild its bundle after some commit: the entrypoints'
 * latest versions (with each version row's random token, so a number given
 * again after a deletion still differs), the rulesets their execute rules
 * name at the version they run, and the generation of every list of the
 * account and every managed list (a list not referenced changes it too: the
 * rebuild then finds the same bundle digest and sends nothing). A few indexed
 * reads, never a list's contents.
 */
export function deploymentFingerprint(store: Database, accountId: string, zoneId: string | null): string {
  const db = store.db;
  return store.read(() => {
    const entries = [
      db.prepare(`SELECT r.id, r.latest_version AS v, t.token FROM rulesets r LEFT JOIN ruleset_versions t ON t.ruleset_id = r.id AND t.version = r.latest_version
        WHERE r.account_id = ? AND r.zone_id IS NULL AND r.phase = 'network_transit' AND r.kind = 'root'`).get(accountId),
      zoneId === null
        ? undefined
        : db.prepare(`SELECT r.id, r.latest_version AS v, t.token FROM rulesets r LEFT JOIN ruleset_versions t ON t.ruleset_id = r.id AND t.version = r.latest_version
        WHERE r.zone_id = ? AND r.phase = 'network_transit' AND r.kind = 'zone'`).get(zoneId),
    ] as Array<{ id: string; v: number; token: number } | undefined>;
    const targets: unknown[] = [];
    for (const e of entries) {
      if (e === undefined) continue;
      targets.push(
        db
          .prepare(`SELECT x.target_id, x.target_version, r.latest_version,
              (SELECT token FROM ruleset_versions WHERE ruleset_id = x.target_id AND version = coalesce(x.target_version, r.latest_version)) AS token
            FROM ruleset_execute_refs x LEFT JOIN rulesets r ON r.id = x.target_id WHERE x.ruleset_id = ? ORDER BY x.target_id`)
          .all(e.id),
      );
    }
    const lists = db.prepare('SELECT id, generation FROM lists WHERE account_id = ? ORDER BY id').all(accountId);
    const managed = db.prepare('SELECT name, generation FROM managed_lists ORDER BY name').all();
    return JSON.stringify([entries, targets, lists, managed]);
  });
}
