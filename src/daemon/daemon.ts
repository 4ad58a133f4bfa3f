// The daemon: capture on the configured interfaces, judge frames with the
// packet path (inline: those arriving from outside, and from inside too with
// judge "both"; monitor: every frame), forward what passes (inline mode; the
// inside's unjudged frames as they are), and swap in a new ruleset
// bundle between two packets when its bundle source tells of one (files: on a
// change or SIGHUP). A bundle that fails to compile is rejected and logged; the
// running one stays.

import { createServer, type Server } from 'node:http';
import type { Logger } from 'pino';
import { cpuList, ringEngineAvailable, setProcessCpus, type FrameSource, type SourceStats } from '../capture/index.js';
import { loadDaemonConfig, type DaemonConfig } from '../config/index.js';
import { BundleError, BundleLoader, FrameInspector, PacketPath, PathCounters, type CompiledRule, type Evaluator, type LoadedBundle, type TransferredBundle } from '../engine/index.js';
import { ERRORS, MoatError, type ErrorName } from '../errors/index.js';
import { bundleSourceFor, type BundleLoading, type BundleSource, type ReloadOutcome } from './bundle-source.js';
import { capturePlan, liveCaptureHost, type CaptureHost, type CapturePlan } from './capture-plan.js';
import { DropRecorder } from './drop-recorder.js';
import type { FromWorker, OpenerRef, PortSpec } from './packet-worker-layout.js';
import { PacketWorkers, ringPortOpener, type PortTotals } from './packet-workers.js';
import { loaderWorkerAvailable, WorkerLoading } from './worker-loading.js';
import { daemonMetrics } from './metrics.js';

/** A coded error of a failed reload, for its outcome (code 7099 for what has no code: a bug). */
function errorOf(err: unknown): { code: number; message: string } {
  if (err instanceof MoatError) return { code: err.code, message: err.message };
  return { code: ERRORS.API_INTERNAL.code, message: err instanceof Error ? err.message : String(err) };
}

/** Opens a live source on an interface. */
export type SourceOpener = (iface: string, options: { ringBytes: number; filter: string }) => FrameSource;

/** One capture interface and what the daemon keeps about it. */
export interface Port {
  readonly name: string;
  readonly source: FrameSource;
  /** Totals across bundle swaps. */
  readonly counters: PathCounters;
  /** The packet path of the running bundle; replaced whole on a swap. Null with the ring engine (the paths are the packet workers'). */
  path: PacketPath | null;
  /** The port frames that pass are sent out of (inline mode). */
  peer: Port | null;
  /** Inline: the side of the bridge the port faces (frames arriving on it come from there); monitor: 'mirror'. */
  side: 'outside' | 'inside' | 'mirror';
  /** Whether network_transit judges the frames arriving on this port (inline: outside, and inside with judge "both"). */
  judged: boolean;
  /** Frames (and bytes) forwarded without judging: arrived on an unjudged port. */
  passedUnjudged: number;
  passedUnjudgedBytes: number;
  /** Forwarded frames until the next checksum sample (config.checksumSample). */
  checksumCountdown: number;
  /** Forwarded frames whose TCP/UDP checksum was verified, and those found bad. */
  checksumSampled: number;
  badChecksums: number;
}

/** Settings a running daemon cannot take from a reload: its captures, ports and listener are built from them. */
export const RESTART_ONLY = ['mode', 'interfaces', 'judge', 'capture', 'metrics', 'dropCapture', 'controlPlane', 'failOpen'] as const satisfies ReadonlyArray<keyof DaemonConfig>;

/** Longest slice of a bundle's warm-up between two turns of the event loop (see Daemon.warmedPaths). */
const WARM_SLICE_MS = 1;

/** Most drop samples a packet worker copies to the main thread per second, for the drop log alone, and with a drop capture. */
export const DROP_SAMPLES_PER_WORKER = { log: 100, capture: 1000 } as const;

/** Ring engine: frames, drops and link state of a port, summed over the packet workers; and each worker's frames. */
export interface RingStats {
  readonly ports: readonly PortTotals[];
  readonly workers: ReadonlyArray<{ readonly frames: number; readonly restarts: number }>;
}

/** A port of the ring engine as the main thread sees it: counters only (the packet workers read and send). */
class WorkerPortView implements FrameSource {
  readonly linkType = 1; // AF_PACKET delivers Ethernet frames
  totals: PortTotals | undefined;
  constructor(readonly iface: string) {}
  onPacket(): void {}
  send(): boolean {
    return false;
  }
  stop(): void {}
  get stats(): SourceStats {
    const t = this.totals;
    return { packets: t?.packets ?? 0, bytes: t?.bytes ?? 0, sent: t?.sent ?? 0, sendErrors: t?.sendErrors ?? 0, lastSendError: undefined };
  }
}

/** What the daemon is doing. */
export type DaemonState = 'starting' | 'running' | 'stopping' | 'stopped';

