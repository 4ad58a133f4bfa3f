// N packet worker threads (packet-worker.ts) judging and forwarding frames
// from their own batched ports, run from the main thread: started with one
// bundle, swapped to another atomically across all of them, their counters
// read from shared memory, a worker that dies restarted alone.
//
// The bundle is loaded once (by the loader worker, worker-loading.ts) and its
// address table's arrays are put in SharedArrayBuffers (engine's shareBundle):
// every worker wraps the same memory and makes only the generated functions.
//
// A swap has two phases. Every worker prepares the new bundle between its
// batches (functions, paths, warm-up in slices) and says so; only when all
// have, the main thread stores the new generation number in a shared word,
// which each worker reads (Atomics.load) at the start of each batch and then
// judges with the prepared paths. So no frame is judged by the new bundle
// before every worker holds it ready; a bundle one worker fails to prepare
// (or a worker that dies meanwhile) is rejected for all, and the running one
// stays everywhere. What is not promised: that all workers switch at the same
// instant (each switches at its next batch after the flip; a frame in a batch
// begun before the flip is judged by the old bundle).

import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { cpuList, type ThreadPriority } from '../capture/index.js';
import { COUNTER_SLOTS, loadErrorOf, PathCounters, shareBundle, type TransferredBundle } from '../engine/index.js';
import { ERRORS, MoatError } from '../errors/index.js';
import {
  W_PACKET_ERRORS, CTL_GEN, CTL_HOLD, CTL_SLOTS, HOLD_DROP, HOLD_PASS, PORT_SLOTS, S_BAD_CHECKSUM, S_BATCHES, S_BYTES, S_CHECKSUM_SAMPLED, S_FREEZES, S_LINK_UP, S_PACKETS, S_RING_DROPS, S_SEND_ERRORS, S_SENT, S_TRUNCATED, S_UNJUDGED,
  W_BATCHES, W_FRAMES, W_GEN, W_HEADER, W_HELD, W_LONGEST_GAP_MS, W_LONGEST_STEP_MS, workerSlots,
  type FromWorker, type OpenerRef, type PacketWorkerData, type PathSettings, type PortSpec, type PrepareCost, type SampleSettings, type ToWorker,
} from './packet-worker-layout.js';

/** The worker's script: the compiled packet-worker.js (from the TypeScript sources, dist's; see loaderWorkerScript). */
export function packetWorkerScript(): URL {
  return import.meta.url.endsWith('.ts') ? new URL('../../dist/src/daemon/packet-worker.js', import.meta.url) : new URL('./packet-worker.js', import.meta.url);
}

/** The opener of replay ports (capture's ReplayBatchPort: capture files as ports), as a worker imports it. */
export function replayPortOpener(script = packetWorkerScript()): OpenerRef {
  return { module: new URL('../capture/index.js', script).href, name: 'openReplayPort' };
}

/** The opener of the ring engine's ports (capture's openRingPort), as a worker imports it. */
export function ringPortOpener(script = packetWorkerScript()): OpenerRef {
  return { module: new URL('../capture/index.js', script).href, name: 'openRingPort' };
}

