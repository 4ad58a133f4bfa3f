// Load balancer monitors and pools, origin health and health events on
// PostgreSQL: LoadBalancingRepo as ../load-balancing.ts keeps it on SQLite,
// statement for statement, so the API answers the same. Runs only on the
// context's client. Where SQLite's single writer made read-then-write safe,
// the row read is locked (FOR UPDATE), so it holds at any isolation level.
// Text is ordered COLLATE "C" (bytes, as SQLite's BINARY), whatever the
// database's locale: pool names sort the same on both backends.

import { MoatError } from '../../errors/index.js';
import type { Health, HealthEvent } from '../health-event.js';
import { newId, nowStamp } from '../ids.js';
import { monitorOf, originOf, poolOf, type HealthEventRow, type MonitorDb, type MonitorRow, type OriginDb, type OriginHealthRow, type PoolDb, type PoolRow, type ProbeRecord } from '../load-balancing.js';
import type { LoadBalancingRepo } from '../types.js';
import { errorCode, isConnectionError, RETRYABLE_STATES } from './connection.js';
import type { PgRepoContext } from './pg-repo-context.js';

const POOL_COLUMNS = 'id, account_id, name, monitor_id, body, created_on, modified_on';
const MONITOR_COLUMNS = 'id, account_id, body, created_on, modified_on';
// Not SELECT *: PostgreSQL's health_events also has rowid (migration 9), which the API must not see.
const EVENT_COLUMNS = 'id, account_id, pool_id, event_source, origin_name, origin_address, old_health, new_health, reason, at';

/** LoadBalancingRepo on PostgreSQL. */
export class PgLoadBalancingRepo implements LoadBalancingRepo {
  /**
   * `poolsWritten`: Store.onPoolsWritten's listeners (PgStore passes its own
   * array, which its onPoolsWritten pushes to); each pool write schedules
   * them with ctx.afterCommit, so they run once the pools are committed.
   */
  constructor(
    private readonly ctx: PgRepoContext,
    private readonly poolsWritten: readonly (() => void)[] = [],
  ) {}

  private async rows<R>(sql: string, params: unknown[] = []): Promise<R[]> {
    return (await this.ctx.client.query(sql, params)).rows as R[];
  }

  private async row<R>(sql: string, params: unknown[] = []): Promise<R | undefined> {
    return (await this.rows<R>(sql, params))[0];
  }

  private async run(sql: string, params: unknown[] = []): Promise<number> {
    return (await this.ctx.client.query(sql, params)).rowCount ?? 0;
  }

  private wrotePools(): void {
    const listeners = this.poolsWritten;
    if (listeners.length > 0) this.ctx.afterCommit(() => listeners.forEach((l) => l()));
  }

  async poolExists(accountId: string, poolId: string): Promise<boolean> {
    return (await this.row('SELECT 1 FROM lb_pools WHERE id = $1 AND account_id = $2', [poolId, accountId])) !== undefined;
  }

  legacyPools(): Promise<{ accountId: string; poolId: string; poolName: string; notificationEmail: string }[]> {
    return this.rows(
      `SELECT account_id AS "accountId", id AS "poolId", name AS "poolName", body::jsonb ->> 'notification_email' AS "notificationEmail" FROM lb_pools
       WHERE coalesce(body::jsonb ->> 'notification_email', '') <> '' ORDER BY account_id COLLATE "C", name COLLATE "C"`,
    );
  }

  // ---- monitors

  async createMonitor(accountId: string, body: Record<string, unknown>): Promise<MonitorRow> {
    const id = newId();
    const now = nowStamp();
    await this.run('INSERT INTO accounts (id, created_on) VALUES ($1, $2) ON CONFLICT DO NOTHING', [accountId, now]);
    await this.run('INSERT INTO lb_monitors (id, account_id, body, created_on, modified_on) VALUES ($1, $2, $3, $4, $5)', [id, accountId, JSON.stringify(body), now, now]);
    return this.monitorOrThrow(accountId, id);
  }

  async monitor(accountId: string, id: string): Promise<MonitorRow | undefined> {
    const r = await this.row<MonitorDb>(`SELECT ${MONITOR_COLUMNS} FROM lb_monitors WHERE account_id = $1 AND id = $2`, [accountId, id]);
    return r === undefined ? undefined : monitorOf(r);
  }

