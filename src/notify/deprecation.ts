// Deprecation notices for the legacy pool `notification_email`: while any
// pool of an account lists addresses there, each address is mailed a notice
// (at most one per interval, a day by default) naming its pools and how to
// move to notification policies; once every pool of the account has an empty
// `notification_email`, the notices stop. Notices go through the outbox like
// any email, so they are retried and appear in the history.

import { newId, nowStamp, type Database } from '../store/index.js';
import { legacyAddresses, type NotificationPayload } from './notifier.js';

/** The pools that still have a legacy address (wired to the pools store by the control plane's assembly). */
export interface LegacyPools {
  legacyPools(): readonly { accountId: string; poolId: string; poolName: string; notificationEmail: string }[];
}

/** Default time between two notices to one address. */
export const DEPRECATION_INTERVAL_MS = 24 * 3_600_000;

/** The alert type deprecation notices carry in the history. */
export const DEPRECATION_ALERT = 'notification_email_deprecation';

/** Queues the deprecation notices that are due. */
export class DeprecationNotices {
  constructor(
    private readonly store: Database,
    private readonly pools: LegacyPools,
    readonly intervalMs = DEPRECATION_INTERVAL_MS,
  ) {}

  /** Queues a notice for every legacy address not told within the interval; returns how many. */
  run(now: number): number {
    // (account, address) -> the pools that list it.
    const byAddress = new Map<string, { accountId: string; address: string; pools: string[] }>();
    for (const p of this.pools.legacyPools()) {
      for (const address of legacyAddresses(p.notificationEmail)) {
        const key = `${p.accountId}\n${address.toLowerCase()}`;
        const entry = byAddress.get(key) ?? { accountId: p.accountId, address, pools: [] };
        entry.pools.push(p.poolName);
        byAddress.set(key, entry);
      }
    }
    const db = this.store.db;
    return this.store.write(() => {
      // Addresses no pool lists any more are forgotten: listed again later, they are told at once.
      const known = db.prepare('SELECT account_id, address FROM alert_deprecation_notices').all() as { account_id: string; address: string }[];
      for (const k of known) {
        if (!byAddress.has(`${k.account_id}\n${k.address.toLowerCase()}`)) db.prepare('DELETE FROM alert_deprecation_notices WHERE account_id = ? AND address = ?').run(k.account_id, k.address);
      }
      let queued = 0;
      for (const { accountId, address, pools } of byAddress.values()) {
        const last = db.prepare('SELECT last_sent_ms FROM alert_deprecation_notices WHERE account_id = ? AND address = ?').get(accountId, address) as { last_sent_ms: number } | undefined;
        if (last !== undefined && now - last.last_sent_ms < this.intervalMs) continue;
        const names = [...new Set(pools)].sort();
        const payload: NotificationPayload = {
          name: 'Deprecation notice',
          description: 'notification_email is deprecated',
          alert_type: DEPRECATION_ALERT,
          subject: `[Moat] Action needed: notification_email is deprecated (${names.length} pool${names.length === 1 ? '' : 's'})`,
          text:
            `Your address is in the notification_email of ${names.length === 1 ? 'pool' : 'pools'} ${names.join(', ')} of account ${accountId}. ` +
            'notification_email is deprecated in favour of notification policies. To move:\n' +
            '1. list the pools and note those with a non-empty notification_email;\n' +
            '2. create a notification policy (alert_type load_balancing_health_alert, filters pool_id, new_health ["Healthy", "Unhealthy"], ' +
            'event_source ["pool", "origin"], mechanisms.email with your address);\n' +
            '3. set notification_email to "" on every pool (PATCH /accounts/{account_id}/load_balancers/pools, page by page).\n' +
            'These notices stop once no pool of the account has a notification_email.',
        };
        db.prepare(
          "INSERT INTO alert_outbox (id, account_id, policy_id, event_id, mechanism_type, target, payload, created, status, next_attempt_ms) VALUES (?, ?, NULL, ?, 'email', ?, ?, ?, 'pending', ?)",
        ).run(newId(), accountId, newId(), address, JSON.stringify(payload), nowStamp(new Date(now)), now);
        db.prepare('INSERT INTO alert_deprecation_notices (account_id, address, last_sent_ms) VALUES (?, ?, ?) ON CONFLICT (account_id, address) DO UPDATE SET last_sent_ms = excluded.last_sent_ms').run(accountId, address, now);
        queued++;
      }
      return queued;
    });
  }
}
