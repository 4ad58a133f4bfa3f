// The durable outbox of notifications and the delivery history. Rows are
// claimed with a lease (owner and expiry), so several workers, in one process
// or in replicas sharing the database (#20), never send one row at the same
// time, and a worker killed mid-delivery loses nothing: its lease expires and
// the row is claimed again, with the same id (at-least-once; receivers dedupe
// on webhook-id or Message-ID). Every attempt, and a give-up, is a history row.

import { newId, nowStamp, type AttemptOutcome, type Database, type HistoryObject, type NewOutboxRow, type OutboxRow } from '../store/index.js';

// The shapes of outbox rows and history are the store's contract (src/store/types.ts).
export type { AttemptOutcome, HistoryObject, OutboxRow };
import type { NotificationPayload } from './notifier.js';

/** Days the delivery history is kept (Cloudflare keeps 30 to 90 by plan). */
export const HISTORY_DAYS = 90;

/** The columns of an alert_history row, in the order historyValues gives them (both backends insert with these). */
export const HISTORY_COLUMNS =
  'id, account_id, notification_id, policy_id, name, description, alert_type, alert_body, mechanism, mechanism_type, sent, outcome, attempt, status_code, error';

/** The values of one history row of an attempt on `row` (a new id each), in HISTORY_COLUMNS' order. */
export function historyValues(
  row: OutboxRow,
  payload: NotificationPayload,
  at: string,
  outcome: HistoryObject['outcome'],
  attempt: number,
  statusCode: number | null,
  error: string | null,
): unknown[] {
  return [
    newId(),
    row.account_id,
    row.id,
    row.policy_id,
    payload.name,
    payload.description,
    payload.alert_type,
    payload.body === undefined ? payload.text : JSON.stringify(payload.body),
    row.target,
    row.mechanism_type,
    at,
    outcome,
    attempt,
    statusCode,
    error,
  ];
}

/** The history and last_error text of a failed attempt. */
export function attemptError(outcome: AttemptOutcome): string {
  return `error ${outcome.code ?? 9400}: ${outcome.error ?? 'failed'}`;
}

/** The history text of a give-up after `attempt` attempts, the last failing with `error`. */
export function gaveUpError(attempt: number, error: string): string {
  return `error 9402: given up after ${attempt} attempt${attempt === 1 ? '' : 's'}; last: ${error}`;
}

const HISTORY_INSERT = `INSERT INTO alert_history (${HISTORY_COLUMNS}) VALUES (${HISTORY_COLUMNS.split(',').fill('?').join(', ')})`;

/** The outbox and history tables. */
export class Outbox {
  constructor(private readonly store: Database) {}

  /**
   * Claims up to `limit` rows due at `now` whose lease is free or expired,
   * leased to `owner` until `now + leaseMs`; in schedule order.
   */
  claim(owner: string, now: number, leaseMs: number, limit: number): OutboxRow[] {
    const rows = this.store.write(
      () => {
        // A lease that ran out means an attempt whose outcome nobody recorded (its process stopped): say so in the history first.
        const expired = this.store.db.prepare("SELECT * FROM alert_outbox WHERE status = 'pending' AND lease_owner IS NOT NULL AND lease_until_ms <= ?").all(now) as OutboxRow[];
        for (const row of expired) this.interrupted(row, now);
        return this.store.db
          .prepare(
            `UPDATE alert_outbox SET lease_owner = ?, lease_until_ms = ? WHERE id IN (
               SELECT id FROM alert_outbox WHERE status = 'pending' AND next_attempt_ms <= ? AND (lease_until_ms IS NULL OR lease_until_ms <= ?)
               ORDER BY next_attempt_ms, created, id LIMIT ?) RETURNING *`,
          )
          .all(owner, now + leaseMs, now, now, limit) as OutboxRow[];
      },
    );
    return rows.sort((a, b) => a.next_attempt_ms - b.next_attempt_ms || a.created.localeCompare(b.created) || a.id.localeCompare(b.id));
  }

