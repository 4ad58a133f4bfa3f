// Errors raised by route handlers. A single MoatError or several at once (a
// ruleset with three bad rules is rejected with three entries in `errors[]`).

import { MoatError, type ErrorDetails, type ErrorName } from '../errors/index.js';

/** Several errors reported together; the HTTP status is the first one's. */
export class ApiErrors extends Error {
  constructor(readonly errors: readonly MoatError[]) {
    super(errors.map((e) => e.message).join('; '));
    this.name = 'ApiErrors';
  }
}

/** Shorthand for a MoatError raised by a handler. */
export function apiError(name: ErrorName, message: string, details: ErrorDetails = {}): MoatError {
  return new MoatError(name, message, details);
}

/** A body field error with its JSON pointer. */
export function invalidField(pointer: string, message: string): MoatError {
  return new MoatError('API_INVALID_FIELD', message, { pointer });
}
