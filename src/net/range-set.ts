// Sorted, merged, inclusive ranges with binary search: the compile-time form of
// integer sets (`tcp.dstport in {80 443 8000..8080}`) and of IP sets and lists.
// Built once off the hot path; lookups allocate nothing.

/**
 * A set of inclusive ranges over numbers (integers up to 2^53, or uint32 IPv4).
 * Ranges are sorted and merged at construction; `has` is a binary search over
 * two parallel Float64Arrays (NaN, the absent value, is never a member).
 */
export class NumberRangeSet {
  readonly lo: Float64Array;
  readonly hi: Float64Array;

  constructor(ranges: ReadonlyArray<readonly [number, number]>) {
    const sorted = ranges.filter((r) => r[0] <= r[1]).slice().sort((a, b) => a[0] - b[0]);
    const lo: number[] = [];
    const hi: number[] = [];
    for (const [a, b] of sorted) {
      const n = lo.length;
      // Merge overlapping and adjacent integer ranges.
      if (n > 0 && a <= hi[n - 1]! + 1) {
        if (b > hi[n - 1]!) hi[n - 1] = b;
      } else {
        lo.push(a);
        hi.push(b);
      }
    }
    this.lo = Float64Array.from(lo);
    this.hi = Float64Array.from(hi);
  }

  /** Number of merged ranges. */
  get size(): number {
    return this.lo.length;
  }

  /** True when v lies in one of the ranges. */
  has(v: number): boolean {
    const lo = this.lo;
    let a = 0;
    let b = lo.length - 1;
    // Invariant: the range containing v, if any, has index in [a, b].
    while (a <= b) {
      const m = (a + b) >>> 1;
      // Written as !(v >= lo) so that NaN (an absent int) is never a member.
      if (!(v >= lo[m]!)) b = m - 1;
      else if (v > this.hi[m]!) a = m + 1;
      else return true;
    }
    return false;
  }
}

/**
 * A set of inclusive 128-bit ranges (IPv6), each bound stored as four uint32
 * words in one Uint32Array (range i: lo at 8i..8i+3, hi at 8i+4..8i+7).
 */
export class Ip6RangeSet {
  readonly bounds: Uint32Array;
  readonly count: number;

  constructor(ranges: ReadonlyArray<readonly [readonly number[], readonly number[]]>) {
    const sorted = ranges.slice().sort((x, y) => cmp(x[0], y[0]));
    const out: Array<[number[], number[]]> = [];
    for (const [a, b] of sorted) {
      const last = out[out.length - 1];
      if (last !== undefined && cmp(a, succ(last[1])) <= 0) {
        if (cmp(b, last[1]) > 0) last[1] = b.slice();
      } else {
        out.push([a.slice(), b.slice()]);
      }
    }
    this.count = out.length;
    this.bounds = new Uint32Array(out.length * 8);
    out.forEach(([a, b], i) => {
      this.bounds.set(a, i * 8);
      this.bounds.set(b, i * 8 + 4);
    });
  }

  /** True when the address w0..w3 lies in one of the ranges. */
  has(w0: number, w1: number, w2: number, w3: number): boolean {
    const bd = this.bounds;
    let a = 0;
    let b = this.count - 1;
    while (a <= b) {
      const m = (a + b) >>> 1;
      const o = m * 8;
      if (cmp4(w0, w1, w2, w3, bd, o) < 0) b = m - 1;
      else if (cmp4(w0, w1, w2, w3, bd, o + 4) > 0) a = m + 1;
      else return true;
    }
    return false;
  }
}

function cmp4(w0: number, w1: number, w2: number, w3: number, bd: Uint32Array, o: number): number {
  if (w0 !== bd[o]) return w0 < bd[o]! ? -1 : 1;
  if (w1 !== bd[o + 1]) return w1 < bd[o + 1]! ? -1 : 1;
  if (w2 !== bd[o + 2]) return w2 < bd[o + 2]! ? -1 : 1;
  if (w3 !== bd[o + 3]) return w3 < bd[o + 3]! ? -1 : 1;
  return 0;
}

function cmp(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < 4; i++) if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
  return 0;
}

// The next 128-bit value (saturating at the maximum), used to merge adjacent ranges.
function succ(w: readonly number[]): number[] {
  const r = w.slice();
  for (let i = 3; i >= 0; i--) {
    if (r[i] !== 0xffffffff) {
      r[i] = r[i]! + 1;
      return r;
    }
    r[i] = 0;
  }
  return w.slice();
}
