// A minimal benchmark harness: warm up, then time repeated rounds and report the
// median per-operation cost. Results are consumed so the JIT cannot drop the work.

import type { ChildProcess } from 'node:child_process';

/** One measured figure. */
export interface Figure {
  name: string;
  nsPerOp: number;
  opsPerSec: number;
}

let sink = 0;

/** Runs `fn(iterations)` (which does `iterations` operations) and returns the median ns/op. */
export function measure(name: string, fn: (iterations: number) => number, opts: { minMs?: number; rounds?: number } = {}): Figure {
  const minMs = opts.minMs ?? 200;
  const rounds = opts.rounds ?? 7;
  // Calibrate the iteration count so one round takes about minMs.
  let n = 1;
  for (;;) {
    const t0 = process.hrtime.bigint();
    sink ^= fn(n);
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (ms >= minMs / 4 || n > 1e9) {
      n = Math.max(1, Math.round((n * minMs) / Math.max(ms, 0.001)));
      break;
    }
    n *= 4;
  }
  const samples: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = process.hrtime.bigint();
    sink ^= fn(n);
    samples.push(Number(process.hrtime.bigint() - t0) / n);
  }
  samples.sort((a, b) => a - b);
  const ns = samples[samples.length >> 1]!;
  return { name, nsPerOp: ns, opsPerSec: 1e9 / ns };
}

/** Prints a table of figures, with the ratio of each to a named baseline when given. */
export function report(title: string, figures: Figure[], baseline?: Figure): void {
  console.log(`\n## ${title}`);
  const w = Math.max(...figures.map((f) => f.name.length), 10);
  for (const f of figures) {
    const ratio = baseline === undefined || f === baseline ? '' : `  (${(f.nsPerOp / baseline.nsPerOp).toFixed(2)}x ${baseline.name})`;
    console.log(`${f.name.padEnd(w)}  ${fmt(f.nsPerOp).padStart(10)} ns/op  ${(f.opsPerSec / 1e6).toFixed(2).padStart(8)} M ops/s${ratio}`);
  }
  if (sink === 0.5) console.log('');
}

function fmt(ns: number): string {
  return ns < 100 ? ns.toFixed(1) : ns.toFixed(0);
}

/** Calls `onLine` with each complete line a child process prints on its standard output. */
export function lines(child: ChildProcess, onLine: (l: string) => void): void {
  let buf = '';
  child.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    const parts = buf.split('\n');
    buf = parts.pop()!;
    for (const p of parts) onLine(p);
  });
}
