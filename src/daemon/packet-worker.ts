// A packet worker thread (node:worker_threads; started by packet-workers.ts):
// opens its own batched ports, judges every frame of each batch with the
// bundle's packet path and forwards the passed ones out of the peer port with
// one forward() per batch, or passes a port's frames unjudged. A new bundle
// is prepared here between batches (functions made, paths built, warm-up in
// 1 ms slices) and adopted only when the main thread flips the shared
// generation number, which it does once every worker has prepared it.

import { parentPort, workerData } from 'node:worker_threads';
import { setThreadCpus, setThreadPriority, type BatchPort, type BatchPortOpener, type FrameBatch } from '../capture/index.js';
import { BundleImporter, COUNTER_SLOTS, FrameInspector, loadErrorData, PacketPath, PathCounters, tableIsShared, type TransferredBundle } from '../engine/index.js';
import {
  CTL_GEN, CTL_HOLD, HOLD_PASS, PORT_SLOTS, S_BAD_CHECKSUM, S_BATCHES, S_BYTES, S_CHECKSUM_SAMPLED, S_FREEZES, S_LINK_UP, S_PACKETS, S_RING_DROPS, S_SEND_ERRORS, S_SENT, S_TRUNCATED, S_UNJUDGED,
  W_BATCHES, W_FRAMES, W_GEN, W_HEADER, W_HELD, W_LONGEST_GAP_MS, W_LONGEST_STEP_MS, W_PACKET_ERRORS,
  type FromWorker, type PacketWorkerData, type PrepareCost, type ToWorker,
} from './packet-worker-layout.js';

/** Longest warm-up slice between two batches (as Daemon.warmedPaths). */
const WARM_SLICE_MS = 1;
/** How often the ports' stats are copied into the shared counters (stats() makes an object: not per batch). */
const STATS_EVERY_MS = 100;

const port = parentPort;
if (port === null) throw new Error('packet-worker.js runs as a worker thread (see packet-workers.ts)');
const data = workerData as PacketWorkerData;
const control = new Int32Array(data.control);
const totals = new Float64Array(data.counters);
const specs = data.ports;
const counters = specs.map((_, p) => new PathCounters(totals.subarray(W_HEADER + p * PORT_SLOTS, W_HEADER + p * PORT_SLOTS + COUNTER_SLOTS)));
const statsBase = (p: number): number => W_HEADER + p * PORT_SLOTS + COUNTER_SLOTS;
const importer = new BundleImporter();
const send = (m: FromWorker): void => port.postMessage(m);

/** The generation judged with, and its paths (one per port). */
let gen = -1;
let paths: PacketPath[] = [];
/** A generation prepared, waiting for the flip. */
let prepared: { gen: number; paths: PacketPath[] } | undefined;
let ports: BatchPort[] = [];
let statsTimer: NodeJS.Timeout | undefined;
let prepares = 0;

// Samples for the main thread (see SampleSettings): drop copies within a per-second budget, checksum checks.
// The drop budget is per stats period (STATS_EVERY_MS), reset by copyStats:
// no clock read per dropped frame.
const dropBudget = Math.ceil(((data.samples?.drops ?? 0) * STATS_EVERY_MS) / 1000);
const checksumEvery = data.samples?.checksumEvery ?? 0;
let dropsSent = 0;
const countdown = specs.map(() => (checksumEvery > 0 ? checksumEvery : Infinity));
let badChecksumSentAt = -Infinity;
const inspector = new FrameInspector();
/** Sum of the last hit counters sent (hits are sent only when they changed). */
let hitsSent = -1;
/** When the last batch began (performance.now()); 0: none yet. */
let lastBatchAt = 0;

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

function noteStep(ms: number): void {
  if (ms > totals[W_LONGEST_STEP_MS]!) totals[W_LONGEST_STEP_MS] = ms;
}

// Prepares a bundle: each step is one turn of the event loop, batches run between them.
async function prepare(b: TransferredBundle): Promise<{ paths: PacketPath[]; cost: PrepareCost }> {
  const later = prepares++ > 0;
  if (data.failPrepare === true && later) throw new Error(`packet worker ${data.index} was told to fail this prepare (a test)`);
  if (data.slowPrepareMs !== undefined && later) await new Promise((resolve) => setTimeout(resolve, data.slowPrepareMs));
  if (data.stallPrepareMs !== undefined && later) {
    const end = performance.now() + data.stallPrepareMs;
    while (performance.now() < end); // a test's stall: the event loop blocked, as a long step would
  }
  const t0 = performance.now();
  const loaded = importer.import(b);
  const importMs = performance.now() - t0;
  noteStep(importMs);
  await tick();
  const t1 = performance.now();
  const made = specs.map((_, p) => new PacketPath(loaded.evaluator, { table: loaded.table, counters: counters[p]!, colo: data.paths.colo, undecodable: data.paths.undecodable }));
  const pathsMs = performance.now() - t1;
  noteStep(pathsMs);
  let slices = 0;
  let longestSliceMs = 0;
  const frames = loaded.evaluator.warmUpFrames.length;
  // One warm-up serves every port: the feedback belongs to the bundle's generated code (see Daemon.swapIn).
  for (let i = 0; made.length > 0 && frames > 0; ) {
    await tick();
    const t = performance.now();
    i = made[0]!.warmUpSlice(i, WARM_SLICE_MS);
    const ms = performance.now() - t;
    slices++;
    longestSliceMs = Math.max(longestSliceMs, ms);
    noteStep(ms);
    if (i >= frames) break;
  }
  return { paths: made, cost: { importMs, pathsMs, slices, longestSliceMs } };
}