export class Daemon {
  state: DaemonState = 'starting';
  ports: Port[] = [];
  evaluator: Evaluator | undefined;
  version = '';
  swaps = 0;
  /** What the last reload's swap cost the packet loop (ms): building the ports' paths, and the warm-up's slices (bench/swap.bench.ts). */
  lastSwap = { pathsMs: 0, warmUpSlices: 0, longestSliceMs: 0 };
  reloadFailures = 0;
  packetErrors = 0;
  /**
   * No bundle yet (a control plane not reached, nothing cached): frames are
   * not judged; inline forwards them only with failOpen. Cleared by the first swap.
   */
  awaitingBundle = false;
  /** Frames seen while awaitingBundle. */
  unjudged = 0;
  readonly startedAt = Date.now();
  private server: Server | undefined;
  private recorder: DropRecorder | undefined;
  private dropLogWindow = 0;
  private dropLogCount = 0;
  private badChecksumLoggedAt = -Infinity;
  private readonly signalHandlers: Array<[NodeJS.Signals, () => void]> = [];
  /**
   * How bundles load (see DaemonOptions.loader): through a worker thread, or
   * on the event loop by a BundleLoader, which keeps the address table across
   * reloads that leave lists and databases unchanged (the worker keeps its own).
   */
  readonly loading: BundleLoading;
  /** The reload running, and the one told of meanwhile (changes told while one runs coalesce into it). */
  private reloading: Promise<ReloadOutcome> | undefined;
  private queuedReload: Promise<ReloadOutcome> | undefined;
  /** Decodes a dropped packet for its log line (the packet path decodes only what the rules read). */
  private readonly inspector = new FrameInspector();
  /** The capture engine and workers this daemon runs (set by start). */
  plan: CapturePlan | undefined;
  /** Ring engine: the packet workers, the rules of each generation they judged with (for drop lines and rule hits), each worker's last rule hits. */
  private workers: PacketWorkers | undefined;
  private readonly genRules = new Map<number, readonly CompiledRule[]>();
  private readonly workerHits = new Map<number, { gen: number; hits: Float64Array }>();
  /** Ring engine: per port, the workers whose port's link is down. */
  private readonly linkDown = new Map<number, Set<number>>();

  /**
   * `bundles`: where bundles come from; by default the source the configuration names (bundleSourceFor).
   * `options.configFile`: the file `config` was read from; every reload reads it again (see reload).
   * `options.override`: settings that win over the file's at every reading (the command line's --strict).
   * `options.loader`: where bundles are loaded and compiled: 'worker' (a worker
   * thread, off the packet loop), 'in-thread' (on the event loop, as `moat
   * replay` does: for comparison), or by default the worker, unless run from
   * the TypeScript sources before a build (then in thread, said in the log).
   */
  constructor(
    public config: DaemonConfig,
    private readonly log: Logger,
    private readonly openSource: SourceOpener,
    bundles?: BundleSource,
    private readonly options: {
      configFile?: string | undefined;
      override?: Partial<DaemonConfig> | undefined;
      loader?: 'worker' | 'in-thread' | undefined;
      /**
       * Lets the daemon run the ring engine (capture.engine, packet workers) as
       * `moat daemon` does; without it every port is opened with `openSource`
       * whatever the configuration says (tests and benchmarks with in-memory sources).
       * `host`: what the host offers (capture-plan.ts); `opener`: the workers' port opener (default openRingPort).
       */
      ring?: { host?: CaptureHost | undefined; opener?: OpenerRef | undefined } | undefined;
    } = {},
  ) {
    this.bundles = bundles ?? bundleSourceFor(config, options.configFile);
    const kind = options.loader ?? (loaderWorkerAvailable() ? 'worker' : 'in-thread');
    if (options.loader === undefined && kind === 'in-thread') log.warn('bundles load on the event loop: the loader worker is not built (running from the TypeScript sources; npm run build)');
    if (kind === 'worker') {
      const loading = new WorkerLoading(log);
      loading.nice = config.capture.priority.background;
      this.loading = loading;
    }
    else {
      const loader = new BundleLoader();
      this.loading = { load: (files) => new Promise((resolve) => resolve(loader.load(files))) };
    }
  }

  /** Where bundles come from. */
  readonly bundles: BundleSource;