/** What PacketWorkers.start takes. */
export interface PacketWorkersOptions {
  readonly workers: number;
  /** Each worker's ports, the same number and roles for every worker (worker i's own files or fanout sockets). */
  readonly ports: readonly PortSpec[] | ((worker: number) => readonly PortSpec[]);
  readonly opener: OpenerRef;
  /** The first bundle (its table is shared here if it is not already). */
  readonly bundle: TransferredBundle;
  readonly paths?: PathSettings | undefined;
  /** Drop copies and checksum samples the workers report (none by default). */
  readonly samples?: SampleSettings | undefined;
  /** A frame whose evaluation throws: forwarded ('pass', the default) or not ('drop'). */
  readonly onError?: 'pass' | 'drop' | undefined;
  /** The workers' reports: drop samples, bad checksums, link changes, rule hits (by worker index). */
  readonly onEvent?: ((worker: number, m: Extract<FromWorker, { type: 'drop' | 'bad-checksum' | 'link' | 'hits' | 'packet-error' }>) => void) | undefined;
  /** Start holding: no bundle yet (see hold()). */
  readonly hold?: 'drop' | 'pass' | undefined;
  readonly log: Logger;
  /** The workers' nice value (capture.priority.packet; see capture's thread-priority.ts); undefined: left as inherited. */
  readonly nice?: number | undefined;
  /** The packet CPUs (capture.cpus.packet): worker i pins itself to cpus[i mod n]; undefined: not pinned. */
  readonly cpus?: readonly number[] | undefined;
  readonly script?: URL | undefined;
  /** For tests: the workers (by index) that fail every prepare after their first. */
  readonly failPrepareIn?: readonly number[] | undefined;
  /** For tests: a worker that takes `ms` longer to prepare every bundle after its first (a worker on a busy core). */
  readonly slowPrepare?: { readonly worker: number; readonly ms: number } | undefined;
  /** For tests: a worker whose prepare of every bundle after its first blocks its event loop `ms` (a step that stalls its packet loop). */
  readonly stallPrepare?: { readonly worker: number; readonly ms: number } | undefined;
}

/** A swap's outcome. Never a rejection: a failed swap leaves the running bundle everywhere. */
export type SwapOutcome =
  | { readonly ok: true; readonly gen: number; readonly costs: readonly PrepareCost[]; readonly preparedAt: readonly bigint[] }
  | { readonly ok: false; readonly gen: number; readonly error: Error; readonly worker: number };

/** A port's BatchPort stats, summed over workers. */
export interface PortTotals {
  packets: number;
  bytes: number;
  ringDrops: number;
  freezes: number;
  truncated: number;
  batches: number;
  sent: number;
  sendErrors: number;
  /** Workers whose port's link is up. */
  linkUp: number;
  unjudged: number;
  checksumSampled: number;
  badChecksums: number;
}

/** Counters read from shared memory: per port (summed over workers) and per worker. */
export interface WorkerCounters {
  readonly ports: ReadonlyArray<{ readonly iface: string; readonly path: PathCounters; readonly stats: PortTotals }>;
  readonly workers: ReadonlyArray<{ readonly batches: number; readonly frames: number; readonly held: number; readonly packetErrors: number; readonly gen: number; readonly longestStepMs: number; readonly longestGapMs: number; readonly restarts: number; readonly ports: readonly PortTotals[] }>;
}

interface Slot {
  thread: Worker | undefined;
  readonly counters: SharedArrayBuffer;
  restarts: number;
  /** Totals of the ports of this slot's dead threads (a new thread's ports count from zero). */
  readonly base: Float64Array;
  ready: boolean;
  /** What the thread said when ready: whether its table is over shared memory, and its bytes. */
  table: { shared: boolean; bytes: number } | undefined;
  /** What the thread said when ready: its nice value, and why not the one asked. */
  priority: ThreadPriority | undefined;
}

interface PendingSwap {
  readonly gen: number;
  readonly waiting: Set<number>;
  readonly costs: PrepareCost[];
  readonly at: bigint[];
  readonly done: (o: SwapOutcome) => void;
}

const zeroTotals = (): PortTotals => ({ packets: 0, bytes: 0, ringDrops: 0, freezes: 0, truncated: 0, batches: 0, sent: 0, sendErrors: 0, linkUp: 0, unjudged: 0, checksumSampled: 0, badChecksums: 0 });

/** The packet workers (see the file's header). */
export class PacketWorkers {
  private readonly control = new Int32Array(new SharedArrayBuffer(CTL_SLOTS * 4));
  private readonly slots: Slot[] = [];
  private readonly specs: Array<readonly PortSpec[]>;
  private readonly script: URL;
  /** The bundle in force and its generation (what a restarted worker starts with). */
  private current!: { gen: number; bundle: TransferredBundle };
  /** Tables and value screens by the exporter's numbers (a bundle that reuses its table does not carry it). */
  private table: { id: number; parts: NonNullable<TransferredBundle['table']> } | undefined;
  private screens = new Map<string, Uint32Array>();
  private swapping: PendingSwap | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private stopping = false;
  private startWaiters = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();

