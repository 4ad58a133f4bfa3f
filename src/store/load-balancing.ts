// Load balancer monitors and pools (#18) and the health the health monitor
// derives for them: rows of the store, bodies as the API validated them (JSON),
// plus the per-origin state machine's persisted state and the health edges.
// Validation and the API's shapes live in the api folder; the state machine's
// rules in the health folder: this module only reads and writes.

import { MoatError } from '../errors/index.js';
import type { Database } from './database.js';
import type { Health, HealthEvent, HealthEventListener } from './health-event.js';
import { newId, nowStamp } from './ids.js';

/** A stored monitor: its validated body (every field filled with its default). */
export interface MonitorRow {
  id: string;
  accountId: string;
  body: Record<string, unknown>;
  createdOn: string;
  modifiedOn: string;
}

/** A stored pool: its validated body (without read-only fields). */
export interface PoolRow {
  id: string;
  accountId: string;
  name: string;
  monitorId: string | null;
  body: Record<string, unknown>;
  createdOn: string;
  modifiedOn: string;
}

/** The persisted state of one origin's health state machine, and its latest probe. */
export interface OriginHealthRow {
  poolId: string;
  originName: string;
  address: string;
  /** null: unknown (no result yet, or reset by a restart's first result). */
  health: Health | null;
  /** Consecutive passes / failures counted towards the next flip. */
  ups: number;
  downs: number;
  failureReason: string;
  responseCode: number | null;
  rttMs: number | null;
  checkedOn: string | null;
}

// Rows as both backends read them and their mappers to the repository's
// objects (postgres/pg-load-balancing.ts imports these).
export type PoolDb = { id: string; account_id: string; name: string; monitor_id: string | null; body: string; created_on: string; modified_on: string };
export type MonitorDb = { id: string; account_id: string; body: string; created_on: string; modified_on: string };
export type OriginDb = {
  pool_id: string;
  origin_name: string;
  address: string;
  health: string | null;
  ups: number;
  downs: number;
  failure_reason: string;
  response_code: number | null;
  rtt_ms: number | null;
  checked_on: string | null;
};

export const poolOf = (r: PoolDb): PoolRow => ({
  id: r.id,
  accountId: r.account_id,
  name: r.name,
  monitorId: r.monitor_id,
  body: JSON.parse(r.body) as Record<string, unknown>,
  createdOn: r.created_on,
  modifiedOn: r.modified_on,
});
export const monitorOf = (r: MonitorDb): MonitorRow => ({ id: r.id, accountId: r.account_id, body: JSON.parse(r.body) as Record<string, unknown>, createdOn: r.created_on, modifiedOn: r.modified_on });
export const originOf = (r: OriginDb): OriginHealthRow => ({
  poolId: r.pool_id,
  originName: r.origin_name,
  address: r.address,
  health: r.health as Health | null,
  ups: r.ups,
  downs: r.downs,
  failureReason: r.failure_reason,
  responseCode: r.response_code,
  rttMs: r.rtt_ms,
  checkedOn: r.checked_on,
});

/** Monitors, pools and their health, over one database. */
export class LoadBalancingStore {
  private readonly listeners: HealthEventListener[] = [];
  private readonly poolListeners: (() => void)[] = [];

  constructor(private readonly store: Database) {}

  private get db() {
    return this.store.db;
  }

  /** Whether `poolId` is a pool of the account (notification policies' pool_id filters name only those). */
  poolExists(accountId: string, poolId: string): boolean {
    return this.store.db.prepare('SELECT 1 FROM lb_pools WHERE id = ? AND account_id = ?').get(poolId, accountId) !== undefined;
  }

  /** Pools whose legacy notification_email is not empty, for the deprecation notices. */
  legacyPools(): { accountId: string; poolId: string; poolName: string; notificationEmail: string }[] {
    return this.store.db
      .prepare(
        "SELECT account_id AS accountId, id AS poolId, name AS poolName, json_extract(body, '$.notification_email') AS notificationEmail FROM lb_pools " +
          "WHERE coalesce(json_extract(body, '$.notification_email'), '') <> '' ORDER BY account_id, name",
      )
      .all() as { accountId: string; poolId: string; poolName: string; notificationEmail: string }[];
  }

  /** Registers a listener called, inside the recording transaction, with every health event. */
  onHealthEvent(listener: HealthEventListener): void {
    this.listeners.push(listener);
  }

  /** Registers a listener called after every pool write (the deprecation notices re-read the legacy addresses). */
  onPoolsWritten(listener: () => void): void {
    this.poolListeners.push(listener);
  }

  private poolsWritten<T>(result: T): T {
    for (const l of this.poolListeners) l();
    return result;
  }

