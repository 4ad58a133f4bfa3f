// The ring engine (#19): batched live ports (the BatchPort contract of
// batch-port.ts) over the project's own native addon, src/capture/ring/
// moat-ring.c: an AF_PACKET socket per port with a TPACKET_V2 RX ring read in
// place, sendmmsg from the ring's slots, PACKET_FANOUT_HASH, promiscuous mode,
// PACKET_IGNORE_OUTGOING and PACKET_QDISC_BYPASS.
//
//   const a = openRingPort('ga', {}), b = openRingPort('gb', {});
//   a.onBatch((batch) => { for (let i = 0; i < batch.count; i++) batch.pass[i] = judge(batch, i); b.forward(batch); });
//
// The addon is loaded lazily, on the first open or ringEngineAvailable(), so
// importing this module needs neither the addon nor a Linux kernel. Each
// worker thread loading it gets its own instance (N-API instance data).
//
// Per batch the JS side allocates nothing: the batch object and its arrays
// are made once per port (offset/caplen/origLen/pass over memory of the native
// port, which the addon fills without typed-array lookups) and refilled.
// Measured costs behind the design (../shared/reference/inline-capture.md): a
// JS -> native call is ~14 ns, a native -> JS callback per packet 105-200 ns,
// so the port crosses once per batch of up to batchMax frames (<1 ns a frame),
// and sends with one sendmmsg per batch (1.28-1.41 us a frame vs 1.7-1.9 us for
// one sendto each). Measured on this engine (2 vCPU shared with other jobs,
// load average 10.8 on 2 cores, so read as upper bounds): a recv() taking three
// arrays as arguments cost 0.44-0.74 us (napi_get_typedarray_info ~80 ns each),
// hence arrays in native memory. Since then the addon receives and releases
// each batch itself, in its poll callback, and calls JS once a batch with the
// frame count (recv and release from JS were two more calls a batch, 85-94
// and 74-83 ns in that run); forward() of a ring port's own batch sends from
// the source port's native arrays (two unwraps, not five typed-array lookups).
// At the daemon's usual load a batch holds a few frames, so these per-batch
// costs count per frame. Yet perf record of the daemon's worker thread at
// 150k frames/s (1 worker, load ~12 on 2 cores) puts 91% of its CPU in the
// kernel under sendmmsg (packet_sendmsg, veth_xmit, and the receiver's whole
// IP/UDP input, which veth runs in the sender's softirq) and ~8% in user space
// (generated rules, V8, N-API, libuv, this addon): the gap to the kernel
// bridge is in the kernel's AF_PACKET send path, not in JavaScript. The ring's
// ingress is kernel work too, charged to whoever delivers the frame (on a
// veth, the sender): a sender of 100k 60-byte frames/s paid 1.64-1.72 us a
// frame with nothing on the peer veth and 2.60-2.69 us with a ring port there
// that only takes its batches (3 alternating rounds, load ~5.5 on 2 cores).
//
// Fanout: PACKET_FANOUT_HASH without PACKET_FANOUT_FLAG_DEFRAG. With DEFRAG
// the kernel would reassemble IP fragments before the ring, and a reassembled
// packet larger than a slot is truncated, hence never forwarded: a bridge must
// see fragments as they are on the wire. (A flow's non-first fragments, which
// carry no ports, may then land on another port of the group than its first.)
//
// Link loss: when the interface goes down or is deleted the socket reports an
// error (POLLERR, ENETDOWN). The port then closes its socket and ring, says
// 'down', and checks every 500 ms whether an interface of that name is back
// up (possibly a new one, with a new ifindex); then it reopens with the same
// options and says 'up'. Counters run on across reopens. A port opened on an
// interface that exists but is down starts 'down' the same way.
//
// Errors are MoatErrors, as for libpcap live capture (pcap-live.ts):
//   3009 CAPTURE_NO_DEVICE   no interface of that name (in this network namespace)
//   3010 CAPTURE_PERMISSION  the process lacks CAP_NET_RAW (and CAP_NET_ADMIN)
//   3012 CAPTURE_OPEN        anything else: the addon missing, a kernel feature
//                            missing (PACKET_IGNORE_OUTGOING needs Linux >= 4.20),
//                            bad options, the kernel refusing the ring size...