// The generation was flipped: take the prepared paths (every worker has them: the flip waits for all).
function adopt(g: number): void {
  if (prepared === undefined || prepared.gen !== g) return; // not ours to judge with (cannot happen: see packet-workers.ts)
  paths = prepared.paths;
  gen = g;
  hitsSent = -1;
  prepared = undefined;
  totals[W_GEN] = g;
}

// The packet loop: one call per batch. Allocates nothing.
function onBatch(p: number, batch: FrameBatch): void {
  // The loop's longest pause (W_LONGEST_GAP_MS): one clock read per batch, not per frame. Measured
  // here: performance.now() costs 51-55 ns (node 20, this 2-core machine), against ~13 us for a
  // 64-frame batch at ~200 ns/frame: under 0.5%. From batch start to batch start, so a gap includes
  // the previous batch's own judging (at most batchMax frames: 0.2 ms at 1,024).
  const t = performance.now();
  if (lastBatchAt !== 0 && t - lastBatchAt > totals[W_LONGEST_GAP_MS]!) totals[W_LONGEST_GAP_MS] = t - lastBatchAt;
  lastBatchAt = t;
  const g = Atomics.load(control, CTL_GEN);
  if (g !== gen) adopt(g);
  const n = batch.count;
  const pass = batch.pass;
  const spec = specs[p]!;
  const hold = Atomics.load(control, CTL_HOLD);
  if (hold !== 0) {
    // No bundle yet: nothing judged; forwarded only with failOpen (pass[] is zeroed by the port).
    totals[W_HELD]! += n;
    if (hold === HOLD_PASS) for (let i = 0; i < n; i++) pass[i] = 1;
  } else if (spec.judge) {
    const path = paths[p]!;
    const bytes = batch.bytes;
    const offset = batch.offset;
    const caplen = batch.caplen;
    const origLen = batch.origLen;
    const lt = ports[p]!.linkType;
    // The try/catch per frame costs nothing measurable: the 50-rule pipeline bundle over its
    // 100k frames, one run on the shared 2-core machine (load 6.3), 238 ns/frame without it
    // against 203 ns/frame with it (medians of 6 passes, alternating): noise, not a cost.
    for (let i = 0; i < n; i++) {
      let drop: boolean;
      try {
        drop = path.process(bytes, offset[i]!, caplen[i]!, origLen[i]!, lt);
      } catch (err) {
        drop = packetError(p, err);
      }
      if (drop) {
        pass[i] = 0;
        if (dropBudget > 0) sampleDrop(p, path.lastRule, bytes, offset[i]!, caplen[i]!, origLen[i]!);
      } else pass[i] = 1;
    }
  } else {
    for (let i = 0; i < n; i++) pass[i] = 1;
    totals[statsBase(p) + S_UNJUDGED]! += n;
  }
  totals[W_BATCHES]!++;
  totals[W_FRAMES]! += n;
  if (spec.peer !== null) {
    if (checksumEvery > 0 && hold === 0) sampleChecksums(p, batch);
    ports[spec.peer]!.forward(batch);
  }
}

// An evaluation that threw: counted, said for the first 10 and then 1 in
// 10,000, and the frame handled per onError (as the daemon's main-thread loop does).
function packetError(p: number, err: unknown): boolean {
  const count = ++totals[W_PACKET_ERRORS]!;
  if (count <= 10 || count % 10000 === 0) send({ type: 'packet-error', port: p, message: err instanceof Error ? err.message : String(err), count });
  return data.onError === 'drop';
}

// A copy of a dropped frame for the main thread's drop log and drop capture.
// The copy allocates: at most dropBudget per stats period, so a flood of
// drops costs a bounded number of copies and messages.
function sampleDrop(p: number, rule: number, bytes: Uint8Array, offset: number, caplen: number, origLen: number): void {
  if (++dropsSent > dropBudget) return;
  const frame = bytes.slice(offset, offset + caplen);
  port!.postMessage({ type: 'drop', port: p, gen, rule, frame, origLen } satisfies FromWorker, [frame.buffer]);
}

