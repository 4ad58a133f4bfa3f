// Public face of the error registry: codes, the base error, and helpers.
export { ERRORS, type ErrorDef, type ErrorName } from './codes.js';
export { MoatError, readFileCoded, readFileCodedAsync, FILE_LIMITS, setFileLimits, readRegularFile, notRegular, quoteInput, escapeControls, type FileKind, type Span, type ErrorDetails } from './errors.js';
