// The retry schedule of notification delivery and the clock it runs on. The
// schedule is Standard Webhooks' (immediately, then 5 s, 5 min, 30 min, 2 h,
// 5 h, 10 h, 14 h, 20 h, 24 h: ten attempts over about three days), each wait
// jittered so that a receiver coming back up is not hit by every notification
// that failed at the same moment. The clock and the random source are injected
// so tests can walk the whole schedule without waiting.

/** Time source of the delivery worker (milliseconds since the epoch). */
export interface Clock {
  now(): number;
}

/** The system clock. */
export const SYSTEM_CLOCK: Clock = { now: () => Date.now() };

/** Waits before attempts 2..10, in milliseconds (attempt 1 is immediate). */
export const RETRY_DELAYS_MS: readonly number[] = [
  5_000,
  5 * 60_000,
  30 * 60_000,
  2 * 3_600_000,
  5 * 3_600_000,
  10 * 3_600_000,
  14 * 3_600_000,
  20 * 3_600_000,
  24 * 3_600_000,
];

/** Attempts in all before a notification is given up. */
export const MAX_ATTEMPTS = RETRY_DELAYS_MS.length + 1;

/** Largest Retry-After honoured (a receiver cannot park a notification for longer than the schedule's longest wait). */
export const MAX_RETRY_AFTER_MS = 24 * 3_600_000;

/** Jitter: each wait is scaled by a factor in [1 - JITTER, 1 + JITTER). */
export const JITTER = 0.2;

/**
 * The wait after the `failed`-th failed attempt (1-based), or undefined when
 * that was the last attempt. A Retry-After of the receiver is a floor: the next
 * attempt is never sooner than it asked (capped at 24 h).
 */
export function retryDelay(failed: number, random: () => number, retryAfterMs?: number): number | undefined {
  const base = RETRY_DELAYS_MS[failed - 1];
  if (base === undefined) return undefined;
  const jittered = Math.round(base * (1 - JITTER + 2 * JITTER * random()));
  if (retryAfterMs === undefined) return jittered;
  return Math.max(jittered, Math.min(retryAfterMs, MAX_RETRY_AFTER_MS));
}

/**
 * A Retry-After header in milliseconds from `now`: delta-seconds or an HTTP
 * date (RFC 9110 10.2.3); undefined when absent or malformed.
 */
export function parseRetryAfter(value: string | undefined, now: number): number | undefined {
  if (value === undefined) return undefined;
  const v = value.trim();
  if (/^\d{1,9}$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}
