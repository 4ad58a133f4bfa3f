// The figures of the inline benchmark (inline.bench.ts), kept apart from the
// namespaces and processes so that the rules deciding them are tested
// (test/bench/inline-figures.test.ts): when a rung of the rate ladder holds,
// the highest rate without loss over rounds, percentiles, the CPU charged to a
// path per frame (every task's CPU on the path minus the sender alone: the method
// since #19 item 7), the kernel bridge's CPU per frame by the older method (the
// sender's difference), and the aims as ratios.

/** A rung holds when at least this share of what was sent reached B. */
export const DELIVERED_MIN = 0.999;
/** ... and the generator sent at least this share of the target. */
export const GENERATOR_MIN = 0.98;

/** One step of the ladder: `pps` offered for some seconds. */
export interface Rung {
  pps: number;
  /** Frames the generator sent. */
  sent: number;
  /** Frames that reached B's UDP layer (its kernel counters). */
  atB: number;
  /** The generator's CPU seconds. */
  senderCpu: number;
  /** The forwarder's CPU seconds (the daemon's or the floor forwarder's; NaN on the kernel bridge, which has no process). */
  daemonCpu: number;
  /** CPU seconds of the ksoftirqd threads (softirq work the kernel deferred out of the sender's or the forwarder's context). */
  softirqCpu: number;
  /** Frames the daemon forwarded (NaN on the kernel bridge). */
  forwarded: number;
  /** Frames the gateway's ports received that the capture never delivered (0 on the kernel bridge). */
  ringDrops: number;
  outcome: RungOutcome;
}

/** ok: held; short: the generator did not reach the rate (says nothing of the bridge); loss: the bridge lost frames. */
export type RungOutcome = 'ok' | 'loss' | 'short';

/** Whether a rung held: the generator reached its target, B got >= 99.9 % of what was sent, and the rings dropped nothing. */
export function rungOutcome(pps: number, seconds: number, sent: number, atB: number, ringDrops: number): RungOutcome {
  if (sent < GENERATOR_MIN * pps * seconds) return 'short';
  if (atB < DELIVERED_MIN * sent || ringDrops > 0) return 'loss';
  return 'ok';
}

const kpps = (x: number): string => `${(x / 1000).toFixed(1)}k`;

/**
 * The highest rate held in every round (each round climbs until a rung fails), and
 * what stopped the round that stopped lowest. NaN without rounds; 0 when a round held
 * no rung.
 */
export function rateWithoutLoss(ladders: readonly (readonly Rung[])[], rates: readonly number[]): { pps: number; stop: string } {
  let best = Infinity;
  let stop = '';
  for (const ladder of ladders) {
    const held = ladder.filter((r) => r.outcome === 'ok').map((r) => r.pps);
    const top = held.length === 0 ? 0 : Math.max(...held);
    const failed = ladder.find((r) => r.outcome !== 'ok');
    if (top < best) {
      best = top;
      stop =
        failed === undefined
          ? `top of the ladder (${kpps(rates[rates.length - 1]!)})`
          : failed.outcome === 'short'
            ? `generator short at ${kpps(failed.pps)}`
            : `loss at ${kpps(failed.pps)}`;
    }
  }
  return { pps: best === Infinity ? NaN : best, stop };
}

/** The p-th percentile (nearest rank) of `xs`; NaN when empty. */
export function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

/**
 * The kernel bridge's CPU per frame (us). It has no process: veth delivers on the
 * sending CPU, so its softirq work is charged to the sender. It is the sender's CPU per
 * frame on the kernel path minus its mean CPU per frame on the daemon paths (where the
 * frames end in the gateway's capture rings). NaN without a daemon path.
 */
export function kernelBridgeUs(kernelSenderUs: number, daemonSenderUs: readonly number[]): number {
  const xs = daemonSenderUs.filter(Number.isFinite);
  if (xs.length === 0) return NaN;
  return kernelSenderUs - xs.reduce((s, x) => s + x, 0) / xs.length;
}

/** What a CPU figure is made of: frames sent at a fixed rate, and the CPU seconds of every task that worked on them. */
export interface CpuSample {
  sent: number;
  senderCpu: number;
  /** NaN when the path has no forwarding process (the kernel bridge). */
  daemonCpu: number;
  softirqCpu: number;
}

/**
 * All CPU the tasks of a path used, in us per frame sent, over `samples` (the rounds):
 * the sender, the forwarder (none on the kernel bridge: NaN counts as 0) and the
 * ksoftirqd threads. Every piece of the path's work is in one of these: veth delivers
 * in the transmitter's context, so A's send, the gateway port's receive (and on the
 * kernel path the bridge and B's receive) run in the sender; on a forwarder's path,
 * B's receive runs in the forwarder's sendmmsg. NaN without frames.
 */
export function totalUs(samples: readonly CpuSample[]): number {
  const sent = samples.reduce((s, x) => s + x.sent, 0);
  if (sent === 0) return NaN;
  const cpu = samples.reduce((s, x) => s + x.senderCpu + (Number.isNaN(x.daemonCpu) ? 0 : x.daemonCpu) + x.softirqCpu, 0);
  return (cpu * 1e6) / sent;
}

/**
 * The CPU charged to a path per forwarded frame (us): its total (totalUs) minus the
 * baseline's, the same sender at the same rate into the gateway's bare ports (nothing
 * attached: the frames end at the port). The sender's own cost cancels exactly; what
 * remains is the same work on every path: the gateway's side of the delivery, the
 * forwarding, and B's receive (or, with the sink dropping early, only B's tc ingress).
 * Per frame sent, which is per frame forwarded on a rung without loss.
 */
export function chargedUs(path: readonly CpuSample[], baseline: readonly CpuSample[]): number {
  return totalUs(path) - totalUs(baseline);
}

/** "0.92x (aim >= 0.8x: met)"; empty when the ratio is not a number. */
export function aimText(ratio: number, aim: number, atLeast: boolean): string {
  if (!Number.isFinite(ratio)) return '';
  const met = atLeast ? ratio >= aim : ratio <= aim;
  return `${ratio.toFixed(2)}x (aim ${atLeast ? '>=' : '<='} ${aim}x: ${met ? 'met' : 'NOT met'})`;
}