  async monitorOrThrow(accountId: string, id: string, lock = false): Promise<MonitorRow> {
    const r = await this.row<MonitorDb>(`SELECT ${MONITOR_COLUMNS} FROM lb_monitors WHERE account_id = $1 AND id = $2${lock ? ' FOR UPDATE' : ''}`, [accountId, id]);
    if (r === undefined) throw new MoatError('LB_MONITOR_NOT_FOUND', `No monitor ${id} in this account`);
    return monitorOf(r);
  }

  async monitors(accountId: string): Promise<MonitorRow[]> {
    return (await this.rows<MonitorDb>(`SELECT ${MONITOR_COLUMNS} FROM lb_monitors WHERE account_id = $1 ORDER BY created_on COLLATE "C", id COLLATE "C"`, [accountId])).map(monitorOf);
  }

  async updateMonitor(accountId: string, id: string, update: (current: Record<string, unknown>) => Record<string, unknown>): Promise<MonitorRow> {
    const current = await this.monitorOrThrow(accountId, id, true);
    const body = update(current.body);
    await this.run('UPDATE lb_monitors SET body = $1, modified_on = $2 WHERE id = $3', [JSON.stringify(body), nowStamp(), id]);
    return this.monitorOrThrow(accountId, id);
  }

  async deleteMonitor(accountId: string, id: string): Promise<void> {
    await this.monitorOrThrow(accountId, id, true);
    const users = await this.rows<{ name: string }>('SELECT name FROM lb_pools WHERE monitor_id = $1 ORDER BY name COLLATE "C" LIMIT 6', [id]);
    if (users.length > 0) {
      const names = users.slice(0, 5).map((u) => `"${u.name}"`).join(', ') + (users.length > 5 ? ', ...' : '');
      throw new MoatError('LB_MONITOR_IN_USE', `Monitor ${id} is used by pool ${names}: remove it from the pools first`);
    }
    await this.run('DELETE FROM lb_monitors WHERE id = $1', [id]);
  }

  // ---- pools

  private async checkMonitorRef(accountId: string, monitorId: string | null): Promise<void> {
    // FOR SHARE: a monitor deleted by a concurrent transaction cannot vanish under the pool that now names it.
    if (monitorId !== null && (await this.row('SELECT 1 FROM lb_monitors WHERE account_id = $1 AND id = $2 FOR SHARE', [accountId, monitorId])) === undefined) {
      throw new MoatError('LB_MONITOR_UNKNOWN', `monitor ${monitorId} does not exist in this account`, { pointer: '/monitor' });
    }
  }

  async createPool(accountId: string, name: string, monitorId: string | null, body: Record<string, unknown>): Promise<PoolRow> {
    await this.checkMonitorRef(accountId, monitorId);
    const id = newId();
    const now = nowStamp();
    await this.run('INSERT INTO accounts (id, created_on) VALUES ($1, $2) ON CONFLICT DO NOTHING', [accountId, now]);
    await this.run('INSERT INTO lb_pools (id, account_id, name, monitor_id, body, created_on, modified_on) VALUES ($1, $2, $3, $4, $5, $6, $7)', [
      id,
      accountId,
      name,
      monitorId,
      JSON.stringify(body),
      now,
      now,
    ]);
    const pool = await this.poolOrThrow(accountId, id);
    this.wrotePools();
    return pool;
  }

  async pool(accountId: string, id: string): Promise<PoolRow | undefined> {
    const r = await this.row<PoolDb>(`SELECT ${POOL_COLUMNS} FROM lb_pools WHERE account_id = $1 AND id = $2`, [accountId, id]);
    return r === undefined ? undefined : poolOf(r);
  }

  async poolOrThrow(accountId: string, id: string, lock = false): Promise<PoolRow> {
    const r = await this.row<PoolDb>(`SELECT ${POOL_COLUMNS} FROM lb_pools WHERE account_id = $1 AND id = $2${lock ? ' FOR UPDATE' : ''}`, [accountId, id]);
    if (r === undefined) throw new MoatError('LB_POOL_NOT_FOUND', `No pool ${id} in this account`);
    return poolOf(r);
  }

