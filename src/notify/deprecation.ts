// Deprecation notices for the legacy pool `notification_email`: while any
// pool of an account lists addresses there, each address is mailed a notice
// (at most one per interval, a day by default) naming its pools and how to
// move to notification policies; once every pool of the account has an empty
// `notification_email`, the notices stop. Notices go through the outbox like
// any email, so they are retried and appear in the history.

import { newId, type Store } from '../store/index.js';
import { legacyAddresses, type NotificationPayload } from './notifier.js';

/** The pools that still have a legacy address (wired to the pools store by the control plane's assembly). */
export interface LegacyPools {
  legacyPools(): LegacyPool[] | Promise<LegacyPool[]>;
}

/** A pool that still lists addresses in its notification_email. */
export interface LegacyPool {
  accountId: string;
  poolId: string;
  poolName: string;
  notificationEmail: string;
}

/** Default time between two notices to one address. */
export const DEPRECATION_INTERVAL_MS = 24 * 3_600_000;

/** The alert type deprecation notices carry in the history. */
export const DEPRECATION_ALERT = 'notification_email_deprecation';

/** Queues the deprecation notices that are due. */
export class DeprecationNotices {
  constructor(
    private readonly store: Store,
    /** Default: the store's own pools. */
    private readonly pools: LegacyPools = store.loadBalancing,
    readonly intervalMs = DEPRECATION_INTERVAL_MS,
  ) {}

  /** Queues a notice for every legacy address not told within the interval; returns how many. */
  async run(now: number): Promise<number> {
    // (account, address) -> the pools that list it.
    const byAddress = new Map<string, { accountId: string; address: string; pools: string[] }>();
    for (const p of await this.pools.legacyPools()) {
      for (const address of legacyAddresses(p.notificationEmail)) {
        const key = `${p.accountId}\n${address.toLowerCase()}`;
        const entry = byAddress.get(key) ?? { accountId: p.accountId, address, pools: [] };
        entry.pools.push(p.poolName);
        byAddress.set(key, entry);
      }
    }
    return this.store.write(async (tx) => {
      // Addresses no pool lists any more are forgotten: listed again later, they are told at once.
      const known = await tx.outbox.deprecationNotices();
      // When each address still listed was last told, by the key of byAddress (addresses compare without case, as the table does).
      const sent = new Map<string, number>();
      for (const k of known) {
        const key = `${k.account_id}\n${k.address.toLowerCase()}`;
        if (!byAddress.has(key)) await tx.outbox.forgetDeprecationNotice(k.account_id, k.address);
        else sent.set(key, k.last_sent_ms);
      }
      let queued = 0;
      for (const [key, { accountId, address, pools }] of byAddress) {
        const last = sent.get(key);
        if (last !== undefined && now - last < this.intervalMs) continue;
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
        await tx.outbox.enqueue({ accountId, policyId: null, eventId: newId(), mechanismType: 'email', target: address, payload: JSON.stringify(payload), nowMs: now });
        await tx.outbox.recordDeprecationNotice(accountId, address, now);
        queued++;
      }
      return queued;
    });
  }
}