  /** Loads the bundle, opens the captures, starts metrics and the bundle source. Throws on a bad start. */
  async start(): Promise<void> {
    const c = this.config;
    const plan = this.options.ring === undefined ? { engine: 'libpcap' as const, workers: 0, notes: [], warnings: [] } : capturePlan(c, this.options.ring.host ?? liveCaptureHost(ringEngineAvailable), this.options.configFile);
    this.plan = plan;
    for (const w of plan.warnings) this.log.warn({ engine: plan.engine }, w);
    if (plan.notes.length > 0) this.log.info({ engine: plan.engine, workers: plan.workers }, plan.notes.join('; '));
    // The configuration lists the outside port first (see DaemonConfig.interfaces).
    const sideOf = (i: number): Port['side'] => (c.mode === 'monitor' ? 'mirror' : i === 0 ? 'outside' : 'inside');
    const portOf = (source: FrameSource, i: number, path: PacketPath | null, counters: PathCounters): Port => {
      const side = sideOf(i);
      return { name: source.iface, source, counters, path, peer: null, side, judged: side !== 'inside' || c.judge === 'both', passedUnjudged: 0, passedUnjudgedBytes: 0, checksumCountdown: this.sampleEvery(), checksumSampled: 0, badChecksums: 0 };
    };
    let bundle: LoadedBundle | TransferredBundle;
    if (plan.engine === 'ring') {
      // Pinned first, so that the loader, intake and packet workers start from the background CPUs (threads inherit their starter's).
      if (c.capture.cpus !== undefined) this.pinThreads(c.capture.cpus);
      bundle = await this.loadRing(); // throws: a daemon does not start without a valid bundle
      this.ports = c.interfaces.map((name, i) => portOf(new WorkerPortView(name), i, null, new PathCounters()));
      await this.startWorkers(bundle, plan.workers);
    } else {
      const loaded = await this.load(); // throws: a daemon does not start without a valid bundle
      bundle = loaded;
      // The libpcap engine's packet loop is the main thread, which is not raised: it is also where the update's
      // work is coordinated, and raised it measured worse (bench channel, MOAT_BENCH_CHANNEL_PRIORITY=on vs
      // background: its longest pause in a list change 672 vs 50 ms, the daemon's part of the change 6.5 vs 1.2 s).
      const sources = c.interfaces.map((name) => this.openSource(name, { ringBytes: c.capture.ringBytes, filter: c.capture.filter }));
      this.ports = sources.map((source, i) => {
        const counters = new PathCounters();
        return portOf(source, i, this.pathFor(loaded, counters, false), counters);
      });
    }
    if (c.mode === 'inline') {
      this.ports[0]!.peer = this.ports[1]!;
      this.ports[1]!.peer = this.ports[0]!;
      const [outside, inside] = this.ports as [Port, Port];
      this.log.info(
        { outside: outside.name, inside: inside.name, judge: c.judge },
        c.judge === 'both'
          ? `judging frames in both directions: arriving on ${outside.name} (outside) and on ${inside.name} (inside)`
          : `judging frames arriving on ${outside.name} (outside); frames from ${inside.name} (inside) are forwarded unjudged (judge: "both" judges them too)`,
      );
    } else {
      this.log.info({ interfaces: c.interfaces }, 'monitor: judging every frame seen, in both directions (a mirror port does not say which side a frame came from)');
    }
    if (c.dropCapture !== undefined) {
      this.recorder = new DropRecorder({ ...c.dropCapture, linkType: this.ports[0]!.source.linkType });
    }
    this.swapIn(bundle, 'start');
    this.awaitingBundle = this.bundles.status?.().bundle === 'none';
    // Ring engine: the workers were started holding (see startWorkers).
    if (this.awaitingBundle) {
      const what = c.mode === 'monitor' ? 'judging nothing' : c.failOpen ? 'forwarding everything unjudged (failOpen)' : 'forwarding nothing (failOpen is false)';
      this.log.warn({ mode: c.mode, failOpen: c.failOpen }, `no bundle yet (none cached): ${what} until the control plane sends one`);
    }
    if (this.workers === undefined) for (const port of this.ports) port.source.onPacket(this.handler(port));
    if (c.metrics.enabled) await this.listen();
    this.bundles.start((reason) => this.reload(reason), this.log, { counters: () => this.totals() });
    this.state = 'running';
    this.log.info({ mode: c.mode, engine: plan.engine, ...(plan.engine === 'ring' ? { workers: plan.workers } : {}), interfaces: c.interfaces, ...(c.mode === 'inline' ? { outside: c.interfaces[0], inside: c.interfaces[1], judge: c.judge } : {}), version: this.version, bundles: this.bundles.name, metrics: c.metrics.enabled ? c.metrics.listen : null }, 'daemon running');
  }

  /** Installs SIGTERM/SIGINT handlers that stop the daemon and end the process. */
  handleTermination(exit: (code: number) => void = (code) => process.exit(code)): void {
    const stop = (sig: string) => {
      this.log.info({ signal: sig }, 'stopping');
      void this.stop().then(() => exit(0));
    };
    this.onSignal('SIGTERM', () => stop('SIGTERM'));
    this.onSignal('SIGINT', () => stop('SIGINT'));
  }

  private onSignal(sig: NodeJS.Signals, fn: () => void): void {
    process.on(sig, fn);
    this.signalHandlers.push([sig, fn]);
  }

  // The per-frame handler of a port: judge, record, forward. It never throws:
  // an exception on one packet is counted and handled per `onError`.
  private handler(port: Port): (frame: Buffer, length: number) => void {
    const linkType = port.source.linkType;
    return (frame, length) => {
      if (this.awaitingBundle) {
        this.unjudged++;
        if (port.peer !== null && this.config.failOpen) port.peer.source.send(frame, length);
        return;
      }
      if (!port.judged) {
        // Inline, from inside (judge "inbound"): forwarded as is; peer is set on every inline port.
        port.passedUnjudged++;
        port.passedUnjudgedBytes += length;
        if (--port.checksumCountdown <= 0) this.sampleChecksum(port, frame, length);
        port.peer!.source.send(frame, length);
        return;
      }
      let drop: boolean;
      try {
        drop = port.path!.process(frame, 0, length, length, linkType);
      } catch (err) {
        this.packetErrors++;
        if (this.packetErrors <= 10 || this.packetErrors % 10000 === 0) {
          this.log.error({ err, interface: port.name, count: this.packetErrors }, 'packet evaluation failed');
        }
        drop = this.config.onError === 'drop';
      }
      if (drop) {
        if (this.recorder !== undefined) this.recordDrop(frame, length);
        if (this.config.log.drops) {
          const p = port.path!;
          this.logDrop(port, frame, length, p.lastRule >= 0 ? p.evaluator.rules[p.lastRule] : undefined, p.lastRule);
        }
      } else if (port.peer !== null) {
        if (--port.checksumCountdown <= 0) this.sampleChecksum(port, frame, length);
        port.peer.source.send(frame, length);
      }
    };
  }

