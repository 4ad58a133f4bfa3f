// Base error type for everything Moat reports to a user: a stable numeric code
// from the registry, a human message, and optional location data (a source
// span for expressions, a JSON pointer for API bodies, a file and line for CLI input).

import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
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

/**
 * Reads a whole file. When it cannot be read, throws MoatError `name` naming
 * the file: "cannot read <what> <path>: no such file" (or "it is a
 * directory", "permission denied", the system's message).
 */
export function readFileCoded(path: string, name: ErrorName, what: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw readFailure(path, name, what, err);
  }
}

/** The asynchronous form of {@link readFileCoded}. */
export async function readFileCodedAsync(path: string, name: ErrorName, what: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (err) {
    throw readFailure(path, name, what, err);
  }
}