  // ---- monitors

  createMonitor(accountId: string, body: Record<string, unknown>): MonitorRow {
    return this.store.write(() => {
      const id = newId();
      const now = nowStamp();
      this.db.prepare('INSERT OR IGNORE INTO accounts (id, created_on) VALUES (?, ?)').run(accountId, now);
      this.db.prepare('INSERT INTO lb_monitors (id, account_id, body, created_on, modified_on) VALUES (?, ?, ?, ?, ?)').run(id, accountId, JSON.stringify(body), now, now);
      return this.monitorOrThrow(accountId, id);
    });
  }

  monitor(accountId: string, id: string): MonitorRow | undefined {
    const r = this.db.prepare('SELECT * FROM lb_monitors WHERE account_id = ? AND id = ?').get(accountId, id) as MonitorDb | undefined;
    return r === undefined ? undefined : monitorOf(r);
  }

  monitorOrThrow(accountId: string, id: string): MonitorRow {
    const m = this.monitor(accountId, id);
    if (m === undefined) throw new MoatError('LB_MONITOR_NOT_FOUND', `No monitor ${id} in this account`);
    return m;
  }

  monitors(accountId: string): MonitorRow[] {
    return (this.db.prepare('SELECT * FROM lb_monitors WHERE account_id = ? ORDER BY created_on, id').all(accountId) as MonitorDb[]).map(monitorOf);
  }

  /** Replaces a monitor's body; `update` gets the current body (PATCH merges into it). */
  updateMonitor(accountId: string, id: string, update: (current: Record<string, unknown>) => Record<string, unknown>): MonitorRow {
    return this.store.write(() => {
      const current = this.monitorOrThrow(accountId, id);
      const body = update(current.body);
      this.db.prepare('UPDATE lb_monitors SET body = ?, modified_on = ? WHERE id = ?').run(JSON.stringify(body), nowStamp(), id);
      return this.monitorOrThrow(accountId, id);
    });
  }

  /** Deletes a monitor; refused (LB_MONITOR_IN_USE, naming the pools) while a pool uses it. */
  deleteMonitor(accountId: string, id: string): void {
    this.store.write(() => {
      this.monitorOrThrow(accountId, id);
      const users = this.db.prepare('SELECT name FROM lb_pools WHERE monitor_id = ? ORDER BY name LIMIT 6').all(id) as { name: string }[];
      if (users.length > 0) {
        const names = users.slice(0, 5).map((u) => `"${u.name}"`).join(', ') + (users.length > 5 ? ', ...' : '');
        throw new MoatError('LB_MONITOR_IN_USE', `Monitor ${id} is used by pool ${names}: remove it from the pools first`);
      }
      this.db.prepare('DELETE FROM lb_monitors WHERE id = ?').run(id);
    });
  }

  // ---- pools

  private checkMonitorRef(accountId: string, monitorId: string | null): void {
    if (monitorId !== null && this.monitor(accountId, monitorId) === undefined) {
      throw new MoatError('LB_MONITOR_UNKNOWN', `monitor ${monitorId} does not exist in this account`, { pointer: '/monitor' });
    }
  }

  createPool(accountId: string, name: string, monitorId: string | null, body: Record<string, unknown>): PoolRow {
    return this.poolsWritten(this.store.write(() => {
      this.checkMonitorRef(accountId, monitorId);
      const id = newId();
      const now = nowStamp();
      this.db.prepare('INSERT OR IGNORE INTO accounts (id, created_on) VALUES (?, ?)').run(accountId, now);
      this.db
        .prepare('INSERT INTO lb_pools (id, account_id, name, monitor_id, body, created_on, modified_on) VALUES (?, ?, ?, ?, ?, ?, ?)')
        .run(id, accountId, name, monitorId, JSON.stringify(body), now, now);
      return this.poolOrThrow(accountId, id);
    }));
  }

  pool(accountId: string, id: string): PoolRow | undefined {
    const r = this.db.prepare('SELECT * FROM lb_pools WHERE account_id = ? AND id = ?').get(accountId, id) as PoolDb | undefined;
    return r === undefined ? undefined : poolOf(r);
  }

  poolOrThrow(accountId: string, id: string): PoolRow {
    const p = this.pool(accountId, id);
    if (p === undefined) throw new MoatError('LB_POOL_NOT_FOUND', `No pool ${id} in this account`);
    return p;
  }

