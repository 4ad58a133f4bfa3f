// Notification policies and webhook destinations of an account (Cloudflare's
// alerting v3), in the database: their validation (filters per alert type,
// pool ids of the account, mechanisms that exist) and their rows. Policies
// keep `filters` and `mechanisms` as the JSON they were given, so a GET returns
// exactly what was sent (tools that diff state, like Terraform, depend on it).
// A webhook's secret is stored for delivery and never returned.

import { MoatError } from '../errors/index.js';
import { isId, isWellFormedEmail, newId, nowStamp, type Database, type PolicyObject, type WebhookInput, type WebhookObject, type WebhookTarget } from '../store/index.js';
import { alertType } from './alert-types.js';

// The shapes of policies and destinations are the store's contract (src/store/types.ts), shared by its implementations.
export type { PolicyObject, WebhookInput, WebhookObject, WebhookTarget };

/** Which pools exist: wired to the pools store by the control plane's assembly. */
export interface PoolDirectory {
  poolExists(accountId: string, poolId: string): boolean;
}

export interface PolicyRow {
  id: string;
  name: string;
  description: string;
  enabled: number;
  alert_type: string;
  alert_interval: string | null;
  filters: string | null;
  mechanisms: string;
  created: string;
  modified: string;
}

export interface WebhookRow {
  id: string;
  name: string;
  url: string;
  secret: string | null;
  type: string;
  created_at: string;
  last_success: string | null;
  last_failure: string | null;
}

const POLICY_FIELDS = ['name', 'description', 'enabled', 'alert_type', 'alert_interval', 'filters', 'mechanisms'];
const WEBHOOK_FIELDS = ['name', 'url', 'secret'];
/** Longest name, description, URL and secret accepted. */
const MAX_NAME = 256;
const MAX_DESCRIPTION = 1024;
const MAX_URL = 2048;
const MAX_SECRET = 1024;
/** Most values in one filter or mechanism list (a policy over every pool of a large account fits). */
const MAX_LIST = 10_000;

/** Several body errors found together: the API lists each in `errors[]`. */
export class FieldErrors extends Error {
  constructor(readonly errors: readonly MoatError[]) {
    super(errors.map((e) => e.message).join('; '));
    this.name = 'FieldErrors';
  }
}

