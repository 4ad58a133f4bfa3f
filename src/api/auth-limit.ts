// The limits on failed authentication: a bounded per-address counter of
// failed credentials (wrong key, unknown email, unknown token) and a
// server-wide budget for the slow scrypt checks of keys not yet re-hashed.
// Not @fastify/rate-limit: it could count only failures (createRateLimit,
// peeking with {increment: false}), but its check is asynchronous and belongs
// to a fastify instance, while authentication also runs synchronously where
// fastify's own errors and CONNECT are answered (server.ts); a fixed-window
// map does it in place, bounded, on a clock tests can move.

import { isIP } from 'node:net';

/** The failed-authentication limit of a server. */
export interface AuthLimitOptions {
  /** Failed authentications an address may make per window before it is answered 429; 0 turns the limit off. */
  maxFailures: number;
  /** The window, in seconds, from an address's first failure. */
  windowSeconds: number;
  /** Addresses tracked at once; the oldest window is forgotten beyond it (bounded memory under spoofed or spread sources). */
  maxAddresses: number;
}

/** The defaults `moat serve` uses (README, "Authentication"). */
export const DEFAULT_AUTH_LIMIT: AuthLimitOptions = Object.freeze({ maxFailures: 20, windowSeconds: 60, maxAddresses: 65_536 });

/**
 * The key an address is counted under: IPv4 as is (IPv4-mapped IPv6 too),
 * IPv6 by its /64, which one host or customer usually holds whole, so
 * stepping through addresses of one's own prefix does not reset the count.
 */
export function addressKey(address: string | undefined): string {
  if (address === undefined || address === '') return '?';
  if (address.startsWith('::ffff:') && isIP(address.slice(7)) === 4) return address.slice(7);
  if (isIP(address) !== 6) return address;
  const [head = '', tail] = address.split('::');
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? left : [...left, ...new Array<string>(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => (parseInt(g, 16) || 0).toString(16))
    .join(':')}::/64`;
}

/** Failed authentications per address, in fixed windows that start at an address's first failure. */
export class FailureLimiter {
  private readonly windows = new Map<string, { failures: number; until: number }>();

  constructor(
    private readonly options: AuthLimitOptions,
    private readonly now: () => number = Date.now,
  ) {}

  /** Counts a failed authentication from `address`; true when this one reached the limit (once per window: worth a log line). */
  fail(address: string | undefined): boolean {
    if (this.options.maxFailures <= 0) return false;
    const key = addressKey(address);
    const t = this.now();
    const w = this.windows.get(key);
    if (w !== undefined && w.until > t) {
      w.failures++;
      return w.failures === this.options.maxFailures;
    }
    // A new window goes to the end of the map's order, so the first entry is the oldest window.
    this.windows.delete(key);
    this.windows.set(key, { failures: 1, until: t + this.options.windowSeconds * 1000 });
    while (this.windows.size > this.options.maxAddresses) {
      const oldest = this.windows.keys().next().value;
      if (oldest === undefined) break;
      this.windows.delete(oldest);
    }
    return this.options.maxFailures === 1;
  }

  /** Seconds until `address` may fail again (at least 1), or 0 when it is under the limit. */
  retryAfter(address: string | undefined): number {
    if (this.options.maxFailures <= 0) return 0;
    const w = this.windows.get(addressKey(address));
    if (w === undefined) return 0;
    const left = w.until - this.now();
    if (left <= 0) return 0;
    return w.failures >= this.options.maxFailures ? Math.max(1, Math.ceil(left / 1000)) : 0;
  }

  /** Addresses with a window open (for tests and a bound check). */
  get size(): number {
    return this.windows.size;
  }
}

/**
 * A token bucket: at most `perSecond` takes a second on average, `burst` at
 * once. Caps the scrypt checks of legacy keys server-wide, whatever number of
 * addresses they come from, so their cost on the event loop is bounded.
 */
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
    private readonly now: () => number = Date.now,
  ) {
    this.tokens = burst;
    this.last = now();
  }

  /** Takes one token if there is one. */
  take(): boolean {
    const t = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((t - this.last) / 1000) * this.perSecond);
    this.last = t;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}
