// `moat export`: writes what a daemon runs for an account (and zone) from the
// control plane's store into files: the entrypoints, the managed rulesets
// they execute, the lists they name, and the `rules`/`lists` keys of a daemon
// configuration pointing at them. Until the ruleset channel pushes bundles to
// daemons, this (or curl of the entrypoint) is how a daemon gets them.

import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { readAccountDeployment } from '../../api/index.js';
import { isId } from '../../store/index.js';
import { withStore } from '../open-store.js';
import { CliError, type Output } from '../output.js';
import { quoteInput } from '../../errors/index.js';
import { DEFAULT_DATA_DIR } from './serve.js';

/** Registers `moat export`. */
export function registerExport(program: Command, out: Output): void {
  program
    .command('export')
    .description("write an account's deployed network_transit bundle (entrypoints, managed rulesets, lists) to files a daemon reads")
    .option('--data-dir <dir>', 'directory of the database', DEFAULT_DATA_DIR)
    .requiredOption('--account <id>', 'the account (32 hex)')
    .option('--zone <id>', 'also the entrypoint of this zone of the account')
    .requiredOption('--out <dir>', 'directory to write into (created when missing)')
    .action(async (flags: { dataDir: string; account: string; zone?: string; out: string }) => {
      for (const id of [flags.account, flags.zone ?? flags.account]) {
        if (!isId(id)) throw new CliError(`${quoteInput(id)} is not an id: accounts and zones are 32 lowercase hex characters`);
      }
      const deployment = await withStore(flags, (store) => readAccountDeployment(store, flags.account, flags.zone));
      if (deployment.account === undefined) throw new CliError(`account ${flags.account} has no network_transit entrypoint`);
      const dir = resolve(flags.out);
      mkdirSync(join(dir, 'lists'), { recursive: true });
      mkdirSync(join(dir, 'managed'), { recursive: true });
      const write = (name: string, text: string) => writeFileSync(join(dir, name), text);
      write('account.json', JSON.stringify(deployment.account, null, 2) + '\n');
      if (deployment.zone !== undefined) write('zone.json', JSON.stringify(deployment.zone, null, 2) + '\n');
      for (const m of deployment.managed) write(`managed/${m.id}.json`, JSON.stringify(m, null, 2) + '\n');
      for (const [name, entries] of Object.entries(deployment.lists)) write(`lists/${name}.txt`, `# ${name}: ${entries.length} entries, exported by moat export\n${entries.join('\n')}${entries.length > 0 ? '\n' : ''}`);
      const config = {
        rules: {
          account: join(dir, 'account.json'),
          ...(deployment.zone === undefined ? {} : { zone: join(dir, 'zone.json') }),
          managed: deployment.managed.map((m) => join(dir, `managed/${m.id}.json`)),
        },
        lists: Object.fromEntries(Object.keys(deployment.lists).map((n) => [n, join(dir, `lists/${n}.txt`)])),
      };
      write('daemon-rules.json', JSON.stringify(config, null, 2) + '\n');
      out.stdout(
        `exported account entrypoint version ${deployment.account.version}${deployment.zone ? `, zone entrypoint version ${deployment.zone.version}` : ''}, ` +
          `${deployment.managed.length} managed ruleset(s), ${Object.keys(deployment.lists).length} list(s) to ${dir}; the daemon configuration's "rules" and "lists" keys are in daemon-rules.json`,
      );
    });
}