  private constructor(private readonly options: PacketWorkersOptions) {
    this.script = options.script ?? packetWorkerScript();
    this.specs = Array.from({ length: options.workers }, (_, w) => (typeof options.ports === 'function' ? options.ports(w) : options.ports));
    const n = this.specs[0]?.length ?? 0;
    if (this.specs.some((s) => s.length !== n)) throw new RangeError('every packet worker has the same ports');
    Atomics.store(this.control, CTL_GEN, 1);
    if (options.hold !== undefined) this.hold(options.hold);
    for (let w = 0; w < options.workers; w++) {
      this.slots.push({ thread: undefined, counters: new SharedArrayBuffer(workerSlots(n) * 8), restarts: 0, base: new Float64Array(n * PORT_SLOTS), ready: false, table: undefined, priority: undefined });
    }
  }

  /** Starts the workers with `options.bundle`; resolves when every one judges with it, rejects (and stops them) if one cannot. */
  static async start(options: PacketWorkersOptions): Promise<PacketWorkers> {
    if (!Number.isInteger(options.workers) || options.workers < 1) throw new RangeError(`packet workers: at least 1, got ${options.workers}`);
    const script = options.script ?? packetWorkerScript();
    if (!existsSync(fileURLToPath(script))) throw new MoatError('PACKET_WORKER_FAILED', `${fileURLToPath(script)} is missing (running from the TypeScript sources: npm run build)`);
    const pw = new PacketWorkers(options);
    pw.current = { gen: 1, bundle: pw.complete(shareBundle(options.bundle)) };
    try {
      // One after the other: a worker opens its ports in order, and a fanout group numbers its
      // members in the order they join, so worker i is member i of every port's group and both
      // directions of a flow (hashed symmetrically) reach the same worker. Started at once, the
      // workers could join the two ports' groups in different orders.
      for (let w = 0; w < pw.slots.length; w++) await pw.spawn(w);
    } catch (err) {
      await pw.stop();
      throw err;
    }
    return pw;
  }

  /** The generation every worker judges with (or will, at its next batch). */
  get generation(): number {
    return Atomics.load(this.control, CTL_GEN);
  }

  /**
   * No bundle yet: 'drop' counts frames as held and forwards nothing, 'pass'
   * forwards them unjudged (failOpen); null judges again (from each worker's next batch).
   */
  hold(mode: 'drop' | 'pass' | null): void {
    Atomics.store(this.control, CTL_HOLD, mode === null ? 0 : mode === 'drop' ? HOLD_DROP : HOLD_PASS);
  }

  /** Per worker, as it said when it started: whether its address table is over SharedArrayBuffers, and the table's bytes. */
  tables(): ReadonlyArray<{ shared: boolean; bytes: number } | undefined> {
    return this.slots.map((s) => s.table);
  }

  /** Per worker, as it said when it started: its thread's name, kernel id and nice value (moat_thread_nice). */
  priorities(): ReadonlyArray<ThreadPriority | undefined> {
    return this.slots.map((s) => s.priority);
  }

  /** Worker i's thread (diagnostics and tests). */
  thread(i: number): Worker | undefined {
    return this.slots[i]?.thread;
  }

