// What the packet workers (packet-worker.ts) and the thread that runs them
// (packet-workers.ts) share: the messages between them, and the layout of the
// SharedArrayBuffers through which the running generation is flipped and the
// counters are read without messaging.

import type { BatchPortOptions, ThreadCpus, ThreadPriority } from '../capture/index.js';
import { COUNTER_SLOTS, type LoadErrorData, type TransferredBundle, type UndecodablePolicy } from '../engine/index.js';

/** The control words (an Int32Array over a SharedArrayBuffer): the generation every worker judges with. */
export const CTL_GEN = 0;
/**
 * No bundle yet (the daemon's awaitingBundle): 0 judge as usual; HOLD_DROP
 * count the frames as held and forward nothing; HOLD_PASS count them and
 * forward everything unjudged (failOpen).
 */
export const CTL_HOLD = 1;
export const HOLD_DROP = 1;
export const HOLD_PASS = 2;
export const CTL_SLOTS = 4;

/** A worker's own totals, at the start of its Float64Array. */
export const W_BATCHES = 0;
export const W_FRAMES = 1;
/** The generation this worker judges with (it adopts the flipped one at its next batch). */
export const W_GEN = 2;
/** Longest step of a swap's prepare on this worker's event loop (wall-clock ms, so a thread descheduled meanwhile counts): what a swap stalls its packet loop. */
export const W_LONGEST_STEP_MS = 3;
/** Frames seen while CTL_HOLD was set (not judged). */
export const W_HELD = 4;
/** Frames whose evaluation threw (handled per PacketWorkerData.onError). */
export const W_PACKET_ERRORS = 5;
/**
 * Longest time between the end of one batch and the start of the next on this
 * worker's event loop (wall-clock ms): under a continuous feed, the longest
 * pause of its packet loop (a prepare's steps, a message's deserialisation, a
 * garbage collection, the thread descheduled). An idle port counts too: read
 * it only while frames keep coming. Zeroed by PacketWorkers.resetPauses().
 */
export const W_LONGEST_GAP_MS = 6;
export const W_HEADER = 8;

/** A port's BatchPort stats, after its PathCounters (COUNTER_SLOTS) in its block. */
export const S_PACKETS = 0;
export const S_BYTES = 1;
export const S_RING_DROPS = 2;
export const S_FREEZES = 3;
export const S_TRUNCATED = 4;
export const S_BATCHES = 5;
export const S_SENT = 6;
export const S_SEND_ERRORS = 7;
/** 1 while the link is up. */
export const S_LINK_UP = 8;
/** Frames of this port passed without judging (a port whose `judge` is false). */
export const S_UNJUDGED = 9;
/** Forwarded frames of this port whose TCP/UDP checksum was verified (1 in SampleSettings.checksumEvery), and those found bad. */
export const S_CHECKSUM_SAMPLED = 10;
export const S_BAD_CHECKSUM = 11;
export const S_SLOTS = 12;
export const PORT_SLOTS = COUNTER_SLOTS + S_SLOTS;

/** Float64 slots of one worker's counters with `ports` ports. */
export const workerSlots = (ports: number): number => W_HEADER + ports * PORT_SLOTS;

/** A module and the name of the BatchPortOpener it exports (functions do not cross threads; a module does). */
export interface OpenerRef {
  /** A specifier the worker can import(): a file: URL or a package name. */
  readonly module: string;
  readonly name: string;
}

/** One port of a worker. */
export interface PortSpec {
  readonly iface: string;
  /** Given to the opener as is (the ring engine's, or a replay port's ReplayPortOptions). */
  readonly options?: BatchPortOptions | undefined;
  /** Whether the frames read on this port are judged (true) or passed unjudged (false: the inside port of an inline daemon). */
  readonly judge: boolean;
  /** Index of the port the passed frames are forwarded out of (inline); null: judged only (monitor). */
  readonly peer: number | null;
}

/** How a worker's packet paths are made. */
export interface PathSettings {
  readonly colo?: { name?: string | undefined; region?: string | undefined } | undefined;
  readonly undecodable?: UndecodablePolicy | undefined;
}