import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { getSystemErrorMap } from 'node:util';
import { MoatError } from '../errors/index.js';
import { LINKTYPE } from '../packet/index.js';
import type { BatchPort, BatchPortOpener, BatchPortOptions, BatchPortStats, FrameBatch } from './batch-port.js';

/** Defaults of BatchPortOptions for the ring engine. */
export const RING_DEFAULT_RING_BYTES = 16 * 1024 * 1024;
export const RING_DEFAULT_SLOT_BYTES = 2048;
export const RING_DEFAULT_BATCH_MAX = 64;
/** How often a port whose link is down checks whether its interface is back. */
export const RING_RELINK_INTERVAL_MS = 500;
// ---- the addon ----

interface NativePort {
  readonly ring: ArrayBuffer;
  /** The batch arrays: offset[batchMax], caplen[batchMax], origLen[batchMax] (uint32), then pass[batchMax] (uint8). */
  readonly meta: ArrayBuffer;
  readonly slots: number;
  readonly slotBytes: number;
  readonly ifindex: number;
}

export interface RingNative {
  probe(): string | null;
  ifState(name: string): number;
  open(
    name: string,
    slotBytes: number,
    ringBytes: number,
    batchMax: number,
    fanoutGroup: number,
    fanoutDefrag: boolean,
    promiscuous: boolean,
    ignoreOutgoing: boolean,
    qdiscBypass: boolean,
    /** n > 0: a batch of n frames is in meta (its slots go back to the kernel when this returns); < 0: -errno, the socket failed. */
    onEvent: (code: number) => void,
  ): NativePort;
  send(
    port: NativePort,
    bytes: Uint8Array,
    offset: Uint32Array,
    caplen: Uint32Array,
    origLen: Uint32Array,
    pass: Uint8Array,
    count: number,
  ): number;
  /** send() of the batch `src` is handing over, from its own arrays (no typed-array lookups). */
  forward(port: NativePort, src: NativePort, count: number): number;
  stats(port: NativePort, out: Float64Array): void;
  close(port: NativePort): void;
  livePorts(): number;
  /** Thread priorities (thread-priority.ts): the calling thread's nice set (0 or the errno), read, its kernel id, its name. */
  setThreadNice(nice: number): number;
  threadNice(): number;
  threadId(): number;
  setThreadName(name: string): void;
  /** CPU affinity (thread-priority.ts): pins thread `tid` (0 or absent: the calling one) to `cpus` (0 or the errno); the CPUs it may run on. */
  setThreadAffinity(cpus: readonly number[], tid?: number): number;
  threadAffinity(tid?: number): number[];
}

/** Where the built addon may be: beside this file (src, under vitest) or, from dist/src/capture, in the source tree. */
function addonCandidates(): string[] {
  const fromEnv = process.env.MOAT_RING_ADDON;
  const rel = 'ring/build/Release/moat_ring.node';
  return [
    ...(fromEnv !== undefined && fromEnv !== '' ? [fromEnv] : []),
    fileURLToPath(new URL(`./${rel}`, import.meta.url)),
    fileURLToPath(new URL(`../../../src/capture/${rel}`, import.meta.url)),
  ];
}

let native: RingNative | undefined;
let loadProblem: string | undefined;

function tryLoad(): RingNative | undefined {
  if (native !== undefined || loadProblem !== undefined) return native;
  const candidates = addonCandidates();
  const path = candidates.find((p) => existsSync(p));
  if (path === undefined) {
    loadProblem =
      `the ring engine's addon is not built (looked for ${candidates.join(', ')}); ` +
      'npm ci builds it, and so does npm run build:ring (node-gyp rebuild --directory=src/capture/ring: it needs python3, make and a C compiler)';
    return undefined;
  }
  try {
    native = createRequire(import.meta.url)(path) as RingNative;
  } catch (err) {
    loadProblem = `cannot load the ring engine's addon ${path}: ${errorText(err)}`;
  }
  return native;
}

/** The addon, or why it cannot be loaded (thread-priority.ts uses it too). */
export function ringAddon(): { native: RingNative } | { problem: string } {
  const n = tryLoad();
  return n === undefined ? { problem: loadProblem ?? 'the ring engine is not available' } : { native: n };
}