  /**
   * Swaps `bundle` in on every worker (see the file's header); swaps run one
   * at a time, in the order asked. Never rejects.
   */
  swap(bundle: TransferredBundle): Promise<SwapOutcome> {
    const run = this.queue.then(() => this.runSwap(bundle));
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** The counters, read from shared memory (no message to the workers). Port stats lag by up to 100 ms. */
  counters(): WorkerCounters {
    const nPorts = this.specs[0]?.length ?? 0;
    const ports = Array.from({ length: nPorts }, (_, p) => ({ iface: this.specs[0]![p]!.iface, path: new PathCounters(), stats: zeroTotals() }));
    const workers = this.slots.map((s) => {
      const t = new Float64Array(s.counters);
      const own: PortTotals[] = [];
      for (let p = 0; p < nPorts; p++) {
        const at = W_HEADER + p * PORT_SLOTS;
        for (let k = 0; k < COUNTER_SLOTS; k++) ports[p]!.path.v[k]! += t[at + k]!;
        const b = at + COUNTER_SLOTS;
        const base = p * PORT_SLOTS + COUNTER_SLOTS;
        const v = (k: number): number => t[b + k]! + s.base[base + k]!;
        const pt: PortTotals = {
          packets: v(S_PACKETS), bytes: v(S_BYTES), ringDrops: v(S_RING_DROPS), freezes: v(S_FREEZES), truncated: v(S_TRUNCATED),
          batches: v(S_BATCHES), sent: v(S_SENT), sendErrors: v(S_SEND_ERRORS), linkUp: t[b + S_LINK_UP]!, unjudged: t[b + S_UNJUDGED]!,
          checksumSampled: t[b + S_CHECKSUM_SAMPLED]!, badChecksums: t[b + S_BAD_CHECKSUM]!,
        };
        own.push(pt);
        const sum = ports[p]!.stats;
        for (const key of Object.keys(sum) as Array<keyof PortTotals>) sum[key] += pt[key];
      }
      return { batches: t[W_BATCHES]!, frames: t[W_FRAMES]!, held: t[W_HELD]!, packetErrors: t[W_PACKET_ERRORS]!, gen: t[W_GEN]!, longestStepMs: t[W_LONGEST_STEP_MS]!, longestGapMs: t[W_LONGEST_GAP_MS]!, restarts: s.restarts, ports: own };
    });
    return { ports, workers };
  }

  /**
   * Starts a new measuring window for every worker's longestStepMs and
   * longestGapMs (they keep their maximum since the last reset). A worker may
   * write a larger value it measured just before the reset: a window's first
   * batch can carry the previous window's last gap, no more.
   */
  resetPauses(): void {
    for (const s of this.slots) {
      const t = new Float64Array(s.counters);
      t[W_LONGEST_STEP_MS] = 0;
      t[W_LONGEST_GAP_MS] = 0;
    }
  }

  /** Stops every worker (their ports closed, their last stats copied). Idempotent. */
  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all(this.slots.map(async (s) => {
      const t = s.thread;
      if (t === undefined) return;
      s.thread = undefined;
      const stopped = new Promise<void>((resolve) => {
        const done = (): void => resolve();
        t.on('message', (m: FromWorker) => { if (m.type === 'stopped') done(); });
        t.once('exit', done);
        setTimeout(done, 2000).unref();
      });
      t.postMessage({ type: 'stop' } satisfies ToWorker);
      await stopped;
      await t.terminate();
    }));
    if (this.swapping !== undefined) this.finishSwap({ ok: false, gen: this.swapping.gen, error: new MoatError('PACKET_WORKER_FAILED', 'the packet workers were stopped during the swap'), worker: -1 });
  }

  // A bundle whose table and screens are all there (a bundle that reuses its table gets the kept one: a
  // restarted worker has no previous table), over shared memory.
  private complete(b: TransferredBundle): TransferredBundle {
    if (!b.sameGeoIp) this.screens = new Map();
    for (const [memo, s] of b.screens) {
      this.screens.delete(memo);
      this.screens.set(memo, s);
      if (this.screens.size > 8) this.screens.delete(this.screens.keys().next().value!);
    }
    let table = b.table;
    if (table === null) {
      if (this.table === undefined || this.table.id !== b.tableId) throw new MoatError('PACKET_WORKER_FAILED', `the bundle reuses address table ${b.tableId}, which the packet workers never received`);
      table = this.table.parts;
    }
    return { ...b, table, screens: [...this.screens] };
  }

