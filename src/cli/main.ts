#!/usr/bin/env node
// Entry point of the `moat` binary.

import { runCli } from './program.js';
import { processOutput } from './output.js';

process.exitCode = await runCli(process.argv.slice(2), processOutput());
