// Runs the benchmarks: `npm run bench [-- name...]` (names: expr, pcap-reader, pipeline, address-table).
import { runAddressTableBench } from './address-table.bench.js';
import { runExprBench } from './expr.bench.js';
import { runPcapReaderBench } from './pcap-reader.bench.js';
import { runPipelineBench } from './pipeline.bench.js';

const BENCHES: Record<string, () => void | Promise<void>> = {
  expr: runExprBench,
  'pcap-reader': runPcapReaderBench,
  pipeline: runPipelineBench,
  'address-table': runAddressTableBench,
};

const wanted = process.argv.slice(2);
console.log(`# Moat benchmarks (node ${process.version}, ${new Date().toISOString()})`);
for (const [name, fn] of Object.entries(BENCHES)) {
  if (wanted.length > 0 && !wanted.includes(name)) continue;
  await fn();
}