function invalid(pointer: string, message: string): MoatError {
  return new MoatError('API_INVALID_FIELD', message, { pointer });
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function policyObject(r: PolicyRow): PolicyObject {
  const o: PolicyObject = {
    id: r.id,
    name: r.name,
    description: r.description,
    enabled: r.enabled === 1,
    alert_type: r.alert_type,
    filters: r.filters === null ? {} : (JSON.parse(r.filters) as Record<string, unknown>),
    mechanisms: JSON.parse(r.mechanisms) as Record<string, unknown>,
    created: r.created,
    modified: r.modified,
  };
  if (r.alert_interval !== null) o.alert_interval = r.alert_interval;
  return o;
}

export function webhookObject(r: WebhookRow): WebhookObject {
  return { id: r.id, name: r.name, url: r.url, type: r.type, created_at: r.created_at, last_success: r.last_success, last_failure: r.last_failure };
}

/** Checks a webhook body (every problem at once, as FieldErrors): no database needed, so every store implementation shares it. */
export function checkWebhook(body: unknown): WebhookInput {
  if (!isObject(body)) throw invalid('', 'the body must be a JSON object');
  const errors: MoatError[] = [];
  for (const k of Object.keys(body)) if (!WEBHOOK_FIELDS.includes(k)) errors.push(invalid(`/${k}`, `unknown field "${k}"`));
  const name = body['name'];
  if (typeof name !== 'string' || name.trim() === '' || name.length > MAX_NAME) errors.push(invalid('/name', `name is required: a non-empty string of at most ${MAX_NAME} characters`));
  let url: URL | undefined;
  const u = body['url'];
  if (typeof u !== 'string' || u.length > MAX_URL) errors.push(invalid('/url', `url is required: an http or https URL of at most ${MAX_URL} characters`));
  else {
    try {
      url = new URL(u);
      if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('scheme');
      if (url.username !== '' || url.password !== '') errors.push(invalid('/url', 'url must not carry credentials: give them as the secret (sent as cf-webhook-auth)'));
    } catch {
      errors.push(invalid('/url', `url "${u.slice(0, 80)}" is not an http or https URL`));
    }
  }
  const secret = body['secret'];
  if (secret !== undefined && (typeof secret !== 'string' || secret.length > MAX_SECRET || /[\r\n]/.test(secret))) {
    errors.push(invalid('/secret', `secret must be a string of at most ${MAX_SECRET} characters, on one line (it is sent as a header)`));
  }
  if (errors.length > 0) throw new FieldErrors(errors);
  return { name: name as string, url: url!, secret: secret as string | undefined };
}

/** What a policy check asks of the database: whether a pool or a webhook destination of the account exists. */
export interface PolicyLookups {
  poolExists(accountId: string, poolId: string): boolean;
  webhookExists(accountId: string, webhookId: string): boolean;
}

/** A checked policy, as its row stores it. */
export interface CheckedPolicy {
  name: string;
  description: string;
  enabled: boolean;
  alert_type: string;
  alert_interval: string | undefined;
  filters: string | null;
  mechanisms: string;
}

/**
 * Checks a policy body (whole on create; any subset over `current` on
 * update). Every problem is reported, each with its JSON pointer (FieldErrors).
 * Synchronous over `lookups`, so each store implementation answers them its
 * own way (SQLite queries at once; PostgreSQL loads the account's ids first).
 */
export function checkPolicyBody(accountId: string, body: unknown, current: PolicyObject | undefined, lookups: PolicyLookups): CheckedPolicy {
  if (!isObject(body)) throw invalid('', 'the body must be a JSON object');
  const errors: MoatError[] = [];
  for (const k of Object.keys(body)) if (!POLICY_FIELDS.includes(k)) errors.push(invalid(`/${k}`, `unknown field "${k}"`));
  const creating = current === undefined;
  const required = (k: string) => {
    if (creating && body[k] === undefined) errors.push(invalid(`/${k}`, `${k} is required`));
  };
  for (const k of ['name', 'alert_type', 'enabled', 'mechanisms']) required(k);
  const text = (k: string, max: number): string | undefined => {
    const v = body[k];
    if (v === undefined) return undefined;
    if (typeof v !== 'string' || v.length > max || (k === 'name' && v.trim() === '')) {
      errors.push(invalid(`/${k}`, `${k} must be a ${k === 'name' ? 'non-empty ' : ''}string of at most ${max} characters`));
      return undefined;
    }
    return v;
  };
  const name = text('name', MAX_NAME) ?? current?.name ?? '';
  const description = text('description', MAX_DESCRIPTION) ?? current?.description ?? '';
  let enabled = current?.enabled ?? true;
  if (body['enabled'] !== undefined) {
    if (typeof body['enabled'] !== 'boolean') errors.push(invalid('/enabled', 'enabled must be true or false'));
    else enabled = body['enabled'];
  }
  let type = current?.alert_type ?? '';
  if (body['alert_type'] !== undefined) {
    const t = body['alert_type'];
    if (typeof t !== 'string') errors.push(invalid('/alert_type', 'alert_type must be a string'));
    else if (alertType(t) === undefined) {
      errors.push(new MoatError('ALERT_UNSUPPORTED_TYPE', `alert_type "${t.slice(0, 80)}" is not supported by Moat; GET .../alerting/v3/available_alerts lists those that are`, { pointer: '/alert_type' }));
    } else type = t;
  }
  let interval = current?.alert_interval;
  if (body['alert_interval'] !== undefined) {
    const v = body['alert_interval'];
    if (typeof v !== 'string' || !/^\d{1,6}[smh]$/.test(v)) errors.push(invalid('/alert_interval', 'alert_interval must be a duration such as "30m", "1h" or "90s"'));
    else interval = v;
  }
  // Filters are checked against the (possibly new) alert type, also when only the type changed.
  let filters: string | null = current === undefined || Object.keys(current.filters).length === 0 ? null : JSON.stringify(current.filters);
  if (body['filters'] !== undefined) filters = body['filters'] === null ? null : JSON.stringify(body['filters']);
  const t = alertType(type);
  if (t !== undefined && filters !== null) checkFilters(accountId, JSON.parse(filters), t.filters, errors, lookups);
  let mechanisms = current === undefined ? '{}' : JSON.stringify(current.mechanisms);
  if (body['mechanisms'] !== undefined) {
    checkMechanisms(accountId, body['mechanisms'], errors, lookups);
    mechanisms = JSON.stringify(body['mechanisms']);
  }
  if (errors.length > 0) throw new FieldErrors(errors);
  return { name, description, enabled, alert_type: type, alert_interval: interval, filters, mechanisms };
}

function checkFilters(accountId: string, filters: unknown, options: readonly { key: string; values?: readonly string[] }[], errors: MoatError[], lookups: PolicyLookups): void {
  if (!isObject(filters)) {
    errors.push(invalid('/filters', 'filters must be an object of arrays of strings'));
    return;
  }
  for (const [key, value] of Object.entries(filters)) {
    const option = options.find((o) => o.key === key);
    const at = `/filters/${key}`;
    if (option === undefined) {
      errors.push(invalid(at, `filter "${key.slice(0, 80)}" does not apply to this alert type; it takes ${options.map((o) => o.key).join(', ')}`));
      continue;
    }
    if (!Array.isArray(value) || value.length === 0 || value.length > MAX_LIST) {
      errors.push(invalid(at, `${key} must be an array of 1 to ${MAX_LIST} strings (leave it out to match every value)`));
      continue;
    }
    const seen = new Set<string>();
    value.forEach((v, i) => {
      if (typeof v !== 'string') return errors.push(invalid(`${at}/${i}`, `${key} values are strings`));
      if (seen.has(v)) return errors.push(invalid(`${at}/${i}`, `"${v.slice(0, 80)}" is given twice`));
      seen.add(v);
      if (option.values !== undefined) {
        if (!option.values.includes(v)) errors.push(invalid(`${at}/${i}`, `"${v.slice(0, 80)}" is not a value of ${key}: use ${option.values.join(' or ')}`));
      } else if (!isId(v) || !lookups.poolExists(accountId, v)) {
        errors.push(invalid(`${at}/${i}`, `no pool ${v.slice(0, 80)} in this account`));
      }
      return undefined;
    });
  }
}

function checkMechanisms(accountId: string, m: unknown, errors: MoatError[], lookups: PolicyLookups): void {
  if (!isObject(m)) {
    errors.push(invalid('/mechanisms', 'mechanisms must be an object: {"email": [{"id": ADDRESS}], "webhooks": [{"id": DESTINATION_ID}]}'));
    return;
  }
  for (const [kind, list] of Object.entries(m)) {
    const at = `/mechanisms/${kind}`;
    if (kind === 'pagerduty') {
      errors.push(invalid(at, 'PagerDuty is not supported by Moat: use a webhook destination (PagerDuty Events API v2 accepts webhooks through an integration)'));
      continue;
    }
    if (kind !== 'email' && kind !== 'webhooks') {
      errors.push(invalid(at, `unknown mechanism "${kind.slice(0, 80)}": use email or webhooks`));
      continue;
    }
    if (!Array.isArray(list) || list.length > MAX_LIST) {
      errors.push(invalid(at, `${kind} must be an array of {"id": ...}`));
      continue;
    }
    const seen = new Set<string>();
    list.forEach((entry, i) => {
      const id = isObject(entry) ? entry['id'] : undefined;
      if (typeof id !== 'string' || (isObject(entry) && Object.keys(entry).some((k) => k !== 'id'))) {
        return errors.push(invalid(`${at}/${i}`, `each ${kind} entry is {"id": ${kind === 'email' ? 'an address' : 'a webhook destination id'}}`));
      }
      const key = kind === 'email' ? id.toLowerCase() : id;
      if (seen.has(key)) return errors.push(invalid(`${at}/${i}/id`, `"${id.slice(0, 80)}" is given twice`));
      seen.add(key);
      if (kind === 'email' && !isWellFormedEmail(id)) errors.push(invalid(`${at}/${i}/id`, `"${id.slice(0, 80)}" is not an email address`));
      if (kind === 'webhooks' && (!isId(id) || !lookups.webhookExists(accountId, id))) {
        errors.push(invalid(`${at}/${i}/id`, `no webhook destination ${id.slice(0, 80)} in this account`));
      }
      return undefined;
    });
  }
}

/** Policies and webhook destinations of every account. */
export class AlertingStore {
  constructor(
    readonly store: Database,
    private readonly pools: PoolDirectory,
  ) {}

  // ---- policies

  /** The account's policies, by name then id. */
  policies(accountId: string): PolicyObject[] {
    const rows = this.store.db.prepare('SELECT * FROM alert_policies WHERE account_id = ? ORDER BY name, id').all(accountId) as PolicyRow[];
    return rows.map(policyObject);
  }

  /** One policy, or 7700. */
  policy(accountId: string, id: string): PolicyObject {
    const r = this.store.db.prepare('SELECT * FROM alert_policies WHERE account_id = ? AND id = ?').get(accountId, id) as PolicyRow | undefined;
    if (r === undefined) throw new MoatError('ALERT_POLICY_NOT_FOUND', `notification policy ${id} not found in this account`);
    return policyObject(r);
  }

  /** The enabled policies of one alert type (what the health listener matches against). */
  enabledPolicies(accountId: string, type: string): PolicyObject[] {
    const rows = this.store.db.prepare('SELECT * FROM alert_policies WHERE account_id = ? AND alert_type = ? AND enabled = 1 ORDER BY created, id').all(accountId, type) as PolicyRow[];
    return rows.map(policyObject);
  }

  /** Creates a policy from a request body; returns its id. */
  createPolicy(accountId: string, body: unknown): string {
    return this.store.write(() => {
      const p = this.checkPolicy(accountId, body, undefined);
      const id = newId();
      const now = nowStamp();
      this.store.db
        .prepare('INSERT INTO alert_policies (id, account_id, name, description, enabled, alert_type, alert_interval, filters, mechanisms, created, modified) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)')
        .run(id, accountId, p.name, p.description, p.enabled ? 1 : 0, p.alert_type, p.alert_interval ?? null, p.filters, p.mechanisms, now, now);
      return id;
    });
  }

  /** Updates a policy: the fields given replace the stored ones (Cloudflare's PUT takes any subset). */
  updatePolicy(accountId: string, id: string, body: unknown): string {
    return this.store.write(() => {
      const current = this.policy(accountId, id);
      const p = this.checkPolicy(accountId, body, current);
      this.store.db
        .prepare('UPDATE alert_policies SET name = ?, description = ?, enabled = ?, alert_type = ?, alert_interval = ?, filters = ?, mechanisms = ?, modified = ? WHERE id = ?')
        .run(p.name, p.description, p.enabled ? 1 : 0, p.alert_type, p.alert_interval ?? null, p.filters, p.mechanisms, nowStamp(), id);
      return id;
    });
  }

  deletePolicy(accountId: string, id: string): void {
    this.store.write(() => {
      const r = this.store.db.prepare('DELETE FROM alert_policies WHERE account_id = ? AND id = ?').run(accountId, id);
      if (r.changes === 0) throw new MoatError('ALERT_POLICY_NOT_FOUND', `notification policy ${id} not found in this account`);
    });
  }

  /** Checks a policy body against this database's pools and destinations (see checkPolicyBody). */
  private checkPolicy(accountId: string, body: unknown, current: PolicyObject | undefined): CheckedPolicy {
    return checkPolicyBody(accountId, body, current, {
      poolExists: (a, id) => this.pools.poolExists(a, id),
      webhookExists: (a, id) => this.webhookRow(a, id) !== undefined,
    });
  }

  // ---- webhook destinations

  private webhookRow(accountId: string, id: string): WebhookRow | undefined {
    return this.store.db.prepare('SELECT * FROM alert_webhooks WHERE account_id = ? AND id = ?').get(accountId, id) as WebhookRow | undefined;
  }

  webhooks(accountId: string): WebhookObject[] {
    return (this.store.db.prepare('SELECT * FROM alert_webhooks WHERE account_id = ? ORDER BY name, id').all(accountId) as WebhookRow[]).map(webhookObject);
  }

  webhook(accountId: string, id: string): WebhookObject {
    const r = this.webhookRow(accountId, id);
    if (r === undefined) throw new MoatError('ALERT_WEBHOOK_NOT_FOUND', `webhook destination ${id} not found in this account`);
    return webhookObject(r);
  }

  /** A destination with its secret, for delivery (undefined once deleted). */
  webhookTarget(accountId: string, id: string): WebhookTarget | undefined {
    const r = this.webhookRow(accountId, id);
    return r === undefined ? undefined : { id: r.id, name: r.name, url: r.url, secret: r.secret };
  }

  /** The stored secret of a destination (to test an update that keeps it). */
  webhookSecret(accountId: string, id: string): string | null {
    return this.webhookRow(accountId, id)?.secret ?? null;
  }

  /** Checks a webhook body (name and url required, secret optional). */
  checkWebhook(body: unknown): WebhookInput {
    return checkWebhook(body);
  }

  insertWebhook(accountId: string, w: WebhookInput): string {
    const id = newId();
    this.store.write(() => {
      this.store.db
        .prepare("INSERT INTO alert_webhooks (id, account_id, name, url, secret, type, created_at) VALUES (?, ?, ?, ?, ?, 'generic', ?)")
        .run(id, accountId, w.name, w.url.href, w.secret === undefined || w.secret === '' ? null : w.secret, nowStamp());
    });
    return id;
  }

  /** Replaces name and url; the secret only when given ("" removes it). */
  updateWebhook(accountId: string, id: string, w: WebhookInput): void {
    this.store.write(() => {
      this.webhook(accountId, id);
      if (w.secret === undefined) this.store.db.prepare('UPDATE alert_webhooks SET name = ?, url = ? WHERE id = ?').run(w.name, w.url.href, id);
      else this.store.db.prepare('UPDATE alert_webhooks SET name = ?, url = ?, secret = ? WHERE id = ?').run(w.name, w.url.href, w.secret === '' ? null : w.secret, id);
    });
  }

  /** Deletes a destination no policy uses (7704 names the policies that do). */
  deleteWebhook(accountId: string, id: string): void {
    this.store.write(() => {
      this.webhook(accountId, id);
      const users = this.policies(accountId).filter((p) => Array.isArray(p.mechanisms['webhooks']) && (p.mechanisms['webhooks'] as { id?: unknown }[]).some((w) => w.id === id));
      if (users.length > 0) {
        throw new MoatError('ALERT_WEBHOOK_IN_USE', `webhook destination ${id} is used by ${users.length} notification polic${users.length === 1 ? 'y' : 'ies'} (${users.map((p) => `"${p.name}" ${p.id}`).slice(0, 5).join(', ')}): remove it from them first`);
      }
      this.store.db.prepare('DELETE FROM alert_webhooks WHERE id = ?').run(id);
    });
  }

  /** Records the outcome of a delivery on its destination (last_success / last_failure). */
  markWebhook(id: string, ok: boolean, at: string): void {
    this.store.db.prepare(ok ? 'UPDATE alert_webhooks SET last_success = ? WHERE id = ?' : 'UPDATE alert_webhooks SET last_failure = ? WHERE id = ?').run(at, id);
  }
}
