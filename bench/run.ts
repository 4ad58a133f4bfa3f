// Runs the benchmarks: `npm run bench [-- name...]` (names: expr, pcap-reader, pipeline, swap, workers,
// address-table, inline, ring, api, channel, health, soak). Without names every benchmark but the 10-minute soak runs. inline, ring and
// soak need root, iperf3 and network namespaces.
import { runAddressTableBench } from './address-table.bench.js';
import { runApiBench } from './api.bench.js';
import { runChannelBench } from './channel.bench.js';
import { runExprBench } from './expr.bench.js';
import { runHealthBench } from './health.bench.js';
import { runInlineBench } from './inline.bench.js';
import { runPcapReaderBench } from './pcap-reader.bench.js';
import { runPipelineBench } from './pipeline.bench.js';
import { runRingBench } from './ring.bench.js';
import { runSoak } from './soak.bench.js';
import { runSwapBench } from './swap.bench.js';
import { runWorkersBench } from './workers.bench.js';

const BENCHES: Record<string, () => void | Promise<void>> = {
  expr: runExprBench,
  'pcap-reader': runPcapReaderBench,
  pipeline: runPipelineBench,
  swap: runSwapBench,
  workers: runWorkersBench,
  'address-table': runAddressTableBench,
  inline: runInlineBench,
  ring: runRingBench,
  api: runApiBench,
  channel: runChannelBench,
  health: runHealthBench,
  soak: () => runSoak(Number(process.env.MOAT_SOAK_SECONDS ?? 600)),
};

const wanted = process.argv.slice(2);
console.log(`# Moat benchmarks (node ${process.version}, ${new Date().toISOString()})`);
for (const [name, fn] of Object.entries(BENCHES)) {
  if (wanted.length > 0 ? !wanted.includes(name) : name === 'soak') continue;
  await fn();
}
