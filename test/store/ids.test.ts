// Identifiers are 32 lowercase hex characters, drawn from the CSPRNG in pooled
// blocks: no two are equal, also across the refills of the pool.
import { describe, expect, it } from 'vitest';
import { isId, newId, nowStamp } from '../../src/store/index.js';

describe('identifiers and times', () => {
  it('gives 32-hex ids that never repeat, across many refills of the random pool', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 3000; i++) {
      const id = newId();
      expect(isId(id), id).toBe(true);
      seen.add(id);
    }
    expect(seen.size).toBe(3000);
    // every hex digit shows up at every position: the bytes are random, not a counter
    for (let pos = 0; pos < 32; pos += 7) expect(new Set([...seen].map((s) => s[pos])).size).toBe(16);
  });

  it('rejects ids of the wrong length or case', () => {
    expect(['', 'ABCDEF0123456789ABCDEF0123456789', '0123456789abcdef0123456789abcde', '0123456789abcdef0123456789abcdefg'].map(isId)).toEqual([false, false, false, false]);
  });

  it('writes times as RFC 3339 with microseconds', () => {
    expect(nowStamp(new Date('2026-03-17T15:42:37.917Z'))).toBe('2026-03-17T15:42:37.917000Z');
  });
});
