// The buffered file cursor under the capture-file reader: one reused buffer
// filled with fs.readSync, grown only for a record larger than it (up to a cap),
// and the errors that name the file and the byte offset of what is wrong.

import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { MoatError, type ErrorName } from '../errors/index.js';

/** Initial size of the read buffer. */
export const PCAP_READER_BUFFER_SIZE = 4 * 1024 * 1024;
/** Hard cap of the read buffer, hence of one record or block. */
export const PCAP_READER_MAX_BUFFER_SIZE = 64 * 1024 * 1024;

// Unsigned 32-bit reads without Buffer's argument validation (callers keep offsets in bounds).
export function le32(b: Buffer, o: number): number {
  return (b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16)) + b[o + 3]! * 0x100_0000;
}

export function be32(b: Buffer, o: number): number {
  return b[o]! * 0x100_0000 + ((b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!);
}

export function hex32(n: number): string {
  return `0x${n.toString(16).padStart(8, '0')}`;
}

/**
 * A window over a file: the unread bytes are buf[start, end), and buf[0] is file
 * byte `base`. Memory is constant whatever the file size: the buffer is reused, and
 * grows only when a single record or block is larger than it, up to `maxBufferSize`;
 * a length above the cap is the caller's error to report, never an allocation.
 * Reads are positional on regular files and sequential on pipes.
 */
export class FileCursor {
  /** Path of the file, as given to open(); every error message starts with it. */
  readonly path: string;
  readonly maxBufferSize: number;
  buf: Buffer;
  /** File offset of buf[0]. */
  base = 0;
  /** Window of unread bytes: buf[start, end). */
  start = 0;
  end = 0;
  private fd: number;
  private readonly positional: boolean;
  private readonly fileSize: number;
  private eof = false;

  private constructor(path: string, fd: number, size: number | undefined, maxSize: number | undefined) {
    this.path = path;
    this.fd = fd;
    const initial = size ?? PCAP_READER_BUFFER_SIZE;
    const max = maxSize ?? Math.max(PCAP_READER_MAX_BUFFER_SIZE, initial);
    if (!Number.isInteger(initial) || initial < 64) throw new RangeError(`pcap reader buffer size must be an integer >= 64, got ${initial}`);
    if (!Number.isInteger(max) || max < initial) throw new RangeError(`pcap reader maximum buffer size must be an integer >= the buffer size ${initial}, got ${max}`);
    this.maxBufferSize = max;
    let stat;
    try {
      stat = fstatSync(fd);
    } catch (cause) {
      throw this.readError(cause);
    }
    if (stat.isDirectory()) throw new MoatError('CAPTURE_READ', `${path}: cannot read capture file: it is a directory`, { file: path });
    this.positional = stat.isFile();
    this.fileSize = stat.isFile() ? stat.size : Infinity;
    this.buf = Buffer.allocUnsafe(initial);
  }

  /**
   * Opens a file for reading with a buffer of `size` bytes (default 4 MiB) that may
   * grow to `maxSize` (default 64 MiB).
   * @throws MoatError 3006 if the file cannot be opened or is a directory; RangeError for bad sizes
   */
  static open(path: string, size?: number, maxSize?: number): FileCursor {
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch (cause) {
      throw new MoatError('CAPTURE_READ', `${path}: cannot open capture file: ${(cause as Error).message}`, { file: path, cause });
    }
    try {
      return new FileCursor(path, fd, size, maxSize);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /** Closes the file. Idempotent. */
  close(): void {
    if (this.fd >= 0) {
      const fd = this.fd;
      this.fd = -1;
      closeSync(fd);
    }
  }

  /**
   * Makes sure buf[start, start+n) holds file bytes, compacting, growing (for n larger than
   * the buffer; callers check n against the cap first) and reading as needed. Returns false
   * if the file ends first; what is there stays in buf[start, end).
   */
  fill(n: number): boolean {
    if (this.end - this.start >= n) return true;
    if (this.eof) return false;
    const kept = this.end - this.start;
    if (n > this.buf.length) {
      // Do not allocate for a record the file cannot hold.
      if (this.positional && this.base + this.start + n > this.currentFileSize()) return false;
      const grown = Buffer.allocUnsafe(Math.min(this.maxBufferSize, Math.max(n, this.buf.length * 2)));
      this.buf.copy(grown, 0, this.start, this.end);
      this.buf = grown;
    } else if (this.start > 0) {
      this.buf.copyWithin(0, this.start, this.end);
    }
    this.base += this.start;
    this.start = 0;
    this.end = kept;
    while (this.end < n) {
      const got = this.read(this.end, this.buf.length - this.end);
      if (got === 0) {
        this.eof = true;
        return false;
      }
      this.end += got;
    }
    return true;
  }

  private read(at: number, length: number): number {
    try {
      return readSync(this.fd, this.buf, at, length, this.positional ? this.base + at : null);
    } catch (cause) {
      throw this.readError(cause);
    }
  }

  private currentFileSize(): number {
    try {
      return fstatSync(this.fd).size;
    } catch {
      return this.fileSize;
    }
  }

  // ---------------------------------------------------------------- errors

  /** An error of the file: `text` names what is wrong and at which byte. */
  fail(name: ErrorName, text: string): MoatError {
    return new MoatError(name, `${this.path}: ${text}`, { file: this.path });
  }

  readError(cause: unknown): MoatError {
    const why = cause instanceof Error ? cause.message : String(cause);
    return new MoatError('CAPTURE_READ', `${this.path}: cannot read capture file at byte ${this.base + this.end}: ${why}`, { file: this.path, cause });
  }

  /** The file ends inside the `what` at file offset `at` that needs `need` bytes. */
  truncated(what: string, at: number, need: number): MoatError {
    const ends = this.positional ? `the file ends at byte ${this.currentFileSize()}` : `the input ends after ${this.base + this.end - at} of them`;
    return this.fail('CAPTURE_TRUNCATED', `${what} at byte ${at} is cut short: it needs ${need} bytes, ${ends}`);
  }
}