  private sampleEvery(): number {
    return this.config.checksumSample > 0 ? this.config.checksumSample : Infinity;
  }

  // One forwarded frame in checksumSample: a bad TCP/UDP checksum is counted,
  // and said at most once a minute (what it usually means: see README, offloads).
  private sampleChecksum(port: Port, frame: Buffer, length: number): void {
    port.checksumCountdown = this.sampleEvery();
    const ok = this.inspector.checksumOk(frame, length, port.source.linkType);
    if (ok === undefined) {
      port.checksumCountdown = 1; // not verifiable (not TCP/UDP, a fragment): sample the next frame instead
      return;
    }
    port.checksumSampled++;
    if (ok) return;
    port.badChecksums++;
    const now = Date.now();
    if (now - this.badChecksumLoggedAt >= 60_000) {
      this.badChecksumLoggedAt = now;
      const pkt = this.inspector.describe(frame, length, port.source.linkType);
      this.log.warn(
        { interface: port.name, direction: `${port.name} -> ${port.peer!.name}`, ...(pkt ?? {}), sampled: port.checksumSampled, bad: port.badChecksums },
        `forwarded a frame with a bad ${pkt?.protocol ?? 'TCP/UDP'} checksum (sampled 1 in ${this.config.checksumSample}): an end host with transmit checksum offload on a veth (ethtool -K IF tx off on it), or damage on the wire; the receiver drops such frames`,
      );
    }
  }

  private recordDrop(frame: Uint8Array, length: number): void {
    try {
      this.recorder!.write(frame, length, BigInt(Date.now()) * 1_000_000n);
    } catch (err) {
      this.log.error({ err }, 'cannot write the drop capture; recording stopped');
      this.recorder = undefined;
    }
  }

  // A line per dropped packet (at most 100 a second): the packet (addresses,
  // protocol, ports, the interface it came in on and, inline, the one it was
  // not sent out of) and the rule. In monitor mode nothing is dropped: "would drop".
  private logDrop(port: Port, frame: Uint8Array, length: number, rule: CompiledRule | undefined, lastRule: number, worker?: number): void {
    const now = Math.floor(Date.now() / 1000);
    if (now !== this.dropLogWindow) {
      this.dropLogWindow = now;
      this.dropLogCount = 0;
    }
    if (++this.dropLogCount > 100) return;
    const ruleId = rule === undefined ? null : (rule.rule.id ?? `${rule.level}#${rule.index}`);
    const description = rule?.rule.description?.trim() || undefined;
    const pkt = this.inspector.describe(frame, length, port.source.linkType);
    const verb = this.config.mode === 'monitor' ? 'would drop' : 'dropped';
    const where = (addr: string, port?: number) => (port === undefined ? addr : addr.includes(':') ? `[${addr}]:${port}` : `${addr}:${port}`);
    const what = pkt === undefined ? 'a frame' : `${pkt.protocol} ${where(pkt.src, pkt.srcPort)} -> ${where(pkt.dst, pkt.dstPort)}`;
    const why = rule === undefined ? (lastRule === -1 ? 'by policy (undecodable or evaluation error)' : '') : `by rule ${ruleId}${description === undefined ? '' : ` "${description}"`}`;
    this.log.info(
      {
        action: verb === 'dropped' ? 'drop' : 'would_drop',
        interface: port.name,
        ...(port.peer === null ? {} : { direction: `${port.name} -> ${port.peer.name}`, from: port.side }),
        ...(pkt ?? {}),
        rule: ruleId,
        ruleset: rule?.level ?? null,
        ...(description === undefined ? {} : { description }),
        ...(worker === undefined ? {} : { worker }),
      },
      `${verb} ${what} on ${port.name} ${why}`.trimEnd(),
    );
  }

  private pathFor(bundle: LoadedBundle, counters: PathCounters, warm: boolean, c: DaemonConfig = this.config): PacketPath {
    const path = new PacketPath(bundle.evaluator, { table: bundle.table, colo: c.colo, undecodable: c.undecodable, counters });
    // Before the swap: a bundle's code that meets traffic unwarmed deoptimises on each rule's first match (see PacketPath.warmUp).
    if (warm) path.warmUp();
    return path;
  }

