// How commands talk to the terminal: through an Output, so tests can run the
// CLI in-process and capture what it prints and its exit code.

/** A usage or input error: printed as `moat: message`, exit status 2. */
export class CliError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CliError';
  }
}

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
