// Writes dropped packets to a size-capped pcap that rotates: path, path.1, ...
// path.(files-1); the oldest is deleted. Writing is batched by the pcap writer.

import { existsSync, renameSync, rmSync } from 'node:fs';
import { openPcapFile, type PcapWriter } from '../capture/index.js';

/** Options of a drop recorder. */
export interface DropRecorderOptions {
  path: string;
  maxBytes: number;
  files: number;
  linkType: number;
}

/** A rotating pcap of dropped packets. */
export class DropRecorder {
  private writer: PcapWriter;
  /** Files rotated so far. */
  rotations = 0;

  constructor(private readonly o: DropRecorderOptions) {
    this.writer = openPcapFile(o.path, { linkType: o.linkType, resolution: 'ns' });
  }

  /** Records one frame with the time it was seen. */
  write(frame: Uint8Array, length: number, nowNs: bigint): void {
    if (this.writer.byteCount + length + 16 > this.o.maxBytes && this.writer.packetCount > 0) this.rotate();
    this.writer.writePacket(frame.subarray(0, length), Number(nowNs / 1_000_000_000n), Number(nowNs % 1_000_000_000n), length);
  }

  private rotate(): void {
    this.writer.close();
    const { path, files } = this.o;
    if (files <= 1) rmSync(path, { force: true });
    else {
      rmSync(`${path}.${files - 1}`, { force: true });
      for (let i = files - 2; i >= 1; i--) if (existsSync(`${path}.${i}`)) renameSync(`${path}.${i}`, `${path}.${i + 1}`);
      renameSync(path, `${path}.1`);
    }
    this.writer = openPcapFile(path, { linkType: this.o.linkType, resolution: 'ns' });
    this.rotations++;
  }

  /** Flushes buffered records to the file. */
  flush(): void {
    this.writer.flush();
  }

  close(): void {
    this.writer.close();
  }
}