  /** A page of the account's pools, by name (then id), and how many there are. */
  pools(accountId: string, offset: number, limit: number, monitorId: string | null = null): { rows: PoolRow[]; total: number } {
    return this.store.read(() => {
      const where = 'account_id = ? AND (? IS NULL OR monitor_id = ?)';
      const rows = (this.db.prepare(`SELECT * FROM lb_pools WHERE ${where} ORDER BY name, id LIMIT ? OFFSET ?`).all(accountId, monitorId, monitorId, limit, offset) as PoolDb[]).map(poolOf);
      const { n } = this.db.prepare(`SELECT count(*) AS n FROM lb_pools WHERE ${where}`).get(accountId, monitorId, monitorId) as { n: number };
      return { rows, total: n };
    });
  }

  /** Replaces a pool's body (PUT or PATCH, decided by `update`). */
  updatePool(accountId: string, id: string, update: (current: PoolRow) => { name: string; monitorId: string | null; body: Record<string, unknown> }): PoolRow {
    return this.poolsWritten(this.store.write(() => {
      const current = this.poolOrThrow(accountId, id);
      const next = update(current);
      this.checkMonitorRef(accountId, next.monitorId);
      this.db
        .prepare('UPDATE lb_pools SET name = ?, monitor_id = ?, body = ?, modified_on = ? WHERE id = ?')
        .run(next.name, next.monitorId, JSON.stringify(next.body), nowStamp(), id);
      return this.poolOrThrow(accountId, id);
    }));
  }

  deletePool(accountId: string, id: string): void {
    this.poolsWritten(
      this.store.write(() => {
        this.poolOrThrow(accountId, id);
        this.db.prepare('DELETE FROM lb_pools WHERE id = ?').run(id);
      }),
    );
  }

  /** Sets notification_email on one page of pools (by name), in one transaction; returns the pools changed. */
  bulkSetNotificationEmail(accountId: string, offset: number, limit: number, email: string): PoolRow[] {
    return this.poolsWritten(this.store.write(() => {
      const page = (this.db.prepare('SELECT * FROM lb_pools WHERE account_id = ? ORDER BY name, id LIMIT ? OFFSET ?').all(accountId, limit, offset) as PoolDb[]).map(poolOf);
      const now = nowStamp();
      const st = this.db.prepare('UPDATE lb_pools SET body = ?, modified_on = ? WHERE id = ?');
      for (const p of page) st.run(JSON.stringify({ ...p.body, notification_email: email }), now, p.id);
      return page.map((p) => this.poolOrThrow(accountId, p.id));
    }));
  }

  // ---- health

  /** Changes whenever a pool or monitor is created, changed or deleted (what the health monitor polls). */
  changeFingerprint(): string {
    const r = this.db
      .prepare(
        "SELECT (SELECT count(*) || '/' || ifnull(max(modified_on), '') FROM lb_pools) || '|' || (SELECT count(*) || '/' || ifnull(max(modified_on), '') FROM lb_monitors) AS fp",
      )
      .get() as { fp: string };
    return r.fp;
  }

  /** Every enabled pool with a monitor, with its account's monitor (what the prober probes). */
  monitoredPools(): { pool: PoolRow; monitor: MonitorRow }[] {
    const rows = this.db
      .prepare(
        `SELECT p.*, m.id AS m_id, m.account_id AS m_account_id, m.body AS m_body, m.created_on AS m_created_on, m.modified_on AS m_modified_on
         FROM lb_pools p JOIN lb_monitors m ON m.id = p.monitor_id ORDER BY p.id`,
      )
      .all() as (PoolDb & { m_id: string; m_account_id: string; m_body: string; m_created_on: string; m_modified_on: string })[];
    return rows
      .map((r) => ({
        pool: poolOf(r),
        monitor: monitorOf({ id: r.m_id, account_id: r.m_account_id, body: r.m_body, created_on: r.m_created_on, modified_on: r.m_modified_on }),
      }))
      .filter((x) => x.pool.body.enabled !== false);
  }

  /** The persisted state of a pool's origins, by origin name. */
  originHealth(poolId: string): Map<string, OriginHealthRow> {
    const rows = this.db.prepare('SELECT * FROM lb_origin_health WHERE pool_id = ?').all(poolId) as OriginDb[];
    return new Map(rows.map((r) => [r.origin_name, originOf(r)]));
  }

  /** A pool's health as last recorded (null: unknown). */
  poolHealth(poolId: string): Health | null {
    const r = this.db.prepare('SELECT health FROM lb_pool_health WHERE pool_id = ?').get(poolId) as { health: string | null } | undefined;
    return (r?.health ?? null) as Health | null;
  }

