// Packet workers' memory: what N workers (daemon/packet-workers.ts) cost the
// process beyond the bundle loaded once, with the pipeline benchmark's bundle
// (50 rules, 3 x 100k-prefix lists, GeoIP country and ASN). Each count of
// workers runs in a fresh process (clean RSS): the bundle is loaded by the
// loader worker, its table put in SharedArrayBuffers, then N workers start
// and replay the first 2,000 frames of the benchmark's capture (replay ports
// hold their file in memory: a small one, so that what is measured is the
// workers, not the files). Reported: the RSS N workers add, N=1 beside N=4
// in the same run, and the table's bytes, which shared memory counts once
// (unshared, each extra worker would add them again). Then a rules-only
// update is swapped in during traffic: what its prepare costs each worker's
// packet loop, step by step, against the 5 ms aim for the longest stall.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { buildPcap, PcapReader } from '../src/capture/index.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { bundleFiles, PacketWorkers, replayPortOpener, WorkerLoading, type PortSpec, type PrepareCost } from '../src/daemon/index.js';
import { validateDaemonConfig } from '../src/config/index.js';
import { writePipelineInputs } from './pipeline.bench.js';

const PACKETS = 100_000;
/** Frames each worker replays. */
const REPLAYED = 2_000;
const MiB = 2 ** 20;

interface ChildFigures {
  readonly workers: number;
  readonly tableBytes: number;
  readonly shared: boolean;
  readonly rssBefore: number;
  readonly rssAfter: number;
  /** A rules-only swap during traffic: from swap() to the flip, each worker's prepare, the longest step on any worker's loop. */
  readonly swapMs: number;
  readonly costs: readonly PrepareCost[];
  readonly longestStepMs: number;
}

async function child(n: number, dir: string): Promise<void> {
  const config = validateDaemonConfig(
    { mode: 'monitor', interfaces: ['x0'], rules: { account: join(dir, 'rules.json') }, lists: { 'svc.malware': join(dir, 'malware.txt'), 'svc.botnetcc': join(dir, 'botnetcc.txt'), office_blocklist: join(dir, 'office.txt') }, geoip: { country: join(dir, 'country.mmdb'), asn: join(dir, 'asn.mmdb') }, metrics: { enabled: false } },
    join(dir, 'daemon.jsonc'),
  );
  const loading = new WorkerLoading(pino({ level: 'silent' }));
  const bundle = await loading.loadTransferred(bundleFiles(config));
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  await new Promise((r) => setTimeout(r, 200));
  const rssBefore = process.memoryUsage().rss;
  const ports = (): PortSpec[] => [{ iface: join(dir, 'replayed.pcap'), judge: true, peer: null, options: { batchMax: 64, repeat: 10_000 } as PortSpec['options'] }];
  const pw = await PacketWorkers.start({ workers: n, ports, opener: replayPortOpener(), bundle, log: pino({ level: 'silent' }) });
  while (pw.counters().ports[0]!.path.packets < n * REPLAYED) await new Promise((r) => setTimeout(r, 5));
  gc?.();
  await new Promise((r) => setTimeout(r, 200));
  const rssAfter = process.memoryUsage().rss;
  const table = pw.tables()[0]!;
  // A rules-only update during traffic (the loader keeps the table): what the swap's prepare costs each worker's loop.
  const rulesFile = join(dir, 'rules.json');
  const ruleset = JSON.parse(readFileSync(rulesFile, 'utf8')) as { rules: unknown[] };
  ruleset.rules.push({ id: 'extra', action: 'block', expression: 'tcp.dstport == 61000' });
  writeFileSync(rulesFile, JSON.stringify(ruleset));
  const next = await loading.loadTransferred(bundleFiles(config));
  const s0 = performance.now();
  const outcome = await pw.swap(next);
  const swapMs = performance.now() - s0;
  if (!outcome.ok) throw outcome.error;
  const longestStepMs = Math.max(...pw.counters().workers.map((w) => w.longestStepMs));
  await pw.stop();
  await loading.stop();
  const out: ChildFigures = { workers: n, tableBytes: table.bytes, shared: table.shared, rssBefore, rssAfter, swapMs, costs: outcome.costs, longestStepMs };
  console.log(JSON.stringify(out));
}

/** Runs the benchmark and prints its figures. */
export function runWorkersBench(): void {
  const dir = mkdtempSync(join(tmpdir(), 'moat-workers-'));
  try {
    console.log(`\n## Packet workers: memory of N workers over one shared bundle (50 rules, 3 x 100k-prefix lists, GeoIP country + ASN; ${REPLAYED.toLocaleString('en-US')} frames replayed per worker)`);
    writePipelineInputs(dir, PACKETS);
    const first: Array<{ data: Uint8Array; tsSec: number }> = [];
    const r = PcapReader.open(join(dir, 'traffic.pcap'));
    while (first.length < REPLAYED && r.next()) first.push({ data: Buffer.from(r.data.subarray(r.offset, r.offset + r.caplen)), tsSec: r.tsSec });
    r.close();
    writeFileSync(join(dir, 'replayed.pcap'), buildPcap(first));
    const me = fileURLToPath(import.meta.url);
    const run = (n: number): ChildFigures => JSON.parse(execFileSync(process.execPath, ['--expose-gc', me, '--child', String(n), dir], { encoding: 'utf8' }).trim().split('\n').pop()!) as ChildFigures;
    const one = run(1);
    const four = run(4);
    const f2 = (x: number) => x.toFixed(2);
    for (const f of [one, four]) {
      const c = f.costs;
      console.log(`rules-only swap during traffic, N=${f.workers}: ${f2(f.swapMs)} ms from swap() to the flip; per worker: functions ${c.map((x) => f2(x.importMs)).join('/')} ms, paths ${c.map((x) => f2(x.pathsMs)).join('/')} ms, warm-up ${c.map((x) => x.slices).join('/')} slices, longest ${c.map((x) => f2(x.longestSliceMs)).join('/')} ms; longest step on a worker's loop ${f2(f.longestStepMs)} ms (aim <= 5 ms)`);
    }
    const added = (f: ChildFigures) => (f.rssAfter - f.rssBefore) / MiB;
    const table = one.tableBytes / MiB;
    console.log(`address table ${table.toFixed(1)} MiB, in SharedArrayBuffers: ${one.shared && four.shared ? 'yes' : 'NO'}`);
    console.log(`RSS added by the workers: N=1 ${added(one).toFixed(1)} MiB, N=4 ${added(four).toFixed(1)} MiB (reference: N=1 measured in the same run)`);
    console.log(`per extra worker ${((added(four) - added(one)) / 3).toFixed(1)} MiB; unshared, each would add the table's ${table.toFixed(1)} MiB more (3 x = ${(3 * table).toFixed(1)} MiB for N=4)`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--child') await child(Number(process.argv[3]), process.argv[4]!);