/**
 * What a worker reports to the main thread beyond its counters: copies of
 * dropped frames (for the drop log and the drop capture), at most `drops` a
 * second per worker (0: none), and a TCP/UDP checksum check of 1 in
 * `checksumEvery` forwarded frames (0: none).
 */
export interface SampleSettings {
  readonly drops: number;
  readonly checksumEvery: number;
}

/** The workerData of a packet worker. */
export interface PacketWorkerData {
  readonly index: number;
  readonly control: SharedArrayBuffer;
  readonly counters: SharedArrayBuffer;
  readonly opener: OpenerRef;
  readonly ports: readonly PortSpec[];
  readonly paths: PathSettings;
  readonly samples?: SampleSettings | undefined;
  /** A frame whose evaluation throws: forwarded ('pass', the default) or not ('drop'); counted either way. */
  readonly onError?: 'pass' | 'drop' | undefined;
  readonly gen: number;
  readonly bundle: TransferredBundle;
  /** For tests: this worker fails to prepare any bundle after its first (a worker that cannot take a bundle the others can). */
  readonly failPrepare?: boolean | undefined;
  /** For tests: this worker takes this many ms longer to prepare each bundle after its first (a worker on a busy core), its batches running meanwhile. */
  readonly slowPrepareMs?: number | undefined;
  /** For tests: this worker's prepare of each bundle after its first blocks its event loop this many ms (a step that stalls the packet loop). */
  readonly stallPrepareMs?: number | undefined;
  /** The thread's nice value (capture.priority.packet); undefined: left as inherited. */
  readonly nice?: number | undefined;
  /** The CPUs the thread pins itself to (capture.cpus.packet, this worker's share); undefined: left as inherited. */
  readonly cpus?: readonly number[] | undefined;
}

/** What a prepare cost the worker's event loop. */
export interface PrepareCost {
  /** Making the functions and wrapping the table (one step). */
  readonly importMs: number;
  /** Building the ports' paths (one step). */
  readonly pathsMs: number;
  /** Warm-up slices, and the longest (ms). */
  readonly slices: number;
  readonly longestSliceMs: number;
}

export type ToWorker =
  | { readonly type: 'prepare'; readonly gen: number; readonly bundle: TransferredBundle }
  | { readonly type: 'discard'; readonly gen: number }
  | { readonly type: 'stop' };

export type FromWorker =
  | { readonly type: 'ready'; readonly gen: number; readonly cost: PrepareCost; readonly tableShared: boolean; readonly tableBytes: number; readonly priority: ThreadPriority; readonly cpus?: ThreadCpus | undefined }
  | { readonly type: 'prepared'; readonly gen: number; readonly ok: true; readonly cost: PrepareCost; readonly at: string }
  | { readonly type: 'prepared'; readonly gen: number; readonly ok: false; readonly error: LoadErrorData }
  | { readonly type: 'failed'; readonly error: LoadErrorData }
  | { readonly type: 'stopped' }
  /** A dropped frame (a copy) and the rule that dropped it (index into the bundle's rules of `gen`; -1: by policy). */
  | { readonly type: 'drop'; readonly port: number; readonly gen: number; readonly rule: number; readonly frame: Uint8Array; readonly origLen: number }
  /** A forwarded frame (a copy) whose sampled checksum was bad; at most one a minute per worker. */
  | { readonly type: 'bad-checksum'; readonly port: number; readonly frame: Uint8Array }
  /** An evaluation that threw (the first few of a worker, and then 1 in 10,000). */
  | { readonly type: 'packet-error'; readonly port: number; readonly message: string; readonly count: number }
  /** A port's link went down or came back. */
  | { readonly type: 'link'; readonly port: number; readonly state: 'up' | 'down'; readonly reason: string }
  /** The rule hit counters of generation `gen` (packets, then bytes, per rule), sent when they changed. */
  | { readonly type: 'hits'; readonly gen: number; readonly hits: Float64Array };