  private async runSwap(bundle: TransferredBundle): Promise<SwapOutcome> {
    const gen = this.current.gen + 1;
    if (this.stopping) return { ok: false, gen, error: new MoatError('PACKET_WORKER_FAILED', 'the packet workers are stopped'), worker: -1 };
    const keptTable = this.table;
    const keptScreens = this.screens;
    let full: TransferredBundle;
    try {
      full = this.complete(shareBundle(bundle));
    } catch (err) {
      return { ok: false, gen, error: err as Error, worker: -1 };
    }
    const notReady = this.slots.findIndex((s) => !s.ready);
    if (notReady !== -1) {
      this.screens = keptScreens;
      return { ok: false, gen, error: new MoatError('PACKET_WORKER_FAILED', `packet worker ${notReady} is restarting; the swap is rejected and the running bundle stays`), worker: notReady };
    }
    const outcome = await new Promise<SwapOutcome>((done) => {
      this.swapping = { gen, waiting: new Set(this.slots.map((_, w) => w)), costs: [], at: [], done };
      for (const s of this.slots) s.thread!.postMessage({ type: 'prepare', gen, bundle: full } satisfies ToWorker);
    });
    if (outcome.ok) {
      this.current = { gen, bundle: full };
      this.table = { id: full.tableId, parts: full.table! };
      // The flip: every worker judges with `gen` from its next batch on.
      Atomics.store(this.control, CTL_GEN, gen);
      this.options.log.info({ gen, workers: this.slots.length, digest: bundle.digest }, 'packet workers: bundle swapped');
    } else {
      this.table = keptTable;
      this.screens = keptScreens;
      for (const s of this.slots) s.thread?.postMessage({ type: 'discard', gen } satisfies ToWorker);
      this.options.log.error({ code: ERRORS.PACKET_WORKER_FAILED.code, gen, worker: outcome.worker }, `packet workers: the bundle is rejected for all workers, the running one stays (${outcome.error.message})`);
    }
    return outcome;
  }

  private finishSwap(o: SwapOutcome): void {
    const s = this.swapping;
    if (s === undefined) return;
    this.swapping = undefined;
    s.done(o);
  }

  private spawn(w: number): Promise<void> {
    const slot = this.slots[w]!;
    const data: PacketWorkerData = {
      index: w, control: this.control.buffer as SharedArrayBuffer, counters: slot.counters, opener: this.options.opener, ports: this.specs[w]!,
      paths: this.options.paths ?? {}, samples: this.options.samples, onError: this.options.onError, gen: this.current.gen, bundle: this.current.bundle, failPrepare: this.options.failPrepareIn?.includes(w),
      slowPrepareMs: this.options.slowPrepare?.worker === w ? this.options.slowPrepare.ms : undefined,
      stallPrepareMs: this.options.stallPrepare?.worker === w ? this.options.stallPrepare.ms : undefined,
      nice: this.options.nice,
      cpus: this.options.cpus === undefined ? undefined : [this.options.cpus[w % this.options.cpus.length]!],
    };
    if (this.current.bundle.table !== null) this.table = { id: this.current.bundle.tableId, parts: this.current.bundle.table };
    const t = new Worker(this.script, { name: `moat-packet-${w}`, workerData: data });
    slot.thread = t;
    slot.ready = false;
    return new Promise<void>((resolve, reject) => {
      this.startWaiters.set(w, { resolve, reject });
      t.on('message', (m: FromWorker) => this.onMessage(w, t, m));
      t.on('error', (err) => this.options.log.error({ code: ERRORS.PACKET_WORKER_FAILED.code, worker: w }, `packet worker ${w} threw ${err.message}`));
      t.on('exit', (code) => this.died(w, t, `it exited with code ${code}`));
    });
  }