function loadNative(): RingNative {
  const n = tryLoad();
  if (n === undefined) throw new MoatError('CAPTURE_OPEN', loadProblem ?? 'the ring engine is not available');
  return n;
}

/**
 * Whether the ring engine can run here: undefined when it can, else why not
 * (the addon missing, not Linux, no CAP_NET_RAW, or the kernel lacking
 * TPACKET_V2, PACKET_IGNORE_OUTGOING (Linux >= 4.20) or PACKET_QDISC_BYPASS).
 */
export function ringEngineAvailable(): string | undefined {
  if (process.platform !== 'linux') return 'the ring engine needs Linux (AF_PACKET)';
  const n = tryLoad();
  if (n === undefined) return loadProblem;
  return n.probe() ?? undefined;
}

/** Ports open in this thread (for tests of the lifetime: 0 after every close). */
export function ringLivePorts(): number {
  return native?.livePorts() ?? 0;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function errnoText(errno: number): string {
  const entry = getSystemErrorMap().get(-errno);
  return entry === undefined ? `errno ${errno}` : `${entry[1]} (${entry[0]})`;
}

// ---- options ----

interface ResolvedOptions {
  ringBytes: number;
  slotBytes: number;
  batchMax: number;
  fanoutGroup: number; // -1: none
  promiscuous: boolean;
  ignoreOutgoing: boolean;
  qdiscBypass: boolean;
}

function resolveOptions(iface: string, o: BatchPortOptions): ResolvedOptions {
  const bad = (what: string): never => {
    throw new MoatError('CAPTURE_OPEN', `cannot open ring port on ${iface}: ${what}`);
  };
  const slotBytes = o.slotBytes ?? RING_DEFAULT_SLOT_BYTES;
  // A slot holds the tpacket2 header and sockaddr_ll (80 bytes before the frame) plus the frame.
  if (!Number.isInteger(slotBytes) || slotBytes < 256 || slotBytes > 65_536 || slotBytes % 16 !== 0) {
    bad(`slotBytes must be a multiple of 16 from 256 to 65536, not ${slotBytes}`);
  }
  const ringBytes = o.ringBytes ?? RING_DEFAULT_RING_BYTES;
  if (!Number.isInteger(ringBytes) || ringBytes < 65_536 || ringBytes > 2 ** 30) {
    bad(`ringBytes must be an integer from 65536 (64 KiB) to 2^30 (1 GiB), not ${ringBytes}`);
  }
  const batchMax = o.batchMax ?? RING_DEFAULT_BATCH_MAX;
  if (!Number.isInteger(batchMax) || batchMax < 1 || batchMax > 1024) bad(`batchMax must be an integer from 1 to 1024, not ${batchMax}`);
  const fanoutGroup = o.fanoutGroup ?? -1;
  if (o.fanoutGroup !== undefined && (!Number.isInteger(fanoutGroup) || fanoutGroup < 0 || fanoutGroup > 65_535)) {
    bad(`fanoutGroup must be an integer from 0 to 65535, not ${o.fanoutGroup}`);
  }
  return {
    ringBytes,
    slotBytes,
    batchMax,
    fanoutGroup,
    promiscuous: o.promiscuous ?? true,
    ignoreOutgoing: o.ignoreOutgoing ?? true,
    qdiscBypass: o.qdiscBypass ?? true,
  };
}

function openError(iface: string, err: unknown): MoatError {
  const code = (err as { code?: unknown }).code;
  const text = errorText(err);
  if (code === 'ENODEV' || code === 'ENXIO') {
    return new MoatError('CAPTURE_NO_DEVICE', `no such network interface: ${JSON.stringify(iface)} (${text})`, { cause: err });
  }
  if (code === 'EPERM' || code === 'EACCES') {
    return new MoatError('CAPTURE_PERMISSION', `cannot open ring port on ${iface}: ${text}; it needs CAP_NET_RAW and CAP_NET_ADMIN`, {
      cause: err,
    });
  }
  return new MoatError('CAPTURE_OPEN', `cannot open ring port on ${iface}: ${text}`, { cause: err });
}

// ---- the port ----

/**
 * The batch object of a port: made once, refilled for every batch. Its views
 * are over the native port's memory (the ring, and the arrays recv() fills),
 * so they are replaced when the port reopens after a link loss.
 */
class RingBatch implements FrameBatch {
  bytes = new Uint8Array(0);
  count = 0;
  offset = new Uint32Array(0);
  caplen = new Uint32Array(0);
  origLen = new Uint32Array(0);
  pass: Uint8Array;
  /** The native port whose batch this is (forward() sends it from the port's own arrays), while open. */
  source: NativePort | undefined;
  constructor(private readonly batchMax: number) {
    this.pass = new Uint8Array(batchMax);
  }
  /** Views over a newly opened native port. */
  attach(port: NativePort, batchMax: number): void {
    this.bytes = new Uint8Array(port.ring);
    this.offset = new Uint32Array(port.meta, 0, batchMax);
    this.caplen = new Uint32Array(port.meta, 4 * batchMax, batchMax);
    this.origLen = new Uint32Array(port.meta, 8 * batchMax, batchMax);
    this.pass = new Uint8Array(port.meta, 12 * batchMax, batchMax);
    this.source = port;
  }
  /** The port closed: its memory is detached (every view reads empty); so are these. */
  detach(): void {
    this.bytes = new Uint8Array(0);
    this.offset = this.caplen = this.origLen = new Uint32Array(0);
    this.pass = new Uint8Array(this.batchMax);
    this.source = undefined;
    this.count = 0;
  }
}

// Indexes of the addon's stats array.
const S_PACKETS = 0,
  S_BYTES = 1,
  S_TRUNCATED = 2,
  S_BATCHES = 3,
  S_DROPS = 5,
  S_SENT = 6,
  S_SEND_ERRORS = 7,
  S_LAST_ERRNO = 8;

class RingPort implements BatchPort {
  readonly linkType = LINKTYPE.ETHERNET;
  private port: NativePort | undefined;
  private readonly batch: RingBatch;
  private handler: ((batch: FrameBatch) => void) | undefined;
  private readonly linkHandlers: ((state: 'up' | 'down', reason: string) => void)[] = [];
  private link: 'up' | 'down' = 'down';
  private closed = false;
  private relink: NodeJS.Timeout | undefined;
  /** Counters of the native ports closed before the current one (link losses). */
  private readonly base = new Float64Array(9);
  private readonly now = new Float64Array(9);
  private downSendErrors = 0;
  private lastSendError: string | undefined;
  private handlerErrors = 0;
  private lastHandlerLog = 0;
  private readonly onEvent = (code: number): void => this.event(code);

  constructor(
    private readonly native: RingNative,
    readonly iface: string,
    private readonly options: ResolvedOptions,
  ) {
    this.batch = new RingBatch(options.batchMax);
    const state = native.ifState(iface);
    if (state === 1) this.openNative();
    else this.linkLost(`${iface} is down`, false);
  }

  private openNative(): void {
    const o = this.options;
    this.port = this.native.open(
      this.iface,
      o.slotBytes,
      o.ringBytes,
      o.batchMax,
      o.fanoutGroup,
      false,
      o.promiscuous,
      o.ignoreOutgoing,
      o.qdiscBypass,
      this.onEvent,
    );
    this.batch.attach(this.port, o.batchMax);
    this.link = 'up';
  }

  private closeNative(): void {
    const port = this.port;
    if (port === undefined) return;
    this.native.stats(port, this.now);
    for (let i = 0; i < S_LAST_ERRNO; i++) this.base[i]! += this.now[i]!;
    if (this.now[S_LAST_ERRNO]! !== 0) this.base[S_LAST_ERRNO] = this.now[S_LAST_ERRNO]!;
    this.port = undefined;
    this.native.close(port);
    this.batch.detach();
  }

  // The addon receives and releases the batches itself, calling this once a
  // batch (code = its frame count, pass[] zeroed); see on_poll in moat-ring.c.
  private event(code: number): void {
    if (code < 0) {
      this.linkLost(`${this.iface}: ${errnoText(-code)}`, true);
      return;
    }
    const b = this.batch;
    b.count = code;
    if (this.handler === undefined) return;
    try {
      this.handler(b);
    } catch (err) {
      this.handlerFailed(err);
    }
  }

  private handlerFailed(err: unknown): void {
    this.handlerErrors++;
    const t = Date.now();
    if (t - this.lastHandlerLog >= 1000) {
      this.lastHandlerLog = t;
      console.error(`moat: ring port ${this.iface}: the batch handler threw (${this.handlerErrors} so far): ${errorText(err)}`);
    }
  }

  private linkLost(reason: string, emit: boolean): void {
    this.closeNative();
    this.link = 'down';
    if (emit) this.emitLink('down', reason);
    if (this.relink === undefined && !this.closed) {
      this.relink = setInterval(() => this.tryRelink(), RING_RELINK_INTERVAL_MS);
    }
  }

  private tryRelink(): void {
    if (this.closed || this.native.ifState(this.iface) !== 1) return;
    try {
      this.openNative();
    } catch {
      return; // e.g. the interface went away again between the check and the open: try at the next tick
    }
    clearInterval(this.relink);
    this.relink = undefined;
    this.emitLink('up', `${this.iface} is up`);
  }

  private emitLink(state: 'up' | 'down', reason: string): void {
    for (const h of this.linkHandlers) {
      try {
        h(state, reason);
      } catch (err) {
        console.error(`moat: ring port ${this.iface}: a link handler threw: ${errorText(err)}`);
      }
    }
  }

  onBatch(handler: (batch: FrameBatch) => void): void {
    this.handler = handler;
  }

  forward(batch: FrameBatch): number {
    const port = this.port;
    if (port === undefined) {
      // Link down: the passed frames cannot go out.
      let lost = 0;
      for (let i = 0; i < batch.count; i++) if (batch.pass[i] === 1 && batch.caplen[i] === batch.origLen[i]) lost++;
      if (lost > 0) {
        this.downSendErrors += lost;
        this.lastSendError = `${this.iface} is down`;
      }
      return 0;
    }
    // A ring port's own batch (the daemon's case): sent from the source port's native arrays.
    if (batch instanceof RingBatch && batch.source !== undefined) return this.native.forward(port, batch.source, batch.count);
    return this.native.send(port, batch.bytes, batch.offset, batch.caplen, batch.origLen, batch.pass, batch.count);
  }

  onLink(handler: (state: 'up' | 'down', reason: string) => void): void {
    this.linkHandlers.push(handler);
  }

  stats(): BatchPortStats {
    const c = this.now;
    if (this.port !== undefined) this.native.stats(this.port, c);
    else c.fill(0);
    const sum = (i: number): number => this.base[i]! + c[i]!;
    const errno = c[S_LAST_ERRNO]! !== 0 ? c[S_LAST_ERRNO]! : this.base[S_LAST_ERRNO]!;
    const lastSendError = this.lastSendError ?? (errno !== 0 ? `send: ${errnoText(errno)}` : undefined);
    return {
      packets: sum(S_PACKETS),
      bytes: sum(S_BYTES),
      ringDrops: sum(S_DROPS),
      freezes: 0, // TPACKET_V2 rings do not freeze (a TPACKET_V3 block notion)
      truncated: sum(S_TRUNCATED),
      batches: sum(S_BATCHES),
      sent: sum(S_SENT),
      sendErrors: sum(S_SEND_ERRORS) + this.downSendErrors,
      lastSendError,
      link: this.link,
    };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.relink !== undefined) clearInterval(this.relink);
    this.relink = undefined;
    this.closeNative();
  }
}

/**
 * Opens a batched port on `iface` with the ring engine. Throws MoatError 3009
 * (no such interface), 3010 (no CAP_NET_RAW/CAP_NET_ADMIN) or 3012 (anything
 * else: the addon or a kernel feature missing, bad options).
 */
export const openRingPort: BatchPortOpener = (iface: string, options: BatchPortOptions): BatchPort => {
  const resolved = resolveOptions(iface, options);
  const n = loadNative();
  const state = n.ifState(iface);
  if (state < 0) {
    throw openError(iface, Object.assign(new Error(`no such interface: ${errnoText(-state)}`), { code: state === -19 ? 'ENODEV' : 'EIO' }));
  }
  try {
    return new RingPort(n, iface, resolved);
  } catch (err) {
    throw openError(iface, err);
  }
};
