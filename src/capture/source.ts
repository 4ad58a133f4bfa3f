// A live frame source: what the daemon needs from a capture, whatever provides it.

/** Counters of a live source. */
export interface SourceStats {
  readonly packets: number;
  readonly bytes: number;
  readonly sent: number;
  readonly sendErrors: number;
  readonly lastSendError: string | undefined;
}

/** Frames in (one callback per frame, synchronous), frames out. */
export interface FrameSource {
  /** Interface name. */
  readonly iface: string;
  /** LINKTYPE number of the frames. */
  readonly linkType: number;
  /** `frame` is valid only during the call: decide synchronously, copy what must outlive it. */
  onPacket(handler: (frame: Buffer, length: number, truncated: boolean) => void): void;
  /** Sends a frame; false (and counted) when the kernel refused it. Never throws. */
  send(frame: Uint8Array, length: number): boolean;
  /** Stops delivering frames to JS. */
  stop(): void;
  readonly stats: SourceStats;
}
