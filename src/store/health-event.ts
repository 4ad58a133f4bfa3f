// The contract between health (which probes origins and records health edges)
// and notify (which turns each edge into notifications): one health event, as
// the health monitor records it. The health side calls its listeners inside
// the write transaction that records the event, so the notifications written
// to the outbox commit with it or not at all (issue #18 item 9).

/** Health of an origin or pool. */
export type Health = 'healthy' | 'unhealthy';

/** One edge of an origin's or a pool's health. */
export interface HealthEvent {
  /** Stable id of the event (32 hex): the alert correlation id of what it causes. */
  readonly id: string;
  readonly accountId: string;
  /** `pool` for the pool's own edge, `origin` for one origin's. */
  readonly eventSource: 'pool' | 'origin';
  readonly pool: {
    readonly id: string;
    readonly name: string;
    /** The pool's legacy `notification_email` (comma-separated addresses, or ""). */
    readonly notificationEmail: string;
    /** The pool's `notification_filter` as stored (null when none). */
    readonly notificationFilter: Record<string, unknown> | null;
  };
  /** The origin, for an origin event. */
  readonly origin?: { readonly name: string; readonly address: string } | undefined;
  /** Health before (null: unknown, e.g. the first result after a start never notifies by itself). */
  readonly oldHealth: Health | null;
  readonly newHealth: Health;
  /** Why (the failure reason of the probe, e.g. "HTTP 503", "connection refused", "timeout"), or "" on recovery. */
  readonly reason: string;
  /** When the edge was seen (ISO 8601, microseconds, as the store's other stamps). */
  readonly at: string;
}

/** Called by the health monitor inside the transaction that records `event`. It may write (same transaction); it must not do I/O. */
export type HealthEventListener = (event: HealthEvent) => void;
