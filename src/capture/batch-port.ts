// Batched live ports: what a capture engine that reads frames in batches (the
// AF_PACKET ring addon, #19) gives a packet loop. This file is the contract
// between the engine and the daemon's packet workers, written before either:
// both code against it.
//
// A port delivers the frames that are ready as one batch, by reference into
// the memory they already sit in (the mapped RX ring): no copy into JS. The
// handler judges every frame of the batch synchronously, marking pass[i], and
// may forward the passed frames out of another port with one call (one
// sendmmsg whose buffers point into this port's ring). When the handler
// returns, the port gives the batch's slots back to the kernel: nothing of a
// batch may be kept past its handler (copy what must outlive it).
//
// Latency: a port never waits for a batch to fill. It hands over what is ready
// as soon as the socket is readable, so a lone frame is a batch of one.

/** The frames of one batch: views over the memory they are in, valid only during the handler. */
export interface FrameBatch {
  /** The memory the frames are in (for the ring engine: the whole mapped ring). */
  readonly bytes: Uint8Array;
  /** Frames in this batch (the arrays below are longer: their capacity is the port's batchMax). */
  readonly count: number;
  /** Frame i is bytes[offset[i], offset[i] + caplen[i]). */
  readonly offset: Uint32Array;
  /** Bytes captured of frame i (less than origLen[i] when the frame did not fit a slot: counted as truncated). */
  readonly caplen: Uint32Array;
  /** Length of frame i on the wire. */
  readonly origLen: Uint32Array;
  /**
   * Set by the handler, per frame: 1 to forward it (see BatchPort.forward), 0
   * not to. Zeroed by the port before each batch.
   */
  readonly pass: Uint8Array;
}

/** Counters of a batched port, since it was opened. */
export interface BatchPortStats {
  /** Frames delivered to the handler, and their captured bytes. */
  readonly packets: number;
  readonly bytes: number;
  /** Frames the kernel dropped because the ring was full (tp_drops), and ring freezes. */
  readonly ringDrops: number;
  readonly freezes: number;
  /** Frames longer than a slot (delivered cut to caplen; never forwarded cut). */
  readonly truncated: number;
  /** Batches delivered. */
  readonly batches: number;
  /** Frames sent out of this port, and those the kernel refused (with the last error's text). */
  readonly sent: number;
  readonly sendErrors: number;
  readonly lastSendError: string | undefined;
  /** 'up' while the port receives; 'down' while its interface is gone or down (the port keeps trying to reopen it). */
  readonly link: 'up' | 'down';
}

/** A live interface read and written in batches. */
export interface BatchPort {
  /** Interface name. */
  readonly iface: string;
  /** LINKTYPE of the frames (1, Ethernet, for AF_PACKET). */
  readonly linkType: number;
  /**
   * Starts delivering batches to `handler`, on the calling thread's event
   * loop, one call per batch ready. The handler must not throw (the port
   * counts and logs a throw, and releases the batch).
   */
  onBatch(handler: (batch: FrameBatch) => void): void;
  /**
   * Sends out of this port the frames of `batch` whose pass[i] is 1, with one
   * sendmmsg (or as few as the kernel needs); `batch` was received on another
   * port and its handler is running. Truncated frames are never sent. Returns
   * how many frames the kernel took; never throws.
   */
  forward(batch: FrameBatch): number;
  /** Link changes: 'down' with why (the interface went down or away), 'up' when the port receives again. */
  onLink(handler: (state: 'up' | 'down', reason: string) => void): void;
  stats(): BatchPortStats;
  /** Stops and frees the port (the ring's memory is detached from JS before it is unmapped). Idempotent. */
  close(): void;
}

/** Options of a batched port. */
export interface BatchPortOptions {
  /** Size of the RX ring in bytes (default 16 MiB). */
  readonly ringBytes?: number;
  /** Size of a slot in bytes (default 2048: an Ethernet frame of MTU 1500 with VLAN tags fits). */
  readonly slotBytes?: number;
  /** Most frames per batch (default 64). */
  readonly batchMax?: number;
  /** Join this PACKET_FANOUT_HASH group (ids are per network namespace): several ports on one interface share its flows. */
  readonly fanoutGroup?: number;
  /** Promiscuous mode (default true). */
  readonly promiscuous?: boolean;
  /** PACKET_IGNORE_OUTGOING: do not read back what is sent out of this interface (default true). */
  readonly ignoreOutgoing?: boolean;
  /** PACKET_QDISC_BYPASS on send (default true). */
  readonly qdiscBypass?: boolean;
}

/** Opens a batched port on an interface (throws a MoatError 3009-3012 as LiveCapture.open does). */
export type BatchPortOpener = (iface: string, options: BatchPortOptions) => BatchPort;
