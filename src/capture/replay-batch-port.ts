// A BatchPort over a capture file: the frames of a pcap or pcapng file
// delivered in batches on the event loop, as the ring engine delivers a live
// interface's, and the frames forwarded out of it written to a pcap file. It
// lets the packet workers (daemon/packet-workers.ts) run for real without
// root or interfaces: their tests, and replays through N workers. Not a
// packet-rate path: the file is read whole into memory when opened.

import { writeFileSync } from 'node:fs';
import type { BatchPort, BatchPortOpener, BatchPortOptions, BatchPortStats, FrameBatch } from './batch-port.js';
import { PcapReader } from './pcap-reader.js';
import { openPcapFile, type PcapWriter } from './pcap-writer.js';

/** Options of a replay port: a BatchPort's, and what it reads and writes. */
export interface ReplayPortOptions extends BatchPortOptions {
  /** Where the frames forwarded out of this port are written (a pcap file); none: counted only. */
  readonly forwardFile?: string | undefined;
  /**
   * Where, on close(), one line per frame delivered is written: its index in
   * the file (counting on across repeats), 1 if the handler passed it or 0,
   * and process.hrtime.bigint() when its batch was handed over (the same
   * clock in every thread of the process).
   */
  readonly verdictFile?: string | undefined;
  /** Times the file is delivered (default 1). */
  readonly repeat?: number | undefined;
  /** Milliseconds between two batches (default 0: the next turn of the event loop). */
  readonly intervalMs?: number | undefined;
}

const DEFAULT_BATCH_MAX = 64;

class ReplayBatch implements FrameBatch {
  bytes: Uint8Array;
  count = 0;
  readonly offset: Uint32Array;
  readonly caplen: Uint32Array;
  readonly origLen: Uint32Array;
  readonly pass: Uint8Array;
  constructor(bytes: Uint8Array, max: number) {
    this.bytes = bytes;
    this.offset = new Uint32Array(max);
    this.caplen = new Uint32Array(max);
    this.origLen = new Uint32Array(max);
    this.pass = new Uint8Array(max);
  }
}

/** A capture file as a BatchPort (see the file's header). `iface` is the file's path. */
export class ReplayBatchPort implements BatchPort {
  readonly linkType: number;
  /** Frames of the file: all in `bytes`, frame i at offsets[i], caplens[i] long. */
  private readonly bytes: Uint8Array;
  private readonly offsets: Uint32Array;
  private readonly caplens: Uint32Array;
  private readonly origLens: Uint32Array;
  private readonly batch: ReplayBatch;
  private readonly writer: PcapWriter | undefined;
  private readonly repeat: number;
  private readonly intervalMs: number;
  private next = 0;
  private handler: ((b: FrameBatch) => void) | undefined;
  private timer: NodeJS.Timeout | NodeJS.Immediate | undefined;
  private closed = false;
  private readonly verdicts: string[] = [];
  private s = { packets: 0, bytes: 0, ringDrops: 0, freezes: 0, truncated: 0, batches: 0, sent: 0, sendErrors: 0, lastSendError: undefined as string | undefined, link: 'up' as 'up' | 'down' };

  constructor(readonly iface: string, private readonly options: ReplayPortOptions = {}) {
    const chunks: Buffer[] = [];
    const lens: number[] = [];
    const origs: number[] = [];
    let linkType = -1;
    const r = PcapReader.open(iface);
    try {
      while (r.next()) {
        if (linkType === -1) linkType = r.linkType;
        chunks.push(Buffer.from(r.data.subarray(r.offset, r.offset + r.caplen)));
        lens.push(r.caplen);
        origs.push(r.origLen);
      }
    } finally {
      r.close();
    }
    this.linkType = linkType === -1 ? 1 : linkType;
    this.bytes = Buffer.concat(chunks);
    this.caplens = Uint32Array.from(lens);
    this.origLens = Uint32Array.from(origs);
    this.offsets = new Uint32Array(lens.length);
    for (let i = 1; i < lens.length; i++) this.offsets[i] = this.offsets[i - 1]! + lens[i - 1]!;
    this.batch = new ReplayBatch(this.bytes, options.batchMax ?? DEFAULT_BATCH_MAX);
    this.repeat = options.repeat ?? 1;
    this.intervalMs = options.intervalMs ?? 0;
    this.writer = options.forwardFile === undefined ? undefined : openPcapFile(options.forwardFile, { linkType: this.linkType });
  }

  /** Frames this port delivers in all (the file's times repeat). */
  get total(): number {
    return this.caplens.length * this.repeat;
  }

  onBatch(handler: (batch: FrameBatch) => void): void {
    this.handler = handler;
    this.schedule();
  }

  forward(batch: FrameBatch): number {
    let n = 0;
    for (let i = 0; i < batch.count; i++) {
      if (batch.pass[i] !== 1) continue;
      const cap = batch.caplen[i]!;
      if (cap < batch.origLen[i]!) continue; // never forwarded cut
      const at = batch.offset[i]!;
      if (this.writer !== undefined) {
        try {
          this.writer.writePacket(batch.bytes.subarray(at, at + cap), 0, 0);
        } catch (err) {
          this.s.sendErrors++;
          this.s.lastSendError = (err as Error).message;
          continue;
        }
      }
      n++;
    }
    this.s.sent += n;
    return n;
  }

  onLink(): void {
    // A file's link never goes down.
  }

  stats(): BatchPortStats {
    return { ...this.s };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer !== undefined) {
      clearTimeout(this.timer as NodeJS.Timeout);
      clearImmediate(this.timer as NodeJS.Immediate);
    }
    this.writer?.close();
    if (this.options.verdictFile !== undefined) writeFileSync(this.options.verdictFile, this.verdicts.join(''));
  }

  private schedule(): void {
    if (this.closed || this.next >= this.total) return;
    this.timer = this.intervalMs > 0 ? setTimeout(() => this.deliver(), this.intervalMs) : setImmediate(() => this.deliver());
  }

  private deliver(): void {
    this.timer = undefined;
    const h = this.handler;
    if (this.closed || h === undefined) return;
    const b = this.batch;
    const frames = this.caplens.length;
    const first = this.next;
    let n = 0;
    while (n < b.offset.length && this.next < this.total) {
      const k = this.next++ % frames;
      b.offset[n] = this.offsets[k]!;
      b.caplen[n] = this.caplens[k]!;
      b.origLen[n] = this.origLens[k]!;
      if (this.caplens[k]! < this.origLens[k]!) this.s.truncated++;
      this.s.bytes += this.caplens[k]!;
      n++;
    }
    b.count = n;
    b.pass.fill(0);
    this.s.packets += n;
    this.s.batches++;
    const at = this.options.verdictFile === undefined ? 0n : process.hrtime.bigint();
    try {
      h(b);
    } catch {
      // The contract: a handler that throws is counted (as a send error here: nothing else fits) and the batch released.
      this.s.sendErrors++;
    }
    if (this.options.verdictFile !== undefined) for (let i = 0; i < n; i++) this.verdicts.push(`${first + i} ${b.pass[i]} ${at}\n`);
    this.schedule();
  }
}

/** The BatchPortOpener of replay ports (`options` as ReplayPortOptions), for the packet workers to name. */
export const openReplayPort: BatchPortOpener = (iface, options) => new ReplayBatchPort(iface, options as ReplayPortOptions);