// 1 in checksumEvery forwarded frames: the TCP/UDP checksum verified (a view
// over the frame's slot is made then: one small allocation per sample).
function sampleChecksums(p: number, batch: FrameBatch): void {
  const pass = batch.pass;
  const at = statsBase(p);
  for (let i = 0; i < batch.count; i++) {
    if (pass[i] === 0 || --countdown[p]! > 0) continue;
    const frame = batch.bytes.subarray(batch.offset[i]!, batch.offset[i]! + batch.caplen[i]!);
    const ok = inspector.checksumOk(frame, frame.length, ports[p]!.linkType);
    if (ok === undefined) {
      countdown[p] = 1; // not verifiable (not TCP/UDP, a fragment): the next one instead
      continue;
    }
    countdown[p] = checksumEvery;
    totals[at + S_CHECKSUM_SAMPLED]!++;
    if (ok) continue;
    totals[at + S_BAD_CHECKSUM]!++;
    const now = Date.now();
    if (now - badChecksumSentAt >= 60_000) {
      badChecksumSentAt = now;
      const copy = frame.slice();
      port!.postMessage({ type: 'bad-checksum', port: p, frame: copy } satisfies FromWorker, [copy.buffer]);
    }
  }
}

// The running bundle's rule hits, for /metrics: sent with the stats when they changed.
function sendHits(): void {
  const ev = paths[0]?.evaluator;
  if (ev === undefined) return;
  let sum = 0;
  for (let r = 0; r < ev.hitPackets.length; r++) sum += ev.hitPackets[r]!;
  if (sum === hitsSent) return;
  hitsSent = sum;
  const hits = new Float64Array(2 * ev.hitPackets.length);
  hits.set(ev.hitPackets, 0);
  hits.set(ev.hitBytes, ev.hitPackets.length);
  send({ type: 'hits', gen, hits });
}

function copyStats(): void {
  dropsSent = 0;
  ports.forEach((bp, p) => {
    const s = bp.stats();
    const at = statsBase(p);
    totals[at + S_PACKETS] = s.packets;
    totals[at + S_BYTES] = s.bytes;
    totals[at + S_RING_DROPS] = s.ringDrops;
    totals[at + S_FREEZES] = s.freezes;
    totals[at + S_TRUNCATED] = s.truncated;
    totals[at + S_BATCHES] = s.batches;
    totals[at + S_SENT] = s.sent;
    totals[at + S_SEND_ERRORS] = s.sendErrors;
    totals[at + S_LINK_UP] = s.link === 'up' ? 1 : 0;
  });
  sendHits();
}

async function start(): Promise<void> {
  let ready: FromWorker;
  // First, before the bundle's work: raised above the daemon's other threads (see capture's thread-priority.ts).
  const priority = setThreadPriority(`moat-packet-${data.index}`, data.nice);
  // Pinned before the bundle's work too, so that none of it runs on a background CPU the pin would leave.
  const cpus = data.cpus === undefined ? undefined : setThreadCpus(data.cpus);
  try {
    const first = await prepare(data.bundle);
    paths = first.paths;
    gen = data.gen;
    // The first prepare runs before the ports open: it stalls no batch, so it is not a swap's step.
    totals[W_LONGEST_STEP_MS] = 0;
    totals[W_GEN] = gen;
    const mod = (await import(data.opener.module)) as Record<string, unknown>;
    const open = mod[data.opener.name];
    if (typeof open !== 'function') throw new Error(`${data.opener.module} exports no BatchPortOpener named ${data.opener.name}`);
    for (const s of specs) ports.push((open as BatchPortOpener)(s.iface, s.options ?? {}));
    const table = data.bundle.table === null ? { shared: false, bytes: 0 } : tableIsShared(data.bundle.table);
    ready = { type: 'ready', gen, cost: first.cost, tableShared: table.shared, tableBytes: table.bytes, priority, cpus };
  } catch (err) {
    for (const bp of ports) bp.close();
    ports = [];
    send({ type: 'failed', error: loadErrorData(err) });
    return;
  }
  ports.forEach((bp, p) => {
    bp.onBatch((batch) => onBatch(p, batch));
    bp.onLink((state, reason) => {
      totals[statsBase(p) + S_LINK_UP] = state === 'up' ? 1 : 0;
      send({ type: 'link', port: p, state, reason });
    });
  });
  statsTimer = setInterval(copyStats, STATS_EVERY_MS);
  send(ready);
}

port.on('message', (m: ToWorker) => {
  if (m.type === 'prepare') {
    prepare(m.bundle).then(
      (r) => {
        prepared = { gen: m.gen, paths: r.paths };
        // Said at once, so that the main thread can flip as soon as the last worker is ready.
        send({ type: 'prepared', gen: m.gen, ok: true, cost: r.cost, at: process.hrtime.bigint().toString() });
      },
      (err: unknown) => send({ type: 'prepared', gen: m.gen, ok: false, error: loadErrorData(err) }),
    );
  } else if (m.type === 'discard') {
    if (prepared?.gen === m.gen) prepared = undefined;
  } else {
    if (statsTimer !== undefined) clearInterval(statsTimer);
    copyStats();
    for (const bp of ports) bp.close();
    ports = [];
    send({ type: 'stopped' });
    port.close();
  }
});

void start();
