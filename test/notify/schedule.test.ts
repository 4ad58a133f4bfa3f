// The retry schedule is Standard Webhooks' (5 s, 5 min, 30 min, 2 h, 5 h,
// 10 h, 14 h, 20 h, 24 h after the immediate first attempt), jittered by
// ±20%, with a receiver's Retry-After as a floor; and webhook hosts on
// loopback, link-local, private and metadata addresses are refused.
import { describe, expect, it } from 'vitest';
import { MAX_ATTEMPTS, parseRetryAfter, refusedAddress, retryDelay } from '../../src/notify/index.js';

const S = 1000;
const M = 60 * S;
const H = 60 * M;

describe('the retry schedule', () => {
  it('waits 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h and 24 h without jitter, then gives up after the tenth attempt', () => {
    const middle = () => 0.5; // factor 1 - 0.2 + 0.4 * 0.5 = 1
    const waits = Array.from({ length: 9 }, (_, i) => retryDelay(i + 1, middle));
    expect(waits).toEqual([5 * S, 5 * M, 30 * M, 2 * H, 5 * H, 10 * H, 14 * H, 20 * H, 24 * H]);
    expect(retryDelay(10, middle)).toBeUndefined();
    expect(MAX_ATTEMPTS).toBe(10);
    // About three days in all.
    expect(waits.reduce<number>((a, b) => a + (b ?? 0), 0)).toBe(75 * H + 35 * M + 5 * S);
  });

  it('jitters each wait within ±20%', () => {
    expect(retryDelay(3, () => 0)).toBe(24 * M);
    expect(retryDelay(3, () => 0.999999)).toBe(Math.round(30 * M * (0.8 + 0.4 * 0.999999)));
  });

  it("never retries sooner than the receiver's Retry-After, up to 24 h", () => {
    expect(retryDelay(1, () => 0.5, 120 * S)).toBe(120 * S);
    expect(retryDelay(3, () => 0.5, 120 * S)).toBe(30 * M);
    expect(retryDelay(1, () => 0.5, 1000 * H)).toBe(24 * H);
  });

  it('reads Retry-After as seconds or as an HTTP date', () => {
    const now = Date.parse('2026-11-24T10:00:00Z');
    expect(parseRetryAfter('120', now)).toBe(120 * S);
    expect(parseRetryAfter('Tue, 24 Nov 2026 10:05:00 GMT', now)).toBe(5 * M);
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter(undefined, now)).toBeUndefined();
  });
});

describe('webhook addresses', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['::1', 'loopback'],
    ['169.254.169.254', 'metadata'],
    ['fd00:ec2::254', 'metadata'],
    ['169.254.10.1', 'link-local'],
    ['fe80::1', 'link-local'],
    ['10.1.2.3', 'private'],
    ['172.20.0.1', 'private'],
    ['192.168.1.1', 'private'],
    ['0.0.0.0', 'unspecified'],
    ['::', 'unspecified'],
    ['::ffff:127.0.0.1', 'loopback'],
  ])('refuses %s (%s)', (address, why) => {
    expect(refusedAddress(address)).toBe(why === 'private' && address.startsWith('fd') ? 'private (unique local)' : why);
  });

  it.each(['192.0.2.10', '8.8.8.8', '172.32.0.1', '2001:db8::1', '2606:4700::1111'])('accepts the public address %s', (address) => {
    expect(refusedAddress(address)).toBeUndefined();
  });
});
