// Notification policies and webhook destinations on PostgreSQL: AlertingRepo
// as alerting-store.ts keeps it on SQLite (same validation, shared through
// checkPolicyBody; same rows, order and errors). Runs only on the context's
// client, inside the transaction its store opened. It lives in notify, not in
// the store, because the validation is notify's (the store may not import it).
// A policy is checked against the account's pool and destination ids read in
// the same transaction; the store's serializable transactions keep a
// destination from being deleted under a policy being written to name it.

import { MoatError } from '../errors/index.js';
import { newId, nowStamp, type AlertingRepo, type PgRepoContext, type PolicyObject, type WebhookInput, type WebhookObject, type WebhookTarget } from '../store/index.js';
import { checkPolicyBody, policyObject, webhookObject, type CheckedPolicy, type PolicyRow, type WebhookRow } from './alerting-store.js';

const POLICY_COLUMNS = 'id, name, description, enabled, alert_type, alert_interval, filters, mechanisms, created, modified';
const WEBHOOK_COLUMNS = 'id, name, url, secret, type, created_at, last_success, last_failure';

/** AlertingRepo on PostgreSQL. */
export class PgAlertingRepo implements AlertingRepo {
  constructor(private readonly ctx: PgRepoContext) {}

  private async rows<R>(sql: string, params: unknown[] = []): Promise<R[]> {
    return (await this.ctx.client.query(sql, params)).rows as R[];
  }

  private async run(sql: string, params: unknown[] = []): Promise<number> {
    return (await this.ctx.client.query(sql, params)).rowCount ?? 0;
  }

  async policies(accountId: string): Promise<PolicyObject[]> {
    return (await this.rows<PolicyRow>(`SELECT ${POLICY_COLUMNS} FROM alert_policies WHERE account_id = $1 ORDER BY name COLLATE "C", id COLLATE "C"`, [accountId])).map(policyObject);
  }

  async policy(accountId: string, id: string, lock = false): Promise<PolicyObject> {
    const [r] = await this.rows<PolicyRow>(`SELECT ${POLICY_COLUMNS} FROM alert_policies WHERE account_id = $1 AND id = $2${lock ? ' FOR UPDATE' : ''}`, [accountId, id]);
    if (r === undefined) throw new MoatError('ALERT_POLICY_NOT_FOUND', `notification policy ${id} not found in this account`);
    return policyObject(r);
  }

  async enabledPolicies(accountId: string, type: string): Promise<PolicyObject[]> {
    return (
      await this.rows<PolicyRow>(`SELECT ${POLICY_COLUMNS} FROM alert_policies WHERE account_id = $1 AND alert_type = $2 AND enabled = 1 ORDER BY created COLLATE "C", id COLLATE "C"`, [
        accountId,
        type,
      ])
    ).map(policyObject);
  }

  /** Checks a body with the account's pools and destinations as this transaction sees them. */
  private async check(accountId: string, body: unknown, current: PolicyObject | undefined): Promise<CheckedPolicy> {
    const pools = new Set((await this.rows<{ id: string }>('SELECT id FROM lb_pools WHERE account_id = $1', [accountId])).map((r) => r.id));
    const webhooks = new Set((await this.rows<{ id: string }>('SELECT id FROM alert_webhooks WHERE account_id = $1', [accountId])).map((r) => r.id));
    return checkPolicyBody(accountId, body, current, { poolExists: (_a, id) => pools.has(id), webhookExists: (_a, id) => webhooks.has(id) });
  }

  async createPolicy(accountId: string, body: unknown): Promise<string> {
    const p = await this.check(accountId, body, undefined);
    const id = newId();
    const now = nowStamp();
    await this.run(
      'INSERT INTO alert_policies (id, account_id, name, description, enabled, alert_type, alert_interval, filters, mechanisms, created, modified) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)',
      [id, accountId, p.name, p.description, p.enabled ? 1 : 0, p.alert_type, p.alert_interval ?? null, p.filters, p.mechanisms, now, now],
    );
    return id;
  }

