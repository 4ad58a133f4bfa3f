// `moat lists`: operator commands for lists. `load-managed` replaces the content
// of a managed list ($svc.anonymizer, $svc.botnetcc, $svc.malware) from a list
// file; the API cannot change managed lists, so this is how they get content.

import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { MANAGED_LISTS } from '../../expr/index.js';
import { parseListText } from '../../net/index.js';
import { managedListName, rangeListTexts } from '../../store/index.js';
import { withStore } from '../open-store.js';
import { CliError, type Output } from '../output.js';
import { quoteInput, readRegularFile } from '../../errors/index.js';
import { DEFAULT_DATA_DIR } from './serve.js';

interface LoadFlags {
  dataDir: string;
  name: string;
  file: string;
}

/** Registers `moat lists` and its subcommands on the program. */
export function registerLists(program: Command, out: Output): void {
  const lists = program.command('lists').description('operator commands for IP lists');
  lists
    .command('load-managed')
    .description(`replace the content of a managed list (${MANAGED_LISTS.join(', ')}) with the entries of a list file`)
    .requiredOption('--name <name>', 'the managed list: svc.malware, $svc.malware or its alias cf.malware')
    .requiredOption('--file <path>', 'list file: one address, CIDR or a..b range per line, # comments ("-" for standard input)')
    .option('--data-dir <dir>', 'data directory of the control plane', DEFAULT_DATA_DIR)
    .action(async (flags: LoadFlags) => {
      const name = managedListName(flags.name);
      if (name === undefined) {
        throw new CliError(`${quoteInput(flags.name)} is not a managed list; they are ${MANAGED_LISTS.join(', ')} (account lists are changed through the API)`);
      }
      const label = flags.file === '-' ? '<stdin>' : flags.file;
      let text: string;
      try {
        text = flags.file === '-' ? readFileSync(0, 'utf8') : readRegularFile(flags.file, 'list', 'list file').toString('utf8');
      } catch (err) {
        throw new CliError(`${label}: cannot read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, 'LIST_READ');
      }
      // The whole file is parsed before the database is opened: a bad line
      // (reported as file:line) leaves the stored list untouched.
      const entries = rangeListTexts(parseListText(text, label));
      const n = await withStore(flags, (store) => store.lists.loadManaged(name, entries, `loaded from ${label}`));
      out.stdout(`${name}: ${n} ${n === 1 ? 'entry' : 'entries'} loaded from ${label}`);
    });
}
