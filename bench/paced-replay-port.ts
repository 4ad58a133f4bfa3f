// A BatchPortOpener for benchmarks that run the daemon's packet workers
// without interfaces: port "IF" replays MOAT_BENCH_REPLAY_DIR/IF.pcap for
// ever, a batch every MOAT_BENCH_REPLAY_INTERVAL_MS (default 1), as a live
// interface under a steady load would hand them. The packet workers import
// this module by its URL (functions do not cross threads) and read the
// settings from the environment they inherit from the process.
//
// It also says why a worker's loop paused: before each batch it reads the
// thread's scheduler statistics (/proc/thread-self/schedstat: ns on a CPU, ns
// runnable but waiting for one), and for every gap between two batches of
// this thread over GAP_REPORT_MS it posts {type: 'bench-gap'} to the main
// thread with the gap's split: time on a CPU (our code, the worker's GC)
// against time in the run queue (the machine: other threads had the cores).
// The packet workers' own handler ignores message types it does not know.

import { openSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { parentPort } from 'node:worker_threads';
import { ReplayBatchPort, type BatchPortOpener, type FrameBatch, type ReplayPortOptions } from '../src/capture/index.js';

/** Gaps reported to the main thread: longer than this (ms). */
const GAP_REPORT_MS = 3;

/** What a reported gap was made of (ms; `at`: its end, performance.timeOrigin + now(), the same clock in every thread). */
export interface BenchGap {
  readonly type: 'bench-gap';
  readonly gapMs: number;
  readonly onCpuMs: number;
  readonly runqueueMs: number;
  readonly at: number;
}

// Per thread (a module is loaded once per worker): the last batch of any of its ports.
let lastAt = 0;
let lastCpu = 0;
let lastWait = 0;
let statFd = -1;
const statBuf = Buffer.alloc(128);

// A pread of the thread's schedstat (kept open: ~2 us, against a batch every ~0.5 ms per thread).
function sched(): [number, number] {
  if (statFd < 0) statFd = openSync('/proc/thread-self/schedstat', 'r');
  const n = readSync(statFd, statBuf, 0, statBuf.length, 0);
  const [cpu, wait] = statBuf.toString('latin1', 0, n).split(' ');
  return [Number(cpu) / 1e6, Number(wait) / 1e6];
}

function beforeBatch(): void {
  const t = performance.now();
  const [cpu, wait] = sched();
  if (lastAt !== 0 && t - lastAt > GAP_REPORT_MS) {
    parentPort?.postMessage({ type: 'bench-gap', gapMs: t - lastAt, onCpuMs: cpu - lastCpu, runqueueMs: wait - lastWait, at: performance.timeOrigin + t } satisfies BenchGap);
  }
  lastAt = t;
  lastCpu = cpu;
  lastWait = wait;
}

/** Opens `iface` as a paced, endless replay of its capture file (see the file's header). */
export const openPacedReplayPort: BatchPortOpener = (iface, options) => {
  const dir = process.env.MOAT_BENCH_REPLAY_DIR;
  if (dir === undefined) throw new Error('openPacedReplayPort: MOAT_BENCH_REPLAY_DIR is not set');
  const o: ReplayPortOptions = { ...options, repeat: 1e12, intervalMs: Number(process.env.MOAT_BENCH_REPLAY_INTERVAL_MS ?? 1) };
  const port = new ReplayBatchPort(join(dir, `${iface}.pcap`), o);
  const onBatch = port.onBatch.bind(port);
  port.onBatch = (handler: (b: FrameBatch) => void) =>
    onBatch((b) => {
      beforeBatch();
      handler(b);
    });
  return port;
};