  async pools(accountId: string, offset: number, limit: number, monitorId: string | null = null): Promise<{ rows: PoolRow[]; total: number }> {
    const where = 'account_id = $1 AND ($2::text IS NULL OR monitor_id = $2)';
    const rows = (
      await this.rows<PoolDb>(`SELECT ${POOL_COLUMNS} FROM lb_pools WHERE ${where} ORDER BY name COLLATE "C", id COLLATE "C" LIMIT $3 OFFSET $4`, [accountId, monitorId, limit, offset])
    ).map(poolOf);
    const { n } = (await this.row<{ n: number }>(`SELECT count(*) AS n FROM lb_pools WHERE ${where}`, [accountId, monitorId]))!;
    return { rows, total: n };
  }

  async updatePool(accountId: string, id: string, update: (current: PoolRow) => { name: string; monitorId: string | null; body: Record<string, unknown> }): Promise<PoolRow> {
    const current = await this.poolOrThrow(accountId, id, true);
    const next = update(current);
    await this.checkMonitorRef(accountId, next.monitorId);
    await this.run('UPDATE lb_pools SET name = $1, monitor_id = $2, body = $3, modified_on = $4 WHERE id = $5', [next.name, next.monitorId, JSON.stringify(next.body), nowStamp(), id]);
    const pool = await this.poolOrThrow(accountId, id);
    this.wrotePools();
    return pool;
  }

  async deletePool(accountId: string, id: string): Promise<void> {
    await this.poolOrThrow(accountId, id, true);
    await this.run('DELETE FROM lb_pools WHERE id = $1', [id]);
    this.wrotePools();
  }

  async bulkSetNotificationEmail(accountId: string, offset: number, limit: number, email: string): Promise<PoolRow[]> {
    const page = (
      await this.rows<PoolDb>(`SELECT ${POOL_COLUMNS} FROM lb_pools WHERE account_id = $1 ORDER BY name COLLATE "C", id COLLATE "C" LIMIT $2 OFFSET $3 FOR UPDATE`, [accountId, limit, offset])
    ).map(poolOf);
    const now = nowStamp();
    for (const p of page) await this.run('UPDATE lb_pools SET body = $1, modified_on = $2 WHERE id = $3', [JSON.stringify({ ...p.body, notification_email: email }), now, p.id]);
    const out: PoolRow[] = [];
    for (const p of page) out.push(await this.poolOrThrow(accountId, p.id));
    this.wrotePools();
    return out;
  }

  // ---- health

  async changeFingerprint(): Promise<string> {
    const r = await this.row<{ fp: string }>(
      "SELECT (SELECT count(*) || '/' || coalesce(max(modified_on COLLATE \"C\"), '') FROM lb_pools) || '|' || (SELECT count(*) || '/' || coalesce(max(modified_on COLLATE \"C\"), '') FROM lb_monitors) AS fp",
    );
    return r!.fp;
  }

  async monitoredPools(): Promise<{ pool: PoolRow; monitor: MonitorRow }[]> {
    const rows = await this.rows<PoolDb & { m_id: string; m_account_id: string; m_body: string; m_created_on: string; m_modified_on: string }>(
      `SELECT p.id, p.account_id, p.name, p.monitor_id, p.body, p.created_on, p.modified_on,
         m.id AS m_id, m.account_id AS m_account_id, m.body AS m_body, m.created_on AS m_created_on, m.modified_on AS m_modified_on
       FROM lb_pools p JOIN lb_monitors m ON m.id = p.monitor_id ORDER BY p.id COLLATE "C"`,
    );
    return rows
      .map((r) => ({
        pool: poolOf(r),
        monitor: monitorOf({ id: r.m_id, account_id: r.m_account_id, body: r.m_body, created_on: r.m_created_on, modified_on: r.m_modified_on }),
      }))
      .filter((x) => x.pool.body.enabled !== false);
  }

  async originHealth(poolId: string): Promise<Map<string, OriginHealthRow>> {
    const rows = await this.rows<OriginDb>(
      'SELECT pool_id, origin_name, address, health, ups, downs, failure_reason, response_code, rtt_ms, checked_on FROM lb_origin_health WHERE pool_id = $1 ORDER BY origin_name COLLATE "C"',
      [poolId],
    );
    return new Map(rows.map((r) => [r.origin_name, originOf(r)]));
  }