  /**
   * Records probes: each `decide` gets the pool's origin rows and its recorded
   * health (read inside the transaction, so two origins of one pool recorded
   * together see each other) and returns the origin's new row, the pool's
   * health and the edges; the rows and events are written and each event
   * handed to every listener. All the probes share one transaction (one
   * commit, one fsync), each in its own savepoint: a listener that throws
   * rolls back that probe's rows and events only (the next probe finds the
   * edge again), and its error is returned in that probe's place.
   */
  recordProbes(probes: readonly ProbeRecord[]): (HealthEvent[] | Error)[] {
    const out: (HealthEvent[] | Error)[] = [];
    // Without the fsync of synchronous=FULL: a commit that blocked the event
    // loop for hundreds of ms on a busy disk made probes that late. Still
    // atomic and safe from a crash of the process (WAL); a power cut may lose
    // the last batches, state and events together, and the next probes find
    // those edges again from the state before them.
    this.db.pragma('synchronous = NORMAL');
    try {
      this.store.write(() => {
        for (const p of probes) {
          try {
            // A nested transaction function runs in a savepoint (better-sqlite3).
            out.push(this.db.transaction(() => this.recordProbe(p))());
          } catch (err) {
            out.push(err instanceof Error ? err : new Error(String(err)));
          }
        }
      });
    } finally {
      this.db.pragma('synchronous = FULL');
    }
    return out;
  }

  /** Writes one probe's rows and events and tells this repository's (synchronous) listeners, in the caller's transaction. */
  recordProbe(p: ProbeRecord): HealthEvent[] {
    const events = this.recordProbeRows(p);
    for (const e of events) for (const l of this.listeners) l(e);
    return events;
  }

  /**
   * Writes one probe's rows and events, without telling the listeners: the
   * asynchronous store (sqlite-store.ts) calls its own listeners after this,
   * in the same savepoint.
   */
  recordProbeRows({ poolId, decide }: ProbeRecord): HealthEvent[] {
    // The pool may have been deleted since the probe began: nothing to record.
    if (this.db.prepare('SELECT 1 FROM lb_pools WHERE id = ?').get(poolId) === undefined) return [];
    const { origin, poolHealth, events } = decide(this.originHealth(poolId), this.poolHealth(poolId));
    this.db
      .prepare(
        `INSERT INTO lb_origin_health (pool_id, origin_name, address, health, ups, downs, failure_reason, response_code, rtt_ms, checked_on)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (pool_id, origin_name) DO UPDATE SET address = excluded.address, health = excluded.health, ups = excluded.ups, downs = excluded.downs,
           failure_reason = excluded.failure_reason, response_code = excluded.response_code, rtt_ms = excluded.rtt_ms, checked_on = excluded.checked_on`,
      )
      .run(poolId, origin.originName, origin.address, origin.health, origin.ups, origin.downs, origin.failureReason, origin.responseCode, origin.rttMs, origin.checkedOn);
    this.db.prepare('INSERT INTO lb_pool_health (pool_id, health) VALUES (?, ?) ON CONFLICT (pool_id) DO UPDATE SET health = excluded.health').run(poolId, poolHealth);
    const insert = this.db.prepare(
      'INSERT INTO health_events (id, account_id, pool_id, event_source, origin_name, origin_address, old_health, new_health, reason, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
    );
    for (const e of events) insert.run(e.id, e.accountId, e.pool.id, e.eventSource, e.origin?.name ?? null, e.origin?.address ?? null, e.oldHealth, e.newHealth, e.reason, e.at);
    return events;
  }

  /** After a restart: every origin's latest probe is forgotten (health shown unknown until its first result), its health kept as the baseline of edges. */
  markStale(): void {
    this.store.write(() => this.db.prepare('UPDATE lb_origin_health SET checked_on = NULL').run());
  }

  /** Recorded health events of an account, oldest first. */
  healthEvents(accountId: string): HealthEventRow[] {
    return this.db.prepare('SELECT * FROM health_events WHERE account_id = ? ORDER BY at, rowid').all(accountId) as HealthEventRow[];
  }
}

/** One probe to record (see recordProbes). */
export interface ProbeRecord {
  poolId: string;
  /**
   * The lease the probe ran under (replicas sharing the probes, issue #20):
   * the PostgreSQL store records the result only while moat_leases still has
   * this name, owner and epoch, so a holder that overslept its deadline cannot
   * write over its successor's state or raise an edge twice. SQLite has one
   * prober and ignores it.
   */
  fence?: { lease: string; owner: string; epoch: number } | undefined;
  decide: (origins: Map<string, OriginHealthRow>, poolHealth: Health | null) => { origin: OriginHealthRow; poolHealth: Health | null; events: HealthEvent[] };
}

/** A health_events row. */
export interface HealthEventRow {
  id: string;
  account_id: string;
  pool_id: string;
  event_source: 'pool' | 'origin';
  origin_name: string | null;
  origin_address: string | null;
  old_health: Health | null;
  new_health: Health;
  reason: string;
  at: string;
}
