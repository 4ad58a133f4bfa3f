// The failed-authentication limit on a clock the test moves: an address is
// limited after its Nth failure until its window ends, IPv6 addresses of one
// /64 count together, the map of addresses stays bounded, and the scrypt
// budget allows its burst and then its rate.
import { describe, expect, it } from 'vitest';
import { FailureLimiter, TokenBucket, addressKey } from '../../src/api/auth-limit.js';

function clock(start = 1_000_000): { now: () => number; advance: (ms: number) => void } {
  let t = start;
  return { now: () => t, advance: (ms) => (t += ms) };
}

describe('the failure limiter', () => {
  it('limits an address after its Nth failure, for what is left of the window that its first failure opened', () => {
    const c = clock();
    const l = new FailureLimiter({ maxFailures: 3, windowSeconds: 60, maxAddresses: 100 }, c.now);
    l.fail('192.0.2.1');
    c.advance(10_000);
    l.fail('192.0.2.1');
    expect(l.retryAfter('192.0.2.1')).toBe(0);
    c.advance(5_000);
    l.fail('192.0.2.1');
    // Opened at t=0, now t=15 s: 45 s left.
    expect(l.retryAfter('192.0.2.1')).toBe(45);
    expect(l.retryAfter('192.0.2.2')).toBe(0);
    c.advance(44_500);
    expect(l.retryAfter('192.0.2.1')).toBe(1);
    c.advance(500);
    expect(l.retryAfter('192.0.2.1')).toBe(0);
    // A failure after the window opens a new one, counted from 1.
    l.fail('192.0.2.1');
    expect(l.retryAfter('192.0.2.1')).toBe(0);
  });

  it('says which failure reached the limit, once per window', () => {
    const c = clock();
    const l = new FailureLimiter({ maxFailures: 3, windowSeconds: 60, maxAddresses: 100 }, c.now);
    expect(Array.from({ length: 5 }, () => l.fail('192.0.2.1'))).toEqual([false, false, true, false, false]);
    c.advance(60_000);
    expect(Array.from({ length: 3 }, () => l.fail('192.0.2.1'))).toEqual([false, false, true]);
    const one = new FailureLimiter({ maxFailures: 1, windowSeconds: 60, maxAddresses: 100 }, c.now);
    expect([one.fail('192.0.2.1'), one.fail('192.0.2.1')]).toEqual([true, false]);
  });

  it('does nothing with a limit of 0', () => {
    const l = new FailureLimiter({ maxFailures: 0, windowSeconds: 60, maxAddresses: 100 });
    for (let i = 0; i < 100; i++) l.fail('192.0.2.1');
    expect(l.retryAfter('192.0.2.1')).toBe(0);
    expect(l.size).toBe(0);
  });

  it('counts the addresses of one IPv6 /64 together, and an IPv4-mapped address as its IPv4 address', () => {
    expect(addressKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(addressKey('2001:db8:1:2::ffff')).toBe('2001:db8:1:2::/64');
    expect(addressKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(addressKey('::1')).toBe('0:0:0:0::/64');
    expect(addressKey('::ffff:192.0.2.7')).toBe('192.0.2.7');
    expect(addressKey('192.0.2.7')).toBe('192.0.2.7');
    expect(addressKey(undefined)).toBe('?');
    const l = new FailureLimiter({ maxFailures: 2, windowSeconds: 60, maxAddresses: 100 });
    l.fail('2001:db8:1:2::1');
    l.fail('2001:db8:1:2::2');
    expect(l.retryAfter('2001:db8:1:2:ffff:ffff:ffff:ffff')).toBeGreaterThan(0);
    expect(l.retryAfter('2001:db8:1:3::1')).toBe(0);
  });

  it('holds at most maxAddresses windows, forgetting the oldest', () => {
    const c = clock();
    const l = new FailureLimiter({ maxFailures: 1, windowSeconds: 60, maxAddresses: 1000 }, c.now);
    for (let i = 0; i < 5000; i++) {
      l.fail(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
      c.advance(1);
    }
    expect(l.size).toBe(1000);
    expect(l.retryAfter('10.0.0.0')).toBe(0);
    expect(l.retryAfter('10.0.19.135')).toBeGreaterThan(0); // i = 4999
  });
});

describe('the scrypt budget', () => {
  it('allows its burst at once, then its rate', () => {
    const c = clock();
    const b = new TokenBucket(2, 2, c.now);
    expect([b.take(), b.take(), b.take()]).toEqual([true, true, false]);
    c.advance(250);
    expect(b.take()).toBe(false);
    c.advance(250);
    expect([b.take(), b.take()]).toEqual([true, false]);
    // Idle for long, it holds no more than its burst.
    c.advance(60_000);
    expect([b.take(), b.take(), b.take()]).toEqual([true, true, false]);
  });
});