  async poolHealth(poolId: string): Promise<Health | null> {
    const r = await this.row<{ health: string | null }>('SELECT health FROM lb_pool_health WHERE pool_id = $1', [poolId]);
    return (r?.health ?? null) as Health | null;
  }

  /**
   * Each probe in a savepoint of the caller's transaction: its rows, its
   * events, and the store's listeners (ctx.healthListeners, writing through
   * ctx.tx) called with each event there. A probe whose listener (or rows)
   * throws is rolled back alone and its error returned in its place; an
   * error of the transaction itself (a serialization failure, a lost
   * connection) is thrown, so the store retries or reports the whole.
   */
  async recordProbes(probes: readonly ProbeRecord[]): Promise<(HealthEvent[] | Error)[]> {
    const client = this.ctx.client;
    const out: (HealthEvent[] | Error)[] = [];
    for (const p of probes) {
      await client.query('SAVEPOINT moat_probe');
      try {
        const events = await this.recordProbeRows(p);
        for (const e of events) for (const l of this.ctx.healthListeners) await l(e, this.ctx.tx);
        await client.query('RELEASE SAVEPOINT moat_probe');
        out.push(events);
      } catch (err) {
        if (RETRYABLE_STATES.has(errorCode(err)) || isConnectionError(err)) throw err;
        await client.query('ROLLBACK TO SAVEPOINT moat_probe');
        await client.query('RELEASE SAVEPOINT moat_probe');
        out.push(err instanceof Error ? err : new Error(String(err)));
      }
    }
    return out;
  }

  private async recordProbeRows({ poolId, decide, fence }: ProbeRecord): Promise<HealthEvent[]> {
    // Fenced: a result of a lease lost meanwhile (its successor has a new
    // epoch, or it was given up) is dropped. FOR SHARE holds the lease row to
    // the commit, so a takeover waits for this result and its successor then
    // reads it; never the other way round.
    if (fence !== undefined && (await this.row('SELECT 1 FROM moat_leases WHERE name = $1 AND owner = $2 AND epoch = $3 FOR SHARE', [fence.lease, fence.owner, fence.epoch])) === undefined) {
      return [];
    }
    // The pool may have been deleted since the probe began: nothing to record.
    // Locked (FOR UPDATE): two replicas recording origins of one pool take
    // turns, each seeing the other's rows, as SQLite's single writer gives.
    if ((await this.row('SELECT 1 FROM lb_pools WHERE id = $1 FOR UPDATE', [poolId])) === undefined) return [];
    const { origin, poolHealth, events } = decide(await this.originHealth(poolId), await this.poolHealth(poolId));
    await this.run(
      `INSERT INTO lb_origin_health (pool_id, origin_name, address, health, ups, downs, failure_reason, response_code, rtt_ms, checked_on)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
       ON CONFLICT (pool_id, origin_name) DO UPDATE SET address = excluded.address, health = excluded.health, ups = excluded.ups, downs = excluded.downs,
         failure_reason = excluded.failure_reason, response_code = excluded.response_code, rtt_ms = excluded.rtt_ms, checked_on = excluded.checked_on`,
      [poolId, origin.originName, origin.address, origin.health, origin.ups, origin.downs, origin.failureReason, origin.responseCode, origin.rttMs, origin.checkedOn],
    );
    await this.run('INSERT INTO lb_pool_health (pool_id, health) VALUES ($1, $2) ON CONFLICT (pool_id) DO UPDATE SET health = excluded.health', [poolId, poolHealth]);
    for (const e of events) {
      await this.run(
        'INSERT INTO health_events (id, account_id, pool_id, event_source, origin_name, origin_address, old_health, new_health, reason, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)',
        [e.id, e.accountId, e.pool.id, e.eventSource, e.origin?.name ?? null, e.origin?.address ?? null, e.oldHealth, e.newHealth, e.reason, e.at],
      );
    }
    return events;
  }

  async markStale(): Promise<void> {
    await this.run('UPDATE lb_origin_health SET checked_on = NULL');
  }

  healthEvents(accountId: string): Promise<HealthEventRow[]> {
    return this.rows<HealthEventRow>(`SELECT ${EVENT_COLUMNS} FROM health_events WHERE account_id = $1 ORDER BY at COLLATE "C", rowid`, [accountId]);
  }
}
