// Public face of the CLI: run it in-process (tests) or as the binary (main.ts).
export { runCli } from './program.js';
export { CliError, processOutput, type Output } from './output.js';
