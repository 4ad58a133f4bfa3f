// Turns health events into notifications. The health monitor calls
// `onHealthEvent` inside the write transaction that records an edge; this
// matches the event against the account's enabled `load_balancing_health_alert`
// policies and the pool's legacy `notification_email`, and writes one outbox
// row per notification to send, in that same transaction: the edge and its
// notifications commit together or not at all, and nothing here does I/O
// (delivery is the worker's). The payload is built now, once, so every retry
// of a notification sends the same body under the same id.

import type { HealthEvent, Repos } from '../store/index.js';
import { HEALTH_ALERT } from './alert-types.js';
import type { PolicyObject } from './alerting-store.js';
import type { Clock } from './schedule.js';

/** What an outbox row carries besides its target: the body to send and what history shows. */
export interface NotificationPayload {
  /** Policy name (or "Legacy pool notification"), for history and the webhook's `name`. */
  name: string;
  description: string;
  alert_type: string;
  /** The human text (email body, webhook `text`). */
  text: string;
  /** Email subject. */
  subject: string;
  /** The webhook body (webhooks only). */
  body?: Record<string, unknown>;
  /** Legacy pool email: the pool it is about (the deprecation note names it). */
  legacy_pool?: string;
}

const HEALTH_NAME = { healthy: 'Healthy', unhealthy: 'Unhealthy' } as const;
/** Cloudflare's stateful alert events: an incident starts on Unhealthy and ends on recovery. */
export const ALERT_EVENT_START = 'ALERT_STATE_EVENT_START';
export const ALERT_EVENT_END = 'ALERT_STATE_EVENT_END';

/** Whether a filter list (absent: any value) admits `value`. */
function admits(filters: Record<string, unknown>, key: string, value: string): boolean {
  const list = filters[key];
  return !Array.isArray(list) || list.includes(value);
}

/** Whether a pool's legacy notification_filter lets this event through (Cloudflare's `{origin|pool: {disable, healthy}}`; healthy null or absent: both). */
export function legacyFilterAdmits(filter: Record<string, unknown> | null, event: HealthEvent): boolean {
  if (filter === null) return true;
  const f = filter[event.eventSource];
  if (typeof f !== 'object' || f === null) return true;
  const { disable, healthy } = f as { disable?: unknown; healthy?: unknown };
  if (disable === true) return false;
  if (typeof healthy === 'boolean') return healthy === (event.newHealth === 'healthy');
  return true;
}

/** The addresses of a legacy `notification_email` (comma-separated), trimmed, without duplicates. */
export function legacyAddresses(list: string): string[] {
  const seen = new Map<string, string>();
  for (const a of list.split(',')) {
    const t = a.trim();
    if (t !== '' && !seen.has(t.toLowerCase())) seen.set(t.toLowerCase(), t);
  }
  return [...seen.values()];
}

/** Writes the outbox rows of health events. */
export class Notifier {
  constructor(
    private readonly clock: Clock,
    /** Called after rows were queued (the worker wakes up; it runs after the transaction commits). */
    private readonly queued: () => void = () => undefined,
  ) {}