  /**
   * The ports' paths for a bundle about to be swapped in, warmed up in slices
   * of WARM_SLICE_MS between which the event loop handles packets: the
   * warm-up of the benchmark's 50-rule bundle (400 frames through code not
   * yet optimised) takes several milliseconds, which in one go would stall
   * the packet loop (bench/swap.bench.ts).
   */
  private async warmedPaths(bundle: LoadedBundle, config: DaemonConfig): Promise<PacketPath[]> {
    const t0 = performance.now();
    const paths = this.ports.map((port) => this.pathFor(bundle, port.counters, false, config));
    const swap = { pathsMs: performance.now() - t0, warmUpSlices: 0, longestSliceMs: 0 };
    const frames = bundle.evaluator.warmUpFrames.length;
    for (let i = 0; paths.length > 0; ) {
      const t = performance.now();
      i = paths[0]!.warmUpSlice(i, WARM_SLICE_MS);
      swap.warmUpSlices++;
      swap.longestSliceMs = Math.max(swap.longestSliceMs, performance.now() - t);
      if (i >= frames) break;
      await new Promise((resolve) => setImmediate(resolve));
    }
    this.lastSwap = swap;
    return paths;
  }

  private load(): Promise<LoadedBundle> {
    return this.bundles.load(this.loading);
  }

  /**
   * Ring engine: the source's bundle as the loader worker sent it (its table
   * not made here: the packet workers share it). The sources read a loaded
   * bundle's digest only (the channel keeps what it loaded by digest), so
   * they are given the transferred bundle's digest, rulesets and flags.
   */
  private async loadRing(): Promise<TransferredBundle> {
    if (!(this.loading instanceof WorkerLoading)) throw new MoatError('PACKET_WORKER_FAILED', 'the ring engine loads bundles in the loader worker, which is not built (running from the TypeScript sources: npm run build)');
    const loading = this.loading;
    let got: TransferredBundle | undefined;
    await this.bundles.load({
      load: async (files) => {
        got = await loading.loadTransferred(files);
        return { digest: got.digest, rulesets: got.rulesets, tableReused: got.tableReused, missing: [] } as unknown as LoadedBundle;
      },
    });
    return got!;
  }

  /**
   * capture.cpus (the CPUs were checked by capturePlan: 5012 for one this
   * process may not use): pins every thread the process has to the
   * background CPUs; the packet workers pin themselves (packet-worker.ts).
   */
  private pinThreads(cpus: NonNullable<DaemonConfig['capture']['cpus']>): void {
    const packet = `packet workers on CPU${cpus.packet.length === 1 ? '' : 's'} ${cpuList(cpus.packet)}`;
    if (cpus.background === undefined) {
      this.log.info({ cpus }, `capture.cpus: ${packet}; the daemon's other threads where the kernel puts them (give capture.cpus.background to keep them off the packet CPUs)`);
      return;
    }
    const r = setProcessCpus(cpus.background);
    if (r.refused !== undefined) throw new MoatError('DAEMON_PRECHECK', `capture.cpus.background: the daemon's threads could not be pinned: ${r.refused}`, { pointer: '/capture/cpus/background' });
    this.log.info({ cpus, threads: r.threads }, `capture.cpus: ${packet}; the daemon's other ${r.threads} threads (and those it starts) on CPU${cpus.background.length === 1 ? '' : 's'} ${cpuList(cpus.background)}`);
  }

  /**
   * Ring engine: N packet workers, each opening every port in the same order,
   * port i joining PACKET_FANOUT_HASH group (pid-derived base + i): the kernel
   * hashes a flow's addresses and ports symmetrically (skb flow dissector,
   * sorted before hashing), so both directions of a flow land on the same
   * index in each port's group, the same worker. Inline: ports peered, the
   * inside port judged only with judge "both"; monitor: judge only.
   */
  private async startWorkers(bundle: TransferredBundle, n: number): Promise<void> {
    const c = this.config;
    // Fanout ids are per network namespace, 16 bits: distinct per daemon (pid) and port.
    const base = (process.pid * 8) & 0xffff;
    const specs: PortSpec[] = this.ports.map((port, i) => ({
      iface: port.name,
      judge: port.judged,
      peer: c.mode === 'inline' ? 1 - i : null,
      options: { ringBytes: Math.max(1 << 20, Math.floor(c.capture.ringBytes / n)), slotBytes: c.capture.slotBytes, batchMax: c.capture.batchMax, fanoutGroup: (base + i) & 0xffff },
    }));
    const awaiting = this.bundles.status?.().bundle === 'none';
    this.keepRules(1, bundle.rules);
    this.workers = await PacketWorkers.start({
      workers: n,
      ports: specs,
      opener: this.options.ring?.opener ?? ringPortOpener(),
      bundle,
      paths: { colo: c.colo, undecodable: c.undecodable },
      onError: c.onError,
      samples: { drops: c.dropCapture === undefined ? DROP_SAMPLES_PER_WORKER.log : DROP_SAMPLES_PER_WORKER.capture, checksumEvery: c.mode === 'inline' ? c.checksumSample : 0 },
      onEvent: (w, m) => this.onWorkerEvent(w, m),
      hold: awaiting ? (c.mode === 'inline' && c.failOpen ? 'pass' : 'drop') : undefined,
      log: this.log,
      nice: c.capture.priority.packet,
      cpus: c.capture.cpus?.packet,
    });
  }

  private keepRules(gen: number, rules: readonly CompiledRule[]): void {
    this.genRules.set(gen, rules);
    // A drop sample names the generation it was judged by: the last few are enough.
    for (const g of this.genRules.keys()) if (g < gen - 4) this.genRules.delete(g);
  }

