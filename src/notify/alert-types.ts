// The alert types Moat accepts in notification policies, with the filters
// each takes, as `available_alerts` lists them. Only the load balancing ones
// make sense for Moat: `load_balancing_health_alert` is raised by the health
// monitor; `load_balancing_pool_enablement_alert` is accepted and stored (for
// configurations carried over from Cloudflare) and raised once pools report
// enable and disable changes. Filters are checked against this table, so a
// typo in a filter key is an error, not a policy that silently never fires.

/** One filter of an alert type: its key and, when closed, the values it takes. */
export interface FilterOption {
  readonly key: string;
  /** The values it may hold; undefined: ids of the account (pool ids). */
  readonly values?: readonly string[];
  readonly description: string;
}

/** An alert type Moat accepts. */
export interface AlertType {
  readonly type: string;
  readonly product: string;
  readonly displayName: string;
  readonly description: string;
  readonly filters: readonly FilterOption[];
}

/** The health alert, the one raised end to end. */
export const HEALTH_ALERT = 'load_balancing_health_alert';

/** Every alert type Moat accepts, in the order available_alerts lists them. */
export const ALERT_TYPES: readonly AlertType[] = [
  {
    type: HEALTH_ALERT,
    product: 'Load Balancing',
    displayName: 'Load Balancing Health Alert',
    description: 'Sent when the health of a pool or of one of its origins changes (Healthy or Unhealthy).',
    filters: [
      { key: 'pool_id', description: 'pools covered (ids of pools of the account); absent: every pool, future ones included' },
      { key: 'new_health', values: ['Healthy', 'Unhealthy'], description: 'the new health that triggers it; absent: both' },
      { key: 'event_source', values: ['pool', 'origin'], description: 'whose health: the pool or an origin; absent: both' },
    ],
  },
  {
    type: 'load_balancing_pool_enablement_alert',
    product: 'Load Balancing',
    displayName: 'Load Balancing Pool Enablement Alert',
    description: 'Sent when a pool is enabled or disabled.',
    filters: [
      { key: 'pool_id', description: 'pools covered; absent: every pool' },
      { key: 'enabled', values: ['true', 'false'], description: 'the new state that triggers it; absent: both' },
    ],
  },
];

/** The alert type of that name, if Moat accepts it. */
export function alertType(type: string): AlertType | undefined {
  return ALERT_TYPES.find((t) => t.type === type);
}

/** The `available_alerts` result: alert types grouped by product, in Cloudflare's shape. */
export function availableAlerts(): Record<string, unknown[]> {
  const out: Record<string, unknown[]> = {};
  for (const t of ALERT_TYPES) {
    (out[t.product] ??= []).push({
      type: t.type,
      display_name: t.displayName,
      description: t.description,
      filter_options: t.filters.map((f) => ({
        Key: f.key,
        ComparisonOperator: '==',
        Optional: true,
        Range: '1-n',
        AvailableValues: f.values === undefined ? null : f.values.map((v) => ({ ID: v, Description: v })),
        Description: f.description,
      })),
    });
  }
  return out;
}
