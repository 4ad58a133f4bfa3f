// The notification outbox, its history, incidents and deprecation notices on
// PostgreSQL: OutboxRepo as outbox.ts keeps it on SQLite (same rows, same
// history, same ids). Claims lock the rows they take with FOR UPDATE SKIP
// LOCKED, so replicas claiming at once each get other rows, never waiting on
// one another's, and the lease (owner, expiry) keeps a claimed row from being
// claimed again until its attempt is recorded or the lease runs out; then it
// is recorded as interrupted and sent again under its same id (at-least-once).

import { newId, nowStamp, type AttemptOutcome, type HistoryObject, type NewOutboxRow, type OutboxRepo, type OutboxRow, type PgRepoContext } from '../store/index.js';
import type { NotificationPayload } from './notifier.js';
import { attemptError, gaveUpError, HISTORY_COLUMNS, HISTORY_DAYS, historyValues } from './outbox.js';

const HISTORY_INSERT = `INSERT INTO alert_history (${HISTORY_COLUMNS}) VALUES (${HISTORY_COLUMNS.split(',').map((_, i) => `$${i + 1}`).join(', ')})`;

/** OutboxRepo on PostgreSQL. */
export class PgOutboxRepo implements OutboxRepo {
  constructor(private readonly ctx: PgRepoContext) {}

  private async rows<R>(sql: string, params: unknown[] = []): Promise<R[]> {
    return (await this.ctx.client.query(sql, params)).rows as R[];
  }

  private async run(sql: string, params: unknown[] = []): Promise<number> {
    return (await this.ctx.client.query(sql, params)).rowCount ?? 0;
  }

  async claim(owner: string, now: number, leaseMs: number, limit: number): Promise<OutboxRow[]> {
    // A lease that ran out means an attempt whose outcome nobody recorded (its process stopped): say so in the history first.
    // SKIP LOCKED: a row another claimer is recording right now is its business.
    const expired = await this.rows<OutboxRow>(
      "SELECT * FROM alert_outbox WHERE status = 'pending' AND lease_owner IS NOT NULL AND lease_until_ms <= $1 ORDER BY next_attempt_ms, created, id COLLATE \"C\" FOR UPDATE SKIP LOCKED",
      [now],
    );
    for (const row of expired) await this.interrupted(row, now);
    const rows = await this.rows<OutboxRow>(
      `UPDATE alert_outbox SET lease_owner = $1, lease_until_ms = $2 WHERE id IN (
         SELECT id FROM alert_outbox WHERE status = 'pending' AND next_attempt_ms <= $3 AND (lease_until_ms IS NULL OR lease_until_ms <= $3)
         ORDER BY next_attempt_ms, created COLLATE "C", id COLLATE "C" LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING *`,
      [owner, now + leaseMs, now, limit],
    );
    return rows.sort((a, b) => a.next_attempt_ms - b.next_attempt_ms || a.created.localeCompare(b.created) || a.id.localeCompare(b.id));
  }

  async releaseDeadOwners(host: string, alive: (pid: number) => boolean, now: number = Date.now()): Promise<number> {
    const owners = await this.rows<{ owner: string }>("SELECT DISTINCT lease_owner AS owner FROM alert_outbox WHERE status = 'pending' AND lease_owner IS NOT NULL");
    let freed = 0;
    for (const { owner } of owners) {
      const m = /^(.*):(\d+):[^:]*$/.exec(owner);
      if (m === null || m[1] !== host || alive(Number(m[2]))) continue;
      const rows = await this.rows<OutboxRow>("SELECT * FROM alert_outbox WHERE status = 'pending' AND lease_owner = $1 ORDER BY next_attempt_ms, created, id COLLATE \"C\" FOR UPDATE", [owner]);
      for (const row of rows) await this.interrupted(row, now);
      freed += rows.length;
    }
    return freed;
  }

  /** As outbox.ts: the interrupted attempt in the history, the row due again at once under its same id. */
  private async interrupted(row: OutboxRow, now: number): Promise<void> {
    const owner = row.lease_owner ?? '?';
    await this.record(row, now, { ok: false, code: 9400, error: `attempt interrupted: the process delivering it (${owner}) stopped before its outcome was recorded; sent again with the same id` }, now);
  }

  async nextDue(): Promise<number | undefined> {
    const [r] = await this.rows<{ due: number | null }>("SELECT min(greatest(next_attempt_ms, coalesce(lease_until_ms, 0))) AS due FROM alert_outbox WHERE status = 'pending'");
    return r?.due ?? undefined;
  }