  private onMessage(w: number, t: Worker, m: FromWorker): void {
    const slot = this.slots[w]!;
    if (slot.thread !== t) return;
    if (m.type === 'drop' || m.type === 'bad-checksum' || m.type === 'link' || m.type === 'hits' || m.type === 'packet-error') {
      this.options.onEvent?.(w, m);
    } else if (m.type === 'ready') {
      slot.ready = true;
      slot.table = { shared: m.tableShared, bytes: m.tableBytes };
      slot.priority = m.priority;
      // Said once (by worker 0, and again by a restarted one): every worker asks the same and gets the same answer.
      if (m.priority.refused !== undefined && (w === 0 || slot.restarts > 0)) {
        this.options.log.warn({ worker: w, asked: m.priority.asked, nice: m.priority.nice }, `packet workers: nice ${m.priority.asked} ${m.priority.refused}; they run at ${m.priority.nice}, and the daemon's update work can delay their batches`);
      }
      if (m.cpus?.refused !== undefined) {
        this.options.log.warn({ worker: w, cpus: m.cpus.cpus }, `packet worker ${w}: not pinned as capture.cpus asks: ${m.cpus.refused}; it runs on CPUs ${cpuList(m.cpus.cpus)}`);
      }
      this.startWaiters.get(w)?.resolve();
      this.startWaiters.delete(w);
    } else if (m.type === 'failed') {
      const err = loadErrorOf(m.error);
      const waiter = this.startWaiters.get(w);
      this.startWaiters.delete(w);
      if (waiter !== undefined) waiter.reject(new MoatError('PACKET_WORKER_FAILED', `packet worker ${w} could not start: ${err.message}`, { cause: err }));
    } else if (m.type === 'prepared') {
      const s = this.swapping;
      if (s === undefined || s.gen !== m.gen) return;
      if (!m.ok) {
        this.finishSwap({ ok: false, gen: m.gen, error: loadErrorOf(m.error), worker: w });
        return;
      }
      s.costs[w] = m.cost;
      s.at[w] = BigInt(m.at);
      s.waiting.delete(w);
      if (s.waiting.size === 0) this.finishSwap({ ok: true, gen: m.gen, costs: s.costs, preparedAt: s.at });
    }
  }

  // A worker that died: its ports' totals are kept, a swap under way is rejected, and a new thread starts with the bundle in force.
  private died(w: number, t: Worker, why: string): void {
    const slot = this.slots[w]!;
    if (slot.thread !== t) return;
    slot.thread = undefined;
    slot.ready = false;
    const waiter = this.startWaiters.get(w);
    this.startWaiters.delete(w);
    if (this.stopping) return;
    if (waiter !== undefined) {
      waiter.reject(new MoatError('PACKET_WORKER_FAILED', `packet worker ${w} stopped while starting (${why})`));
      return;
    }
    const totals = new Float64Array(slot.counters);
    const n = this.specs[w]!.length;
    for (let p = 0; p < n; p++) {
      const at = W_HEADER + p * PORT_SLOTS + COUNTER_SLOTS;
      for (const k of [S_PACKETS, S_BYTES, S_RING_DROPS, S_FREEZES, S_TRUNCATED, S_BATCHES, S_SENT, S_SEND_ERRORS]) {
        slot.base[p * PORT_SLOTS + COUNTER_SLOTS + k]! += totals[at + k]!;
        totals[at + k] = 0;
      }
    }
    slot.restarts++;
    this.options.log.error({ code: ERRORS.PACKET_WORKER_FAILED.code, worker: w, restarts: slot.restarts }, `packet worker ${w} stopped (${why}); a new one starts with the bundle in force, the other workers go on`);
    if (this.swapping !== undefined) this.finishSwap({ ok: false, gen: this.swapping.gen, error: new MoatError('PACKET_WORKER_FAILED', `packet worker ${w} stopped during the swap (${why})`), worker: w });
    this.spawn(w).catch((err: Error) => this.options.log.error({ code: ERRORS.PACKET_WORKER_FAILED.code, worker: w }, `packet worker ${w} could not be restarted: ${err.message}`));
  }
}
