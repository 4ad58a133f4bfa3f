// The rules behind the inline benchmark's figures (bench/inline-figures.ts): when a
// rung of the 64-byte rate ladder holds, the rate without loss over interleaved rounds,
// the latency percentiles, the kernel bridge's CPU per frame and the aims' verdicts.
import { describe, expect, it } from 'vitest';
import { aimText, chargedUs, kernelBridgeUs, percentile, rateWithoutLoss, rungOutcome, type Rung } from '../../bench/inline-figures.js';

function rung(pps: number, outcome: Rung['outcome']): Rung {
  return { pps, sent: pps, atB: pps, senderCpu: 0, daemonCpu: 0, softirqCpu: 0, forwarded: pps, ringDrops: 0, outcome };
}

describe('a rung of the rate ladder', () => {
  it('holds when the generator reached its target and B got everything it sent', () => {
    expect(rungOutcome(50_000, 3, 150_000, 150_000, 0)).toBe('ok');
  });

  it('holds with at most 0.1 % of what was sent missing at B', () => {
    expect(rungOutcome(50_000, 3, 150_000, 149_850, 0)).toBe('ok');
    expect(rungOutcome(50_000, 3, 150_000, 149_849, 0)).toBe('loss');
  });

  it('fails on a single ring drop even when B counted everything', () => {
    expect(rungOutcome(50_000, 3, 150_000, 150_000, 1)).toBe('loss');
  });

  it('is the generator falling short, not a bridge loss, when less than 98 % of the target was sent', () => {
    expect(rungOutcome(100_000, 3, 293_999, 100, 50)).toBe('short');
    expect(rungOutcome(100_000, 3, 294_000, 294_000, 0)).toBe('ok');
  });
});

describe('the highest rate without loss', () => {
  const rates = [25_000, 50_000, 100_000, 150_000];

  it('is the highest rung held in every round, naming what stopped the lowest round', () => {
    const r = rateWithoutLoss(
      [
        [rung(25_000, 'ok'), rung(50_000, 'ok'), rung(100_000, 'ok'), rung(150_000, 'loss')],
        [rung(25_000, 'ok'), rung(50_000, 'ok'), rung(100_000, 'loss')],
      ],
      rates,
    );
    expect(r).toEqual({ pps: 50_000, stop: 'loss at 100.0k' });
  });

  it('says when the generator, not the bridge, ended the climb', () => {
    expect(rateWithoutLoss([[rung(25_000, 'ok'), rung(50_000, 'short')]], rates)).toEqual({ pps: 25_000, stop: 'generator short at 50.0k' });
  });

  it('says when the ladder ended before the bridge lost anything', () => {
    expect(rateWithoutLoss([rates.map((p) => rung(p, 'ok'))], rates)).toEqual({ pps: 150_000, stop: 'top of the ladder (150.0k)' });
  });

  it('is 0 when a round held no rung, and unknown without rounds', () => {
    expect(rateWithoutLoss([[rung(25_000, 'loss')]], rates).pps).toBe(0);
    expect(rateWithoutLoss([], rates).pps).toBeNaN();
  });
});

describe('latency percentiles', () => {
  const rtts = Array.from({ length: 200 }, (_, i) => i + 1); // 1..200 us, shuffled below
  const shuffled = [...rtts.slice(100), ...rtts.slice(0, 100).reverse()];

  it('are nearest-rank over the unsorted samples: p50 of 1..200 is 100, p99 is 198, p100 is the max', () => {
    expect(percentile(shuffled, 50)).toBe(100);
    expect(percentile(shuffled, 99)).toBe(198);
    expect(percentile(shuffled, 100)).toBe(200);
  });

  it('are unknown without samples', () => {
    expect(percentile([], 99)).toBeNaN();
  });
});

describe("the kernel bridge's CPU per frame", () => {
  it("is the sender's CPU per frame on the kernel path less its mean on the daemon paths", () => {
    expect(kernelBridgeUs(4.5, [2.0, 2.5, 3.0])).toBeCloseTo(2.0, 10);
  });

  it('leaves out daemon paths without a figure, and is unknown without any', () => {
    expect(kernelBridgeUs(4.5, [NaN, 2.5])).toBeCloseTo(2.0, 10);
    expect(kernelBridgeUs(4.5, [])).toBeNaN();
  });
});

describe('the CPU charged to a path per frame', () => {
  const sample = (sent: number, senderCpu: number, daemonCpu: number, softirqCpu: number) => ({ sent, senderCpu, daemonCpu, softirqCpu });
  // The sender alone into bare ports: 1.6 us/frame (its own send and the port's receive).
  const baseline = [sample(150_000, 0.24, NaN, 0)];

  it("is the kernel bridge's whole sender CPU (the bridge and B's receive run there) minus the sender alone", () => {
    expect(chargedUs([sample(150_000, 0.45, NaN, 0)], baseline)).toBeCloseTo(1.4, 10);
  });

  it("counts a forwarder's process and the ring delivery its sender pays, not only the process", () => {
    // sender 2.6 us/frame (1.0 of it delivering into the ring), daemon 2.7: charged 2.6 + 2.7 - 1.6
    expect(chargedUs([sample(150_000, 0.39, 0.405, 0)], baseline)).toBeCloseTo(3.7, 10);
  });

  it('counts softirq work deferred to ksoftirqd, on the path and in the baseline alike', () => {
    expect(chargedUs([sample(150_000, 0.3, NaN, 0.15)], [sample(150_000, 0.18, NaN, 0.06)])).toBeCloseTo(1.4, 10);
  });

  it('weighs the rounds by the frames each sent', () => {
    expect(chargedUs([sample(100_000, 0.2, NaN, 0), sample(300_000, 0.9, NaN, 0)], [sample(400_000, 0.4, NaN, 0)])).toBeCloseTo(1.75, 10);
  });

  it('is unknown without frames on the path or in the baseline', () => {
    expect(chargedUs([], baseline)).toBeNaN();
    expect(chargedUs([sample(150_000, 0.45, NaN, 0)], [])).toBeNaN();
  });
});

describe('an aim as a ratio to the kernel bridge', () => {
  it('is met at or above a floor (rate, TCP) and not below it', () => {
    expect(aimText(0.8, 0.8, true)).toBe('0.80x (aim >= 0.8x: met)');
    expect(aimText(0.79, 0.8, true)).toBe('0.79x (aim >= 0.8x: NOT met)');
  });

  it('is met at or below a ceiling (CPU per frame) and not above it', () => {
    expect(aimText(1.25, 1.25, false)).toBe('1.25x (aim <= 1.25x: met)');
    expect(aimText(1.3, 1.25, false)).toBe('1.30x (aim <= 1.25x: NOT met)');
  });

  it('says nothing when a figure is missing', () => {
    expect(aimText(NaN, 0.8, true)).toBe('');
  });
});