  /**
   * Frees the leases of owners on `host` (owner ids are host:pid:random) whose
   * process is gone: a server restarted after a SIGKILL or a crash takes its
   * predecessor's rows back at once instead of after their lease. An owner on
   * another host, or whose pid is alive (perhaps reused), keeps its lease
   * until it expires. Returns how many rows were freed.
   */
  releaseDeadOwners(host: string, alive: (pid: number) => boolean, now: number = Date.now()): number {
    const owners = this.store.db.prepare("SELECT DISTINCT lease_owner AS owner FROM alert_outbox WHERE status = 'pending' AND lease_owner IS NOT NULL").all() as { owner: string }[];
    let freed = 0;
    for (const { owner } of owners) {
      const m = /^(.*):(\d+):[^:]*$/.exec(owner);
      if (m === null || m[1] !== host || alive(Number(m[2]))) continue;
      freed += this.store.write(() => {
        const rows = this.store.db.prepare("SELECT * FROM alert_outbox WHERE status = 'pending' AND lease_owner = ?").all(owner) as OutboxRow[];
        for (const row of rows) this.interrupted(row, now);
        return rows.length;
      });
    }
    return freed;
  }

  /**
   * Records the attempt of a leased row whose process stopped before it
   * recorded the outcome (SIGKILL, a crash, a power cut): a failed attempt in
   * the history, with no status code, and the row due again at once, under
   * its same id (the receiver may have had it: at-least-once). Every attempt
   * is then in the history, the interrupted ones included.
   */
  private interrupted(row: OutboxRow, now: number): void {
    const owner = row.lease_owner ?? '?';
    this.record(row, now, { ok: false, code: 9400, error: `attempt interrupted: the process delivering it (${owner}) stopped before its outcome was recorded; sent again with the same id` }, now);
  }

  /** When the next pending row is due (ms), or undefined when none is pending. */
  nextDue(): number | undefined {
    const r = this.store.db.prepare("SELECT min(max(next_attempt_ms, ifnull(lease_until_ms, 0))) AS due FROM alert_outbox WHERE status = 'pending'").get() as { due: number | null };
    return r.due ?? undefined;
  }

  /**
   * Records an attempt of a claimed row: a history row, and the row's next
   * state (delivered; pending again at `retryAt`; or failed, given up, with a
   * second history row). Runs in the caller's write transaction.
   */
  record(row: OutboxRow, now: number, outcome: AttemptOutcome, retryAt: number | undefined): 'delivered' | 'retry' | 'gave_up' | 'stale' {
    const db = this.store.db;
    // Fencing: a worker that overran its lease must not write over its successor's claim (or a finished row).
    const held = db.prepare("SELECT count(*) AS n FROM alert_outbox WHERE id = ? AND status = 'pending' AND lease_owner IS ? AND attempts = ?").get(row.id, row.lease_owner, row.attempts) as { n: number };
    if (held.n !== 1) return 'stale';
    const attempt = row.attempts + 1;
    const at = nowStamp(new Date(now));
    const payload = JSON.parse(row.payload) as NotificationPayload;
    const history = (outcome_: HistoryObject['outcome'], error: string | null) => {
      db.prepare(HISTORY_INSERT).run(
        ...historyValues(row, payload, at, outcome_, attempt, outcome.statusCode ?? null, error),
      );
    };
    if (outcome.ok) {
      history('delivered', null);
      db.prepare("UPDATE alert_outbox SET status = 'delivered', attempts = ?, lease_owner = NULL, lease_until_ms = NULL, last_error = NULL, done_at = ? WHERE id = ?").run(attempt, at, row.id);
      return 'delivered';
    }
    const error = attemptError(outcome);
    history('failed', error);
    if (retryAt === undefined || outcome.final === true) {
      history('gave_up', gaveUpError(attempt, error));
      db.prepare("UPDATE alert_outbox SET status = 'failed', attempts = ?, lease_owner = NULL, lease_until_ms = NULL, last_error = ?, done_at = ? WHERE id = ?").run(attempt, error, at, row.id);
      return 'gave_up';
    }
    db.prepare('UPDATE alert_outbox SET attempts = ?, next_attempt_ms = ?, lease_owner = NULL, lease_until_ms = NULL, last_error = ? WHERE id = ?').run(attempt, retryAt, error, row.id);
    return 'retry';
  }

