// How commands talk to the terminal: through an Output, so tests can run the
// CLI in-process and capture what it prints and its exit code. Every error the
// CLI prints goes through reportError here, so each carries its registry code:
// `moat: error 5002: message`.

import { MoatError, type ErrorName } from '../errors/index.js';

/** A usage or input error: printed as `moat: error 5010: message`, exit status 2. */
export class CliError extends MoatError {
  constructor(message: string, name: ErrorName = 'CLI_USAGE') {
    super(name, message);
    this.name = 'CliError';
  }
}

/** Exit status when standard output (or a file given as a pipe) is closed by its reader: 128 + SIGPIPE, as Unix tools. */
export const EXIT_PIPE = 141;

/** Where a command writes, and the exit code it sets. */
export interface Output {
  stdout(line: string): void;
  stderr(line: string): void;
  /** Rewrites the progress line on a terminal; absent when standard error is not one. */
  progress?: ((text: string) => void) | undefined;
  exitCode: number;
}

/** The process's own streams. */
export function processOutput(): Output {
  return {
    stdout: (line) => process.stdout.write(line + '\n'),
    stderr: (line) => process.stderr.write(line + '\n'),
    progress: process.stderr.isTTY ? (text) => process.stderr.write(`\r\x1b[2K${text}`) : undefined,
    exitCode: 0,
  };
}

/**
 * One error as the CLI prints it: `moat: [prefix: ][at /pointer: ]error N: message[ (hint: ...)]`.
 * `prefix` names the input the error is about (a file) when the message does not.
 */
export function formatError(e: MoatError, prefix?: string): string {
  const where = prefix === undefined || prefix === '' ? '' : `${prefix}: `;
  // A JSON pointer locates the error inside the named input; messages without a prefix name their own place.
  const at = e.pointer === undefined || where === '' ? '' : `at ${e.pointer || '/'}: `;
  const hint = e.hint === undefined || e.hint === '' ? '' : ` (hint: ${e.hint})`;
  return `moat: ${where}${at}error ${e.code}: ${e.message}${hint}`;
}

/** A coded warning: `moat: warning N: message`; the command goes on. */
export function formatWarning(e: MoatError): string {
  return `moat: warning ${e.code}: ${e.message}`;
}

/** The coded errors an error stands for: itself, or the list a BundleError or ApiErrors carries. */
export function codedErrors(err: unknown): readonly MoatError[] | undefined {
  if (err instanceof MoatError) return [err];
  // A failed system call (a directory that cannot be created, a file that cannot be written): its own message.
  const sys = err as NodeJS.ErrnoException | null;
  if (err instanceof Error && typeof sys?.syscall === 'string' && typeof sys.code === 'string') return [new MoatError('CLI_SYSTEM', err.message, { cause: err })];
  const list = (err as { errors?: unknown } | null)?.errors;
  if (err instanceof Error && Array.isArray(list) && list.length > 0 && list.every((e) => e instanceof MoatError)) return list as MoatError[];
  return undefined;
}

/**
 * Prints a coded error (a MoatError, or a BundleError/ApiErrors listing several)
 * to standard error and sets the exit code: 2 for usage errors, 1 for the rest.
 * Returns false, printing nothing, for an error that carries no code.
 */
export function reportError(out: Output, err: unknown, prefix?: string): boolean {
  // A reader that went away (a pipe into `head`): no message, as Unix tools.
  if ((err as NodeJS.ErrnoException | null)?.code === 'EPIPE') {
    out.exitCode = EXIT_PIPE;
    return true;
  }
  const errors = codedErrors(err);
  if (errors === undefined) return false;
  for (const e of errors) out.stderr(formatError(e, prefix));
  out.exitCode = err instanceof CliError ? 2 : 1;
  return true;
}