  /** The Store's health event listener (TxHealthEventListener): writes through `tx`, the transaction that records `event`. */
  readonly onHealthEvent = async (event: HealthEvent, tx: Repos): Promise<void> => {
    // The first result after a start (health was unknown) never notifies by itself: a restart must not page anyone.
    if (event.oldHealth === null) return;
    const subject = `${event.pool.id}/${event.eventSource === 'pool' ? 'pool' : `origin:${event.origin?.name ?? ''}`}`;
    // One incident per pool or origin: Unhealthy opens it (START), recovery closes it (END) with the same correlation id.
    let correlation = event.id;
    const open = await tx.outbox.openIncident(event.accountId, subject);
    if (event.newHealth === 'unhealthy') {
      if (open !== undefined) correlation = open;
      else await tx.outbox.startIncident(event.accountId, subject, correlation);
    } else if (open !== undefined) {
      correlation = open;
      await tx.outbox.endIncident(event.accountId, subject);
    }
    const newHealth = HEALTH_NAME[event.newHealth];
    const data = {
      account_id: event.accountId,
      pool_id: event.pool.id,
      pool_name: event.pool.name,
      event_source: event.eventSource,
      origin_name: event.origin?.name ?? null,
      origin_address: event.origin?.address ?? null,
      new_health: newHealth,
      old_health: HEALTH_NAME[event.oldHealth],
      reason: event.reason === '' ? 'No failures' : event.reason,
      changed_at: event.at,
    };
    const what = event.origin === undefined ? `Pool ${event.pool.name}` : `Origin ${event.origin.name} (${event.origin.address}) of pool ${event.pool.name}`;
    const text = `${what} is ${newHealth}${event.reason === '' ? '' : `: ${event.reason}`} (was ${data.old_health}, at ${event.at}).`;
    // Names come from users: no line break may reach a mail header.
    const subjectLine = `[Moat] ${what} is ${newHealth}`.replace(/[\r\n]+/g, ' ');
    const ts = Math.floor(Date.parse(event.at) / 1000);
    const now = this.clock.now();
    let rows = 0;
    const insert = async (policyId: string | null, kind: 'email' | 'webhook', target: string, payload: NotificationPayload): Promise<void> => {
      await tx.outbox.enqueue({ accountId: event.accountId, policyId, eventId: event.id, mechanismType: kind, target, payload: JSON.stringify(payload), nowMs: now });
      rows++;
    };
    for (const p of await this.matching(event, tx)) {
      const base = { name: p.name, description: p.description, alert_type: HEALTH_ALERT, text, subject: subjectLine };
      for (const address of mechanismIds(p, 'email')) await insert(p.id, 'email', address, base);
      for (const destination of mechanismIds(p, 'webhooks')) {
        const body = {
          name: p.name,
          text,
          data,
          ts,
          account_id: event.accountId,
          policy_id: p.id,
          policy_name: p.name,
          alert_type: HEALTH_ALERT,
          alert_correlation_id: correlation,
          alert_event: event.newHealth === 'unhealthy' ? ALERT_EVENT_START : ALERT_EVENT_END,
        };
        await insert(p.id, 'webhook', destination, { ...base, body });
      }
    }
    // Legacy: the pool's own addresses, for its own events, as its notification_filter allows.
    if (legacyFilterAdmits(event.pool.notificationFilter, event)) {
      for (const address of legacyAddresses(event.pool.notificationEmail)) {
        await insert(null, 'email', address, {
          name: 'Legacy pool notification',
          description: `notification_email of pool ${event.pool.name}`,
          alert_type: HEALTH_ALERT,
          text,
          subject: subjectLine,
          legacy_pool: event.pool.name,
        });
      }
    }
    if (rows > 0) this.queued();
  };

  private async matching(event: HealthEvent, tx: Repos): Promise<PolicyObject[]> {
    return (await tx.alerting.enabledPolicies(event.accountId, HEALTH_ALERT)).filter(
      (p) =>
        admits(p.filters, 'pool_id', event.pool.id) &&
        admits(p.filters, 'new_health', HEALTH_NAME[event.newHealth]) &&
        admits(p.filters, 'event_source', event.eventSource),
    );
  }
}

/** The ids of a policy's mechanism list (email addresses or destination ids), each once. */
function mechanismIds(p: PolicyObject, kind: 'email' | 'webhooks'): string[] {
  const list = p.mechanisms[kind];
  if (!Array.isArray(list)) return [];
  const out = new Map<string, string>();
  for (const e of list as { id?: unknown }[]) if (typeof e.id === 'string') out.set(kind === 'email' ? e.id.toLowerCase() : e.id, e.id);
  return [...out.values()];
}
