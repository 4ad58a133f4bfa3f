// The v4 response envelope: { success, errors, messages, result, result_info }.
// Every answer of the API, good or bad, has this shape.

import type { MoatError } from '../errors/index.js';

/** One entry of `errors[]` / `messages[]`. */
export interface EnvelopeMessage {
  code: number;
  message: string;
  source?: { pointer: string };
  error_chain?: EnvelopeMessage[];
}

/** A v4 envelope. */
export interface Envelope<T = unknown> {
  success: boolean;
  errors: EnvelopeMessage[];
  messages: EnvelopeMessage[];
  result: T | null;
  result_info?: Record<string, unknown>;
}

/** A successful envelope around `result`, with `result_info` on list endpoints. */
export function ok<T>(result: T, resultInfo?: Record<string, unknown>): Envelope<T> {
  const e: Envelope<T> = { success: true, errors: [], messages: [], result };
  if (resultInfo !== undefined) e.result_info = resultInfo;
  return e;
}

/** The envelope entry for one error: code, message and, for body errors, the JSON pointer. */
export function errorEntry(err: MoatError): EnvelopeMessage {
  const m: EnvelopeMessage = { code: err.code, message: err.message };
  if (err.pointer !== undefined) m.source = { pointer: err.pointer };
  if (err.chain !== undefined && err.chain.length > 0) m.error_chain = err.chain.map(errorEntry);
  return m;
}

/** A failure envelope with one or more errors. */
export function fail(errors: readonly MoatError[]): Envelope<null> {
  return { success: false, errors: errors.map(errorEntry), messages: [], result: null };
}