  // What a packet worker reports besides its counters.
  private onWorkerEvent(w: number, m: Extract<FromWorker, { type: 'drop' | 'bad-checksum' | 'link' | 'hits' | 'packet-error' }>): void {
    if (m.type === 'hits') {
      this.workerHits.set(w, { gen: m.gen, hits: m.hits });
      return;
    }
    if (m.type === 'link') {
      this.onLink(w, m.port, m.state, m.reason);
      return;
    }
    if (m.type === 'packet-error') {
      this.log.error({ err: { message: m.message }, interface: this.ports[m.port]?.name, worker: w, count: m.count }, 'packet evaluation failed');
      return;
    }
    const port = this.ports[m.port];
    if (port === undefined) return;
    const frame = Buffer.from(m.frame.buffer, m.frame.byteOffset, m.frame.byteLength);
    if (m.type === 'drop') {
      if (this.recorder !== undefined) this.recordDrop(frame, frame.length);
      if (this.config.log.drops) this.logDrop(port, frame, frame.length, m.rule >= 0 ? this.genRules.get(m.gen)?.[m.rule] : undefined, m.rule, w);
    } else if (m.type === 'bad-checksum') {
      const now = Date.now();
      if (now - this.badChecksumLoggedAt < 60_000) return;
      this.badChecksumLoggedAt = now;
      this.refresh();
      const pkt = this.inspector.describe(frame, frame.length, port.source.linkType);
      this.log.warn(
        { interface: port.name, direction: `${port.name} -> ${port.peer?.name ?? '-'}`, ...(pkt ?? {}), sampled: port.checksumSampled, bad: port.badChecksums, worker: w },
        `forwarded a frame with a bad ${pkt?.protocol ?? 'TCP/UDP'} checksum (sampled 1 in ${this.config.checksumSample}): an end host with transmit checksum offload on a veth (ethtool -K IF tx off on it), or damage on the wire; the receiver drops such frames`,
      );
    }
  }

  // A link change as one worker's port saw it, said once per port (every worker's port on it sees it).
  private onLink(w: number, p: number, state: 'up' | 'down', reason: string): void {
    const port = this.ports[p];
    if (port === undefined) return;
    const down = this.linkDown.get(p) ?? new Set<number>();
    this.linkDown.set(p, down);
    const was = down.size > 0;
    if (state === 'down') down.add(w);
    else down.delete(w);
    if (!was && down.size > 0) this.log.warn({ interface: port.name, reason }, `link down on ${port.name} (${reason}): nothing is read or forwarded there; the daemon keeps running and resumes when the link returns`);
    else if (was && down.size === 0) this.log.info({ interface: port.name }, `link up on ${port.name}: reading and forwarding again`);
  }

  /** Ring engine: reads the packet workers' shared counters into the ports (what /metrics, /health and the heartbeats report). */
  private refresh(): void {
    if (this.workers === undefined) return;
    const c = this.workers.counters();
    this.unjudged = c.workers.reduce((a, w) => a + w.held, 0);
    this.packetErrors = c.workers.reduce((a, w) => a + w.packetErrors, 0);
    this.ports.forEach((port, i) => {
      const t = c.ports[i]!;
      port.counters.v.set(t.path.v);
      (port.source as WorkerPortView).totals = t.stats;
      port.passedUnjudged = t.stats.unjudged;
      // An unjudged port's frames are all passed unjudged: its captured bytes (the workers count frames only).
      port.passedUnjudgedBytes = port.judged ? 0 : t.stats.bytes;
      port.checksumSampled = t.stats.checksumSampled;
      port.badChecksums = t.stats.badChecksums;
    });
  }

  /** Ring engine: per port ring drops, truncated frames and link state, and each worker's frames (undefined with libpcap). */
  ringStats(): RingStats | undefined {
    if (this.workers === undefined) return undefined;
    const c = this.workers.counters();
    return { ports: c.ports.map((p) => p.stats), workers: c.workers.map((w) => ({ frames: w.frames, restarts: w.restarts })) };
  }

  /** Ring engine: the packet workers (their counters, for diagnostics and benchmarks); undefined with libpcap. */
  get packetWorkers(): PacketWorkers | undefined {
    return this.workers;
  }

  /** Hits per rule of the running bundle: its evaluator's, or summed over the packet workers (which report them every 100 ms). */
  ruleHits(): Array<{ rule: CompiledRule; packets: number; bytes: number }> {
    const ev = this.evaluator;
    if (this.workers === undefined) return ev === undefined ? [] : ev.rules.map((rule, i) => ({ rule, packets: ev.hitPackets[i]!, bytes: ev.hitBytes[i]! }));
    const gen = this.workers.generation;
    const rules = this.genRules.get(gen) ?? [];
    const out = rules.map((rule) => ({ rule, packets: 0, bytes: 0 }));
    for (const h of this.workerHits.values()) {
      if (h.gen !== gen) continue;
      for (let i = 0; i < out.length; i++) {
        out[i]!.packets += h.hits[i] ?? 0;
        out[i]!.bytes += h.hits[rules.length + i] ?? 0;
      }
    }
    return out;
  }

  // The version: the rulesets' own version fields and the digest of every input file.
  private versionOf(bundle: LoadedBundle | TransferredBundle): string {
    const versions = bundle.rulesets.map((r) => r.version ?? '-').join('/');
    return `${versions}@${bundle.digest.slice(0, 12)}`;
  }

