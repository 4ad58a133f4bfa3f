#!/usr/bin/env node
// Entry point of the `moat` binary.

import { runCli } from './program.js';
import { EXIT_PIPE, processOutput } from './output.js';

// A reader that went away (`moat replay ... | head -1`) ends the command
// quietly, with the status a Unix tool killed by SIGPIPE has (128 + 13).
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(EXIT_PIPE);
    throw err;
  });
}

process.exitCode = await runCli(process.argv.slice(2), processOutput());
