// A frame source fed from memory: what a capture delivers to the daemon,
// synchronously, for tests and benchmarks that drive a Daemon without an
// interface (the daemon's real sources are libpcap captures).
import type { FrameSource, SourceStats } from '../../src/capture/index.js';

export class MemorySource implements FrameSource {
  readonly linkType = 1;
  handler: ((frame: Buffer, length: number, truncated: boolean) => void) | undefined;
  /** Frames sent out of this source (inline mode forwards here), unless keepSent is false. */
  readonly sentFrames: Buffer[] = [];
  private counts = { packets: 0, bytes: 0, sent: 0, sendErrors: 0, lastSendError: undefined as string | undefined };
  constructor(
    readonly iface: string,
    private readonly keepSent = true,
  ) {}
  onPacket(h: (frame: Buffer, length: number, truncated: boolean) => void): void {
    this.handler = h;
  }
  /** Delivers one frame to the daemon's handler, as a capture callback would. */
  deliver(frame: Buffer): void {
    this.counts.packets++;
    this.counts.bytes += frame.length;
    this.handler!(frame, frame.length, false);
  }
  /** Delivers the first `length` bytes of `buf`, as a live capture does from the one buffer it reuses. */
  deliverBytes(buf: Buffer, length: number): void {
    this.counts.packets++;
    this.counts.bytes += length;
    this.handler!(buf, length, false);
  }
  send(frame: Uint8Array, length: number): boolean {
    this.counts.sent++;
    if (this.keepSent) this.sentFrames.push(Buffer.from(frame.subarray(0, length)));
    return true;
  }
  stop(): void {
    this.handler = undefined;
  }
  get stats(): SourceStats {
    return this.counts;
  }
}