  async record(row: OutboxRow, now: number, outcome: AttemptOutcome, retryAt: number | undefined): Promise<'delivered' | 'retry' | 'gave_up' | 'stale'> {
    // Fencing: a worker that overran its lease must not write over its successor's claim (or a finished row).
    const [held] = await this.rows<{ n: number }>("SELECT count(*)::int AS n FROM alert_outbox WHERE id = $1 AND status = 'pending' AND lease_owner IS NOT DISTINCT FROM $2 AND attempts = $3", [row.id, row.lease_owner, row.attempts]);
    if (held?.n !== 1) return 'stale';
    const attempt = row.attempts + 1;
    const at = nowStamp(new Date(now));
    const payload = JSON.parse(row.payload) as NotificationPayload;
    const history = (outcome_: HistoryObject['outcome'], error: string | null) =>
      this.run(HISTORY_INSERT, historyValues(row, payload, at, outcome_, attempt, outcome.statusCode ?? null, error));
    if (outcome.ok) {
      await history('delivered', null);
      await this.run("UPDATE alert_outbox SET status = 'delivered', attempts = $1, lease_owner = NULL, lease_until_ms = NULL, last_error = NULL, done_at = $2 WHERE id = $3", [attempt, at, row.id]);
      return 'delivered';
    }
    const error = attemptError(outcome);
    await history('failed', error);
    if (retryAt === undefined || outcome.final === true) {
      await history('gave_up', gaveUpError(attempt, error));
      await this.run("UPDATE alert_outbox SET status = 'failed', attempts = $1, lease_owner = NULL, lease_until_ms = NULL, last_error = $2, done_at = $3 WHERE id = $4", [attempt, error, at, row.id]);
      return 'gave_up';
    }
    await this.run('UPDATE alert_outbox SET attempts = $1, next_attempt_ms = $2, lease_owner = NULL, lease_until_ms = NULL, last_error = $3 WHERE id = $4', [attempt, retryAt, error, row.id]);
    return 'retry';
  }

  async prune(now: number): Promise<number> {
    const cutoff = nowStamp(new Date(now - HISTORY_DAYS * 86_400_000));
    const h = await this.run('DELETE FROM alert_history WHERE sent < $1', [cutoff]);
    const o = await this.run("DELETE FROM alert_outbox WHERE status != 'pending' AND done_at < $1", [cutoff]);
    return h + o;
  }

  async history(accountId: string, q: { since?: string | undefined; before?: string | undefined; page: number; perPage: number }): Promise<{ items: HistoryObject[]; total: number }> {
    const args: unknown[] = [accountId];
    const where = ['account_id = $1'];
    if (q.since !== undefined) {
      args.push(q.since);
      where.push(`sent >= $${args.length}`);
    }
    if (q.before !== undefined) {
      args.push(q.before);
      where.push(`sent < $${args.length}`);
    }
    const w = where.join(' AND ');
    const [{ n }] = (await this.rows<{ n: number }>(`SELECT count(*) AS n FROM alert_history WHERE ${w}`, args)) as [{ n: number }];
    const items = await this.rows<HistoryObject>(
      `SELECT id, alert_body, alert_type, description, mechanism, mechanism_type, name, policy_id, sent, notification_id, outcome, attempt, status_code, error
       FROM alert_history WHERE ${w} ORDER BY sent COLLATE "C" DESC, rowid DESC LIMIT $${args.length + 1} OFFSET $${args.length + 2}`,
      [...args, q.perPage, (q.page - 1) * q.perPage],
    );
    return { items, total: n };
  }

  async enqueue(row: NewOutboxRow): Promise<string> {
    const id = newId();
    await this.run(
      "INSERT INTO alert_outbox (id, account_id, policy_id, event_id, mechanism_type, target, payload, created, status, next_attempt_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', $9)",
      [id, row.accountId, row.policyId, row.eventId, row.mechanismType, row.target, row.payload, nowStamp(new Date(row.nowMs)), row.nowMs],
    );
    return id;
  }

  async openIncident(accountId: string, subject: string): Promise<string | undefined> {
    const [r] = await this.rows<{ correlation_id: string }>('SELECT correlation_id FROM alert_incidents WHERE account_id = $1 AND subject = $2', [accountId, subject]);
    return r?.correlation_id;
  }

  async startIncident(accountId: string, subject: string, correlationId: string): Promise<void> {
    await this.run('INSERT INTO alert_incidents (account_id, subject, correlation_id) VALUES ($1, $2, $3)', [accountId, subject, correlationId]);
  }

  async endIncident(accountId: string, subject: string): Promise<void> {
    await this.run('DELETE FROM alert_incidents WHERE account_id = $1 AND subject = $2', [accountId, subject]);
  }

  deprecationNotices(): Promise<{ account_id: string; address: string; last_sent_ms: number }[]> {
    // address is CITEXT (SQLite's NOCASE): read back as text.
    return this.rows('SELECT account_id, address::text AS address, last_sent_ms FROM alert_deprecation_notices ORDER BY account_id COLLATE "C", lower(address::text) COLLATE "C"');
  }

  async forgetDeprecationNotice(accountId: string, address: string): Promise<void> {
    await this.run('DELETE FROM alert_deprecation_notices WHERE account_id = $1 AND address = $2', [accountId, address]);
  }

  async recordDeprecationNotice(accountId: string, address: string, sentMs: number): Promise<void> {
    await this.run(
      'INSERT INTO alert_deprecation_notices (account_id, address, last_sent_ms) VALUES ($1, $2, $3) ON CONFLICT (account_id, address) DO UPDATE SET last_sent_ms = excluded.last_sent_ms',
      [accountId, address, sentMs],
    );
  }
}
