// Base error type for everything Moat reports to a user: a stable numeric code
// from the registry, a human message, and optional location data (a source
// span for expressions, a JSON pointer for API bodies, a file and line for CLI input).

import { closeSync, constants, fstatSync, openSync, read, readSync, type Stats } from 'node:fs';
import { ERRORS, type ErrorName } from './codes.js';

/** A half-open character range [start, end) in some source text. */
export interface Span {
  readonly start: number;
  readonly end: number;
}

/** Optional location and explanation attached to an error. */
export interface ErrorDetails {
  span?: Span;
  pointer?: string;
  hint?: string;
  file?: string;
  line?: number;
  cause?: unknown;
  /** Errors that explain this one (the API's `error_chain`). */
  chain?: readonly MoatError[];
}

/** An error with a registry code. `code` is the v4 envelope's `errors[].code`. */
export class MoatError extends Error {
  readonly code: number;
  readonly errorName: ErrorName;
  readonly status: number;
  span: Span | undefined;
  pointer: string | undefined;
  hint: string | undefined;
  file: string | undefined;
  line: number | undefined;
  chain: readonly MoatError[] | undefined;

  constructor(name: ErrorName, message: string, details: ErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    const def = ERRORS[name];
    this.name = 'MoatError';
    this.errorName = name;
    this.code = def.code;
    this.status = def.status;
    this.span = details.span;
    this.pointer = details.pointer;
    this.hint = details.hint;
    this.file = details.file;
    this.line = details.line;
    this.chain = details.chain;
  }
}

// Why a file could not be read, in a user's words.
function unreadable(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  return e.code === 'ENOENT' ? 'no such file' : e.code === 'EISDIR' ? 'it is a directory' : e.code === 'EACCES' ? 'permission denied' : String(e.message ?? err);
}

function readFailure(path: string, name: ErrorName, what: string, err: unknown): MoatError {
  return new MoatError(name, `cannot read ${what} ${path}: ${unreadable(err)}`, { file: path, cause: err });
}

/** Kinds of input file, each with its own size limit (see FILE_LIMITS). */
export type FileKind = 'list' | 'geoip' | 'rules' | 'config';

const MIB = 1024 * 1024;

/**
 * The largest file of each kind Moat reads, in bytes: lists 256 MiB, GeoIP
 * databases 512 MiB, rules (and managed rulesets) and configuration 16 MiB.
 * The daemon configuration's `limits` raises them (setFileLimits).
 */
export const FILE_LIMITS: Record<FileKind, number> = { list: 256 * MIB, geoip: 512 * MIB, rules: 16 * MIB, config: 16 * MIB };

/** Sets the size limits of some kinds of file (bytes); the others keep theirs. */
export function setFileLimits(limits: Partial<Record<FileKind, number>>): void {
  for (const [k, v] of Object.entries(limits)) if (v !== undefined) FILE_LIMITS[k as FileKind] = v;
}

const LIMIT_KEY: Record<FileKind, string> = { list: 'limits.listMiB', geoip: 'limits.geoipMiB', rules: 'limits.rulesMiB', config: '' };

function sizeText(n: number): string {
  return n >= MIB ? `${(n / MIB).toFixed(n % MIB === 0 ? 0 : 1)} MiB` : `${n} bytes`;
}

/** Why a file that exists is not a regular file: `it is a FIFO (named pipe), not a regular file`. */
export function notRegular(st: Stats): string {
  return st.isDirectory()
    ? 'it is a directory'
    : st.isFIFO()
      ? 'it is a FIFO (named pipe), not a regular file'
      : st.isCharacterDevice()
        ? 'it is a character device, not a regular file'
        : st.isBlockDevice()
          ? 'it is a block device, not a regular file'
          : st.isSocket()
            ? 'it is a socket, not a regular file'
            : 'it is not a regular file';
}

/** Why a file was refused before reading (not a regular file, over its limit): the message says it. */
class FileRefused extends Error {}

/**
 * Opens `path` without blocking (a FIFO with no writer would hang a plain
 * open), and checks that it is a regular file within the limit of its kind
 * before anything is read. Returns the open descriptor and its size; throws
 * the system's error, or an error without `code` whose message says why.
 */