  // Swapping is assigning each port's path: the event loop runs packet
  // callbacks one at a time, so a packet sees the old path or the new, never a mix.
  // One warm-up serves every port: the type feedback it gives belongs to the
  // bundle's generated code and to PacketPath's methods, which all ports share.
  // `paths`: the ports' paths, built and warmed up already (see warmedPaths).
  // With the ring engine (a TransferredBundle) the packet workers hold the paths and have swapped already: only what the main thread says and counts changes here.
  private swapIn(bundle: LoadedBundle | TransferredBundle, reason: string, paths?: PacketPath[]): void {
    if ('evaluator' in bundle) {
      const ps = paths ?? this.ports.map((port, i) => this.pathFor(bundle, port.counters, i === 0));
      this.ports.forEach((port, i) => (port.path = ps[i]!));
      this.evaluator = bundle.evaluator;
    }
    this.version = this.versionOf(bundle);
    // At start and at every reload: a rule that reads data not given never matches as written.
    for (const e of bundle.missing) this.log.warn({ code: e instanceof MoatError ? e.code : ERRORS[e.name as ErrorName].code, reason }, e.message);
    if (reason !== 'start') {
      if (this.awaitingBundle) {
        this.awaitingBundle = false;
        this.workers?.hold(null);
        this.log.info({ version: this.version, unjudged: this.unjudged }, 'first bundle: judging traffic from now on');
      }
      this.swaps++;
      const rules = 'evaluator' in bundle ? bundle.evaluator.rules.length : bundle.rules.length;
      this.log.info({ version: this.version, reason, rules, listsAndGeoIp: bundle.tableReused ? 'unchanged' : 'reloaded' }, 'ruleset swapped');
    }
  }

  /**
   * Loads the source's bundle again and swaps it in; on failure keeps the
   * running bundle. One reload runs at a time: asked while one runs, it runs
   * once after it, for every reason told meanwhile (it loads what the source
   * has then, the latest). Resolves with what it did; never rejects.
   */
  reload(reason: string): Promise<ReloadOutcome> {
    if (this.queuedReload !== undefined) return this.queuedReload;
    if (this.reloading === undefined) return this.runReload(reason);
    const queued = this.reloading.then(() => {
      this.queuedReload = undefined;
      return this.runReload(reason);
    });
    this.queuedReload = queued;
    return queued;
  }

  private runReload(reason: string): Promise<ReloadOutcome> {
    const running = this.reloadOnce(reason).finally(() => {
      if (this.reloading === running) this.reloading = undefined;
    });
    this.reloading = running;
    return running;
  }

  /**
   * One reload.
   * With a configuration file, reads it again first, whole: what can change
   * while running (rules, lists, GeoIP, colo, logs, onError, undecodable,
   * missingData, watch) applies with the new bundle; what needs a restart
   * (RESTART_ONLY) is refused with a log line (code 5013) and the rest applies.
   * A file that does not validate, or whose bundle does not load, changes nothing.
   */
  private async reloadOnce(reason: string): Promise<ReloadOutcome> {
    if (this.state !== 'running') return { applied: false, errors: [{ code: ERRORS.CONFIG_INVALID.code, message: `the daemon is ${this.state}` }] };
    let next = this.config;
    const previous = this.config;
    try {
      if (this.options.configFile !== undefined) next = this.reread(this.options.configFile);
      if (next !== previous) this.bundles.reconfigure?.(next);
    } catch (err) {
      this.reloadFailures++;
      this.log.error({ reason, err: err instanceof MoatError ? { code: err.code, message: err.message } : err, version: this.version }, 'reload rejected: the configuration file is invalid; the running configuration and ruleset stay');
      return { applied: false, errors: [errorOf(err)] };
    }
    let bundle: LoadedBundle | TransferredBundle;
    try {
      bundle = this.workers === undefined ? await this.load() : await this.loadRing();
    } catch (err) {
      if (next !== previous) this.bundles.reconfigure?.(previous);
      this.reloadFailures++;
      const errors = err instanceof BundleError ? err.errors.map((e) => ({ code: e.code, message: e.message, pointer: e.pointer })) : undefined;
      this.log.error({ reason, errors, err: err instanceof BundleError ? undefined : err instanceof MoatError ? { code: err.code, message: err.message } : err, version: this.version }, 'reload rejected; the running ruleset stays');
      return { applied: false, errors: errors ?? [errorOf(err)] };
    }
    let paths: PacketPath[] | undefined;
    if ('evaluator' in bundle) paths = await this.warmedPaths(bundle, next);
    else {
      // Ring engine: every packet worker prepares the bundle, then all flip (packet-workers.ts); one that cannot rejects it for all.
      const outcome = await this.workers!.swap(bundle);
      if (!outcome.ok) {
        if (next !== previous) this.bundles.reconfigure?.(previous);
        this.reloadFailures++;
        this.log.error({ reason, err: errorOf(outcome.error), worker: outcome.worker, version: this.version }, 'reload rejected; the running ruleset stays');
        return { applied: false, errors: [errorOf(outcome.error)] };
      }
      this.keepRules(outcome.gen, bundle.rules);
    }
    if (this.state !== 'running') return { applied: false, errors: [{ code: ERRORS.CONFIG_INVALID.code, message: `the daemon is ${this.state}` }] };
    if (next !== previous) {
      this.config = next;
      if (next.log.level !== previous.log.level) this.log.level = next.log.level;
      for (const p of this.ports) p.checksumCountdown = Math.min(p.checksumCountdown, this.sampleEvery());
    }
    this.swapIn(bundle, reason, paths);
    return { applied: true, version: this.version, digest: bundle.digest, rulesetVersions: bundle.rulesets.map((r) => r.version ?? null) };
  }