  /**
   * Forgets history older than HISTORY_DAYS and finished (delivered or given
   * up) outbox rows older than that, so the tables do not grow for ever;
   * returns how many rows went.
   */
  prune(now: number): number {
    const cutoff = nowStamp(new Date(now - HISTORY_DAYS * 86_400_000));
    return this.store.write(() => {
      const h = this.store.db.prepare('DELETE FROM alert_history WHERE sent < ?').run(cutoff).changes;
      const o = this.store.db.prepare("DELETE FROM alert_outbox WHERE status != 'pending' AND done_at < ?").run(cutoff).changes;
      return h + o;
    });
  }

  /** The account's history, newest first, between `since` and `before` (RFC 3339, inclusive/exclusive). */
  history(accountId: string, q: { since?: string | undefined; before?: string | undefined; page: number; perPage: number }): { items: HistoryObject[]; total: number } {
    const where = ['account_id = ?'];
    const args: unknown[] = [accountId];
    if (q.since !== undefined) {
      where.push('sent >= ?');
      args.push(q.since);
    }
    if (q.before !== undefined) {
      where.push('sent < ?');
      args.push(q.before);
    }
    const w = where.join(' AND ');
    return this.store.read(() => {
      const total = (this.store.db.prepare(`SELECT count(*) AS n FROM alert_history WHERE ${w}`).get(...args) as { n: number }).n;
      const items = this.store.db
        .prepare(
          `SELECT id, alert_body, alert_type, description, mechanism, mechanism_type, name, policy_id, sent, notification_id, outcome, attempt, status_code, error
           FROM alert_history WHERE ${w} ORDER BY sent DESC, rowid DESC LIMIT ? OFFSET ?`,
        )
        .all(...args, q.perPage, (q.page - 1) * q.perPage) as HistoryObject[];
      return { items, total };
    });
  }

  /** Queues one notification; returns its id. */
  enqueue(row: NewOutboxRow): string {
    const id = newId();
    this.store.db
      .prepare(
        "INSERT INTO alert_outbox (id, account_id, policy_id, event_id, mechanism_type, target, payload, created, status, next_attempt_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
      )
      .run(id, row.accountId, row.policyId, row.eventId, row.mechanismType, row.target, row.payload, nowStamp(new Date(row.nowMs)), row.nowMs);
    return id;
  }

  /** The correlation id of the open incident of a subject (a pool, an origin), if any. */
  openIncident(accountId: string, subject: string): string | undefined {
    const r = this.store.db.prepare('SELECT correlation_id FROM alert_incidents WHERE account_id = ? AND subject = ?').get(accountId, subject) as { correlation_id: string } | undefined;
    return r?.correlation_id;
  }

  startIncident(accountId: string, subject: string, correlationId: string): void {
    this.store.db.prepare('INSERT INTO alert_incidents (account_id, subject, correlation_id) VALUES (?, ?, ?)').run(accountId, subject, correlationId);
  }

  endIncident(accountId: string, subject: string): void {
    this.store.db.prepare('DELETE FROM alert_incidents WHERE account_id = ? AND subject = ?').run(accountId, subject);
  }

  /** When each (account, address) was last sent a deprecation notice. */
  deprecationNotices(): { account_id: string; address: string; last_sent_ms: number }[] {
    return this.store.db.prepare('SELECT account_id, address, last_sent_ms FROM alert_deprecation_notices').all() as { account_id: string; address: string; last_sent_ms: number }[];
  }

  forgetDeprecationNotice(accountId: string, address: string): void {
    this.store.db.prepare('DELETE FROM alert_deprecation_notices WHERE account_id = ? AND address = ?').run(accountId, address);
  }

  recordDeprecationNotice(accountId: string, address: string, sentMs: number): void {
    this.store.db
      .prepare('INSERT INTO alert_deprecation_notices (account_id, address, last_sent_ms) VALUES (?, ?, ?) ON CONFLICT (account_id, address) DO UPDATE SET last_sent_ms = excluded.last_sent_ms')
      .run(accountId, address, sentMs);
  }
}
