// A small seeded PRNG (mulberry32) so that every randomised test can print its
// seed and be replayed exactly.

/** A seeded random source. */
export class Rng {
  private s: number;

  constructor(readonly seed: number) {
    this.s = seed >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    let t = (this.s = (this.s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!;
  }

  chance(p: number): boolean {
    return this.next() < p;
  }
}

/** The seed from `env` or a fresh random one. */
export function seedFrom(envName: string): number {
  const v = process.env[envName];
  return v !== undefined && v !== '' ? Number(v) >>> 0 : (Math.random() * 2 ** 32) >>> 0;
}
