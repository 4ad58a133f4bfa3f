// The health monitor at scale (#18 item 8): 2,000 HTTP origins (100 pools of
// 20, one 1 s monitor), served by a plain node:http server in its own process
// on loopback, probed by the real HealthMonitor over a real SQLite file (every
// result written, group-committed). Reports probes per second, the monitor's
// CPU per probe (this process: scheduling, HTTP client, state machine, SQLite),
// and lateness: how long after its due time each probe started (p50/p99/max),
// after the first interval (whose start is spread on purpose).
// Knobs: MOAT_BENCH_HEALTH_SECONDS (default 10), MOAT_BENCH_HEALTH_ORIGINS (default 2000).

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { join } from 'node:path';
import { LoadBalancingService } from '../src/api/index.js';
import { HealthMonitor } from '../src/health/index.js';
import { Database, SqliteStore, newId } from '../src/store/index.js';
import { sqliteNotifyRepos } from '../src/notify/index.js';

const SECONDS = Number(process.env.MOAT_BENCH_HEALTH_SECONDS ?? 10);
const ORIGINS = Number(process.env.MOAT_BENCH_HEALTH_ORIGINS ?? 2000);
const PER_POOL = 20;

// One server on 20 ports: origin i of a pool uses port i, so that the
// probes' 4-tuples are spread as real origins' are (2,000 connections a second
// to one address and port exhaust loopback's ephemeral ports in TIME_WAIT).
const ORIGIN_SERVER = `
const http = require('node:http');
const ports = [];
for (let i = 0; i < ${PER_POOL}; i++) {
  const s = http.createServer((req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end('ok'));
  s.listen(0, '127.0.0.1', () => {
    ports.push(s.address().port);
    if (ports.length === ${PER_POOL}) process.stdout.write(ports.join(',') + '\\n');
  });
}
`;

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export async function runHealthBench(): Promise<void> {
  const origin = spawn(process.execPath, ['-e', ORIGIN_SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
  const ports = await new Promise<number[]>((resolve) => origin.stdout!.once('data', (d: Buffer) => resolve(d.toString().trim().split(',').map(Number))));
  const dir = mkdtempSync(join(tmpdir(), 'moat-bench-health-'));
  const store = Database.open(dir);
  try {
    const sqlite = new SqliteStore(store, sqliteNotifyRepos);
    const lb = new LoadBalancingService(sqlite.loadBalancing, { minIntervalSeconds: 1, rawSockets: false }, sqlite.sync.loadBalancing);
    const account = newId();
    const monitor = await lb.createMonitor(account, { type: 'http', interval: 1, timeout: 1, retries: 0 });
    for (let p = 0; p < ORIGINS / PER_POOL; p++) {
      const origins = Array.from({ length: PER_POOL }, (_, i) => ({ name: `o${i}`, address: '127.0.0.1', port: ports[i] }));
      await lb.createPool(account, { name: `pool-${p}`, monitor: monitor.id, origins });
    }
    const hm = new HealthMonitor({ store: sqlite.loadBalancing });
    hm.start();
    // The first interval spreads the first probes on purpose: measure from the second.
    await new Promise((r) => setTimeout(r, 1500));
    const stats = hm.statistics();
    const probes0 = stats.probes;
    const samples0 = stats.samples;
    const loop = monitorEventLoopDelay({ resolution: 10 });
    loop.enable();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, SECONDS * 1000));
    const elapsed = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    loop.disable();
    const probes = stats.probes - probes0;
    const n = Math.min(stats.samples - samples0, stats.lateness.length);
    const late = new Float64Array(n);
    for (let i = 0; i < n; i++) late[i] = stats.lateness[(stats.samples - n + i) % stats.lateness.length]!;
    late.sort();
    await hm.stop();
    const failing = (store.db.prepare("SELECT count(*) AS n FROM lb_origin_health WHERE failure_reason != ''").get() as { n: number }).n;
    console.log(`\n## health monitor: ${ORIGINS} HTTP origins, 1 s interval, ${SECONDS} s`);
    console.log(`probes/s            ${(probes / elapsed).toFixed(0)} (target ${ORIGINS})`);
    console.log(`CPU per probe       ${((cpu.user + cpu.system) / probes).toFixed(1)} us (monitor process; ${(((cpu.user + cpu.system) / 1e6 / elapsed) * 100).toFixed(0)}% of a core)`);
    console.log(`lateness ms         p50 ${percentile(late, 50).toFixed(1)}  p99 ${percentile(late, 99).toFixed(1)}  max ${percentile(late, 100).toFixed(1)} (${n} probes)`);
    console.log(`event loop delay    p99 ${(loop.percentile(99) / 1e6).toFixed(1)}  max ${(loop.max / 1e6).toFixed(1)} ms (what blocks the loop makes probes late)`);
    console.log(`origins failing     ${failing}`);
  } finally {
    store.close();
    origin.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}