function openRegular(path: string, kind: FileKind, what: string): { fd: number; size: number } {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new FileRefused(notRegular(st));
    const limit = FILE_LIMITS[kind];
    if (st.size > limit) {
      const raise = LIMIT_KEY[kind] === '' ? '' : ` (raise it with ${LIMIT_KEY[kind]} in the daemon configuration)`;
      throw new FileRefused(`it is ${sizeText(st.size)}, over the ${sizeText(limit)} limit for ${what}s${raise}`);
    }
    return { fd, size: st.size };
  } catch (err) {
    closeSync(fd);
    throw err;
  }
}

/**
 * Reads a whole regular file of `kind` within its size limit. Throws the
 * system's error (with `code`: ENOENT, EACCES, ...) or, for a device, a FIFO,
 * a directory or a file over the limit, an error without `code` whose message
 * says why ("it is a FIFO (named pipe), not a regular file"): callers that
 * word their own message print `code ?? message`.
 */
export function readRegularFile(path: string, kind: FileKind, what: string = `${kind} file`): Buffer {
  const { fd, size } = openRegular(path, kind, what);
  try {
    return readAll(fd, size);
  } finally {
    closeSync(fd);
  }
}

/** Reads at most `size` bytes from `fd` (a file that shrank gives fewer; one that grew is cut at its size when checked). */
function readAll(fd: number, size: number): Buffer {
  const buf = Buffer.allocUnsafe(size);
  let off = 0;
  while (off < size) {
    const n = readSync(fd, buf, off, size - off, off);
    if (n === 0) break;
    off += n;
  }
  return off === size ? buf : buf.subarray(0, off);
}

/**
 * Reads a whole regular file of `kind`. When it cannot be read, throws
 * MoatError `name` naming the file: "cannot read <what> <path>: no such file"
 * (or "it is a directory", "it is a FIFO (named pipe), not a regular file",
 * "it is 5.0 GiB, over the 256 MiB limit", "permission denied", the system's
 * message). Device files and FIFOs are refused before any byte is read.
 */
export function readFileCoded(path: string, name: ErrorName, what: string, kind: FileKind): Buffer {
  try {
    return readRegularFile(path, kind, what);
  } catch (err) {
    throw readFailure(path, name, what, err);
  }
}

/** The asynchronous form of {@link readFileCoded} (the checks are synchronous: they do not read). */
export async function readFileCodedAsync(path: string, name: ErrorName, what: string, kind: FileKind): Promise<Buffer> {
  let opened;
  try {
    opened = openRegular(path, kind, what);
  } catch (err) {
    throw readFailure(path, name, what, err);
  }
  const { fd, size } = opened;
  try {
    const buf = Buffer.allocUnsafe(size);
    let off = 0;
    while (off < size) {
      const n = await new Promise<number>((resolve, reject) => read(fd, buf, off, size - off, off, (err, bytes) => (err === null ? resolve(bytes) : reject(err))));
      if (n === 0) break;
      off += n;
    }
    return off === size ? buf : buf.subarray(0, off);
  } catch (err) {
    throw readFailure(path, name, what, err);
  } finally {
    closeSync(fd);
  }
}

/** A message that may quote input (a JSON.parse message): its control characters escaped, so none reaches a terminal raw. */
export function escapeControls(message: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are what it escapes
  return message.replace(/[\u0000-\u001f\u007f-\u009f\ufeff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * Input quoted in an error message: in double quotes, control characters,
 * quotes and backslashes escaped (JSON's escapes, \u00XX for the rest), cut
 * to `max` characters with an ellipsis (…) so that a megabyte line or a binary
 * file never floods a terminal or a log.
 */
export function quoteInput(text: string, max = 80): string {
  const cut = text.length > max ? text.slice(0, max) : text;
  // JSON.stringify escapes quotes, backslashes and C0 controls; DEL, C1 controls and lone surrogates are escaped here.
  const q = JSON.stringify(cut).replace(/[\u007f-\u009f\u2028\u2029]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  return text.length > max ? `${q.slice(0, -1)}…" (${text.length} characters)` : q;
}
