// Builds the `moat` command-line program. Each command lives in commands/ and
// registers itself here.

import { Command, CommanderError } from 'commander';
import { registerCheck } from './commands/check.js';
import { registerReplay } from './commands/replay.js';
import { registerDaemon } from './commands/daemon.js';
import { registerLists } from './commands/lists.js';
import { registerServe } from './commands/serve.js';
import { registerUsers } from './commands/users.js';
import { registerTokens } from './commands/tokens.js';
import { registerDaemons } from './commands/daemons.js';
import { registerManaged } from './commands/managed.js';
import { registerExport } from './commands/export.js';
import { registerMigrateNotifications } from './commands/migrate-notifications.js';
import { registerMigrateStore } from './commands/migrate-store.js';
import { addDatabaseOption } from './open-store.js';
import { CliError, formatError, reportError, type Output } from './output.js';
import { moatVersion } from './version.js';

/** Runs the CLI with `argv` (without node and script) and returns the exit code. */
export async function runCli(argv: readonly string[], out: Output): Promise<number> {
  const program = new Command();
  program
    .name('moat')
    .description('Moat: a network-transit firewall speaking Cloudflare\'s rules language and v4 API')
    .version(moatVersion(), '-V, --version', 'print the version')
    .exitOverride()
    .configureOutput({
      writeOut: (s) => out.stdout(s.replace(/\n$/, '')),
      writeErr: (s) => out.stderr(s.replace(/\n$/, '')),
      // Commander's own errors (unknown option, missing argument) carry the usage code too.
      outputError: (s, write) => write(formatError(new CliError(s.replace(/^error: /, '').replace(/\n$/, ''))) + '\n'),
    });
  registerCheck(program, out);
  registerReplay(program, out);
  registerDaemon(program, out);
  registerLists(program, out);
  registerServe(program, out);
  registerUsers(program, out);
  registerTokens(program, out);
  registerDaemons(program, out);
  registerManaged(program, out);
  registerExport(program, out);
  registerMigrateNotifications(program, out);
  registerMigrateStore(program, out);
  // serve takes --database itself; the migration of legacy notification emails is SQLite's.
  addDatabaseOption(program, ['serve', 'migrate-notifications']);
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return out.exitCode;
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 2;
    if (reportError(out, err)) return out.exitCode;
    throw err;
  }
}
