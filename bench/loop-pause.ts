// The longest pause of a packet loop: a pump on the event loop that runs a
// batch of packets every turn (setImmediate), as a capture's callbacks would,
// and records the longest time between two turns, with the garbage
// collections of this thread meanwhile. The swap benchmark measures ruleset
// updates with it (issue #17: no pause over 5 ms), and so can any benchmark
// that drives a daemon in process (the control channel's).

import { PerformanceObserver } from 'node:perf_hooks';

/** What one measured window saw (ms). */
export interface LoopPause {
  /** Longest time between two turns of the pump (the turn running when the window ended included). */
  readonly longestMs: number;
  /** Longest garbage collection of this thread within the window. */
  readonly longestGcMs: number;
}

/** Pumps `batch()` once per turn of the event loop between start() and stop(). */
export class LoopPauseMeter {
  private pumping = false;
  private lastTurn = 0;
  private longest = 0;
  private gcLongest = 0;
  private readonly observer = new PerformanceObserver((list) => {
    if (!this.pumping) return;
    for (const e of list.getEntries()) this.gcLongest = Math.max(this.gcLongest, e.duration);
  });

  constructor(private readonly batch: () => void) {
    this.observer.observe({ entryTypes: ['gc'] });
  }

  /** Starts a window: the pump runs from the next turn on. */
  start(): void {
    this.pumping = true;
    this.longest = 0;
    this.gcLongest = 0;
    this.lastTurn = performance.now();
    setImmediate(this.pump);
  }

  /**
   * Ends the window. Awaits one more turn so that garbage collections of the
   * window, which are reported on a later turn, are counted.
   */
  async stop(): Promise<LoopPause> {
    const longestMs = Math.max(this.longest, performance.now() - this.lastTurn);
    await new Promise((resolve) => setImmediate(resolve));
    this.pumping = false;
    return { longestMs, longestGcMs: this.gcLongest };
  }

  /** Stops observing garbage collections. */
  close(): void {
    this.pumping = false;
    this.observer.disconnect();
  }

  private readonly pump = (): void => {
    if (!this.pumping) return;
    const now = performance.now();
    if (now - this.lastTurn > this.longest) this.longest = now - this.lastTurn;
    this.batch();
    this.lastTurn = performance.now();
    setImmediate(this.pump);
  };
}