  async updatePolicy(accountId: string, id: string, body: unknown): Promise<string> {
    const current = await this.policy(accountId, id, true);
    const p = await this.check(accountId, body, current);
    await this.run(
      'UPDATE alert_policies SET name = $1, description = $2, enabled = $3, alert_type = $4, alert_interval = $5, filters = $6, mechanisms = $7, modified = $8 WHERE id = $9',
      [p.name, p.description, p.enabled ? 1 : 0, p.alert_type, p.alert_interval ?? null, p.filters, p.mechanisms, nowStamp(), id],
    );
    return id;
  }

  async deletePolicy(accountId: string, id: string): Promise<void> {
    const n = await this.run('DELETE FROM alert_policies WHERE account_id = $1 AND id = $2', [accountId, id]);
    if (n === 0) throw new MoatError('ALERT_POLICY_NOT_FOUND', `notification policy ${id} not found in this account`);
  }

  // ---- webhook destinations

  private async webhookRow(accountId: string, id: string, lock = false): Promise<WebhookRow | undefined> {
    return (await this.rows<WebhookRow>(`SELECT ${WEBHOOK_COLUMNS} FROM alert_webhooks WHERE account_id = $1 AND id = $2${lock ? ' FOR UPDATE' : ''}`, [accountId, id]))[0];
  }

  async webhooks(accountId: string): Promise<WebhookObject[]> {
    return (await this.rows<WebhookRow>(`SELECT ${WEBHOOK_COLUMNS} FROM alert_webhooks WHERE account_id = $1 ORDER BY name COLLATE "C", id COLLATE "C"`, [accountId])).map(webhookObject);
  }

  async webhook(accountId: string, id: string, lock = false): Promise<WebhookObject> {
    const r = await this.webhookRow(accountId, id, lock);
    if (r === undefined) throw new MoatError('ALERT_WEBHOOK_NOT_FOUND', `webhook destination ${id} not found in this account`);
    return webhookObject(r);
  }

  async webhookTarget(accountId: string, id: string): Promise<WebhookTarget | undefined> {
    const r = await this.webhookRow(accountId, id);
    return r === undefined ? undefined : { id: r.id, name: r.name, url: r.url, secret: r.secret };
  }

  async webhookSecret(accountId: string, id: string): Promise<string | null> {
    return (await this.webhookRow(accountId, id))?.secret ?? null;
  }

  async insertWebhook(accountId: string, w: WebhookInput): Promise<string> {
    const id = newId();
    await this.run("INSERT INTO alert_webhooks (id, account_id, name, url, secret, type, created_at) VALUES ($1, $2, $3, $4, $5, 'generic', $6)", [
      id,
      accountId,
      w.name,
      w.url.href,
      w.secret === undefined || w.secret === '' ? null : w.secret,
      nowStamp(),
    ]);
    return id;
  }

  async updateWebhook(accountId: string, id: string, w: WebhookInput): Promise<void> {
    await this.webhook(accountId, id, true);
    if (w.secret === undefined) await this.run('UPDATE alert_webhooks SET name = $1, url = $2 WHERE id = $3', [w.name, w.url.href, id]);
    else await this.run('UPDATE alert_webhooks SET name = $1, url = $2, secret = $3 WHERE id = $4', [w.name, w.url.href, w.secret === '' ? null : w.secret, id]);
  }

  async deleteWebhook(accountId: string, id: string): Promise<void> {
    await this.webhook(accountId, id, true);
    const users = (await this.policies(accountId)).filter((p) => Array.isArray(p.mechanisms['webhooks']) && (p.mechanisms['webhooks'] as { id?: unknown }[]).some((w) => w.id === id));
    if (users.length > 0) {
      throw new MoatError(
        'ALERT_WEBHOOK_IN_USE',
        `webhook destination ${id} is used by ${users.length} notification polic${users.length === 1 ? 'y' : 'ies'} (${users.map((p) => `"${p.name}" ${p.id}`).slice(0, 5).join(', ')}): remove it from them first`,
      );
    }
    await this.run('DELETE FROM alert_webhooks WHERE id = $1', [id]);
  }

  async markWebhook(id: string, ok: boolean, at: string): Promise<void> {
    await this.run(ok ? 'UPDATE alert_webhooks SET last_success = $1 WHERE id = $2' : 'UPDATE alert_webhooks SET last_failure = $1 WHERE id = $2', [at, id]);
  }
}