  // The configuration file read again, with the restart-only settings of the running one kept (and said).
  private reread(file: string): DaemonConfig {
    const read = loadDaemonConfig(file);
    const fresh: DaemonConfig = { ...read, ...this.options.override };
    const changed = RESTART_ONLY.filter((k) => JSON.stringify(fresh[k]) !== JSON.stringify(this.config[k]));
    if (changed.length > 0) {
      const e = new MoatError('RELOAD_NEEDS_RESTART', `${file}: ${changed.join(', ')} changed: ${changed.length === 1 ? 'it takes' : 'they take'} effect only after a restart; not applied (the rest of the configuration is)`);
      this.log.warn({ code: e.code, keys: changed }, e.message);
    }
    const kept: Record<string, unknown> = { ...fresh };
    for (const k of RESTART_ONLY) kept[k] = this.config[k];
    return Object.freeze(kept) as DaemonConfig;
  }

  private listen(): Promise<void> {
    const registry = daemonMetrics(this);
    this.server = createServer((req, res) => {
      const url = req.url ?? '/';
      if (req.method === 'GET' && url === '/metrics') {
        this.refresh();
        registry.metrics().then(
          (text) => {
            res.writeHead(200, { 'Content-Type': registry.contentType });
            res.end(text);
          },
          (err) => {
            res.writeHead(500, { 'Content-Type': 'text/plain' });
            res.end(String(err));
          },
        );
        return;
      }
      if (req.method === 'GET' && (url === '/health' || url === '/healthz')) {
        const ok = this.state === 'running';
        res.writeHead(ok ? 200 : 503, { 'Content-Type': 'application/json' });
        const cp = this.bundles.status?.();
        const ring = this.ringStats();
        // Ring engine: a port's link, up while every worker's port on it receives.
        const links = ring === undefined ? {} : { links: Object.fromEntries(this.ports.map((p, i) => [p.name, ring.ports[i]!.linkUp >= ring.workers.length ? 'up' : 'down'])) };
        res.end(JSON.stringify({ status: ok ? 'ok' : this.state, mode: this.config.mode, engine: this.plan?.engine ?? 'libpcap', ...(ring === undefined ? {} : { workers: ring.workers.length }), version: this.version, uptimeSeconds: Math.round((Date.now() - this.startedAt) / 1000), interfaces: this.ports.map((p) => p.name), ...links, ...(cp === undefined ? {} : { controlPlane: cp }) }));
        return;
      }
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      res.end('not found: /metrics and /health are served here\n');
    });
    const at = this.config.metrics.listen;
    const colon = at.lastIndexOf(':');
    const host = at.slice(0, colon).replace(/^\[|\]$/g, '');
    const port = Number(at.slice(colon + 1));
    return new Promise((resolve, reject) => {
      this.server!.once('error', (err) => reject(new MoatError('CONFIG_INVALID', `metrics.listen ${at}: ${(err as Error).message}`, { cause: err })));
      this.server!.listen(port, host, () => resolve());
    });
  }

  /** Totals since start, summed over ports: what the daemon reports with its heartbeats. */
  totals(): { passed: number; dropped: number; undecodable: number; swaps: number } {
    this.refresh();
    const t = { passed: 0, dropped: 0, undecodable: 0, swaps: this.swaps };
    for (const p of this.ports) {
      t.passed += p.counters.passed;
      t.dropped += p.counters.dropped;
      t.undecodable += p.counters.undecodable;
    }
    return t;
  }

  /** The address the metrics server listens on (after start). */
  get metricsAddress(): { host: string; port: number } | undefined {
    const a = this.server?.address();
    return a !== null && typeof a === 'object' ? { host: a.address, port: a.port } : undefined;
  }

  /** Stops capture and the bundle source, flushes the drop capture, closes the metrics server. */
  async stop(): Promise<void> {
    if (this.state === 'stopped' || this.state === 'stopping') return;
    this.state = 'stopping';
    for (const p of this.ports) p.source.stop();
    if (this.workers !== undefined) {
      await this.workers.stop();
      this.refresh();
    }
    this.bundles.stop();
    this.recorder?.close();
    for (const [sig, fn] of this.signalHandlers) process.off(sig, fn);
    if (this.server !== undefined) await new Promise<void>((r) => this.server!.close(() => r()));
    if (this.loading instanceof WorkerLoading) await this.loading.stop();
    const totals = this.ports.map((p) => ({ interface: p.name, packets: p.counters.packets, passed: p.counters.passed, dropped: p.counters.dropped, undecodable: p.counters.undecodable, passedUnjudged: p.passedUnjudged }));
    this.log.info({ totals, swaps: this.swaps, packetErrors: this.packetErrors }, 'daemon stopped');
    this.state = 'stopped';
  }
}
