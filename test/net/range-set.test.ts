// Range sets answer exactly what a linear scan over the original ranges answers.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Ip6RangeSet, NumberRangeSet } from '../../src/net/index.js';

const range = fc.tuple(fc.integer({ min: 0, max: 2000 }), fc.integer({ min: 0, max: 300 })).map(([a, w]) => [a, a + w] as const);

describe('NumberRangeSet', () => {
  it('agrees with a linear scan over overlapping, adjacent and reversed ranges', () => {
    fc.assert(
      fc.property(fc.array(range, { maxLength: 30 }), fc.array(fc.integer({ min: -5, max: 2400 }), { maxLength: 50 }), (ranges, probes) => {
        const set = new NumberRangeSet(ranges);
        for (const v of probes) {
          expect(set.has(v)).toBe(ranges.some(([a, b]) => v >= a && v <= b));
        }
      }),
    );
  });

  it('merges adjacent integer ranges into one', () => {
    const set = new NumberRangeSet([[1, 5], [6, 9], [20, 30], [25, 26]]);
    expect(Array.from(set.lo)).toEqual([1, 20]);
    expect(Array.from(set.hi)).toEqual([9, 30]);
  });

  it('never contains NaN, the absent value', () => {
    expect(new NumberRangeSet([[0, 10]]).has(NaN)).toBe(false);
  });
});

const word = fc.integer({ min: 0, max: 0xffffffff });
const addr = fc.tuple(fc.constantFrom(0, 1, 0xffffffff), word, fc.constantFrom(0, 7, 0xffffffff), word);

function cmp(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < 4; i++) if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
  return 0;
}

describe('Ip6RangeSet', () => {
  it('agrees with a linear scan on 128-bit ranges', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(addr, addr), { maxLength: 20 }), fc.array(addr, { maxLength: 40 }), (pairs, probes) => {
        const ranges = pairs.map(([a, b]) => (cmp(a, b) <= 0 ? ([a, b] as const) : ([b, a] as const)));
        const set = new Ip6RangeSet(ranges);
        for (const p of [...probes, ...ranges.flatMap((r) => [r[0], r[1]])]) {
          expect(set.has(p[0], p[1], p[2], p[3])).toBe(ranges.some(([a, b]) => cmp(p, a) >= 0 && cmp(p, b) <= 0));
        }
      }),
    );
  });
});
