// `moat managed`: the operator's managed rulesets. A managed ruleset (rules
// with `categories` tags) is imported from a JSON file; customers deploy it
// with an execute rule in their entrypoint and may override it by category or
// rule, but cannot change it through the API.

import type { Command } from 'commander';
import { DEFAULT_API_LIMITS, RulesetService } from '../../api/index.js';
import { withStore } from '../open-store.js';
import { CliError, reportError, type Output } from '../output.js';
import { readRegularFile } from '../../errors/index.js';
import { DEFAULT_DATA_DIR } from './serve.js';

/** Registers `moat managed import|delete|show|list`. */
export function registerManaged(program: Command, out: Output): void {
  const managed = program.command('managed').description("operator commands for managed rulesets (deployed by customers with execute rules)");
  managed
    .command('import')
    .description('import a managed ruleset from a JSON file (a new version when one of the same name exists)')
    .option('--data-dir <dir>', 'directory of the database', DEFAULT_DATA_DIR)
    .requiredOption('--file <path>', 'ruleset JSON: {name, description?, phase?, rules: [{action, expression, description?, categories?, enabled?, id?}]}')
    .action(async (flags: { dataDir: string; file: string }) => {
      let doc: unknown;
      try {
        doc = JSON.parse(readRegularFile(flags.file, 'rules', 'managed ruleset').toString('utf8'));
      } catch (err) {
        throw new CliError(`${flags.file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, 'RULESET_BAD_JSON');
      }
      await withStore(flags, async (store) => {
        try {
          const v = await new RulesetService(store, DEFAULT_API_LIMITS).importManaged(doc);
          out.stdout(`imported managed ruleset "${v.name}" ${v.id} version ${v.version}: ${v.rules?.length ?? 0} rules`);
        } catch (err) {
          if (!reportError(out, err, flags.file)) throw err;
        }
      });
    });
  managed
    .command('delete')
    .description('delete a managed ruleset with all its versions (refused while an execute rule deploys it)')
    .option('--data-dir <dir>', 'directory of the database', DEFAULT_DATA_DIR)
    .requiredOption('--id <id>', 'the managed ruleset id (see moat managed list)')
    .action(async (flags: { dataDir: string; id: string }) => {
      await withStore(flags, (store) => new RulesetService(store, DEFAULT_API_LIMITS).deleteManaged(flags.id));
      out.stdout(`deleted managed ruleset ${flags.id}`);
    });
  managed
    .command('show')
    .description('print a managed ruleset with its expressions (the file `moat replay --managed` and the daemon\'s rules.managed read)')
    .option('--data-dir <dir>', 'directory of the database', DEFAULT_DATA_DIR)
    .requiredOption('--id <id>', 'the managed ruleset id (see moat managed list)')
    .action(async (flags: { dataDir: string; id: string }) => {
      const found = (await withStore(flags, (store) => new RulesetService(store, DEFAULT_API_LIMITS).listManaged())).find((r) => r.id === flags.id);
      if (found === undefined) throw new CliError(`no managed ruleset ${flags.id} (see moat managed list)`);
      out.stdout(JSON.stringify(found, null, 2));
    });
  managed
    .command('list')
    .description('list managed rulesets')
    .option('--data-dir <dir>', 'directory of the database', DEFAULT_DATA_DIR)
    .option('--json', 'print as JSON')
    .action(async (flags: { dataDir: string; json?: boolean }) => {
      const list = await withStore(flags, (store) => new RulesetService(store, DEFAULT_API_LIMITS).listManaged());
      if (flags.json === true) out.stdout(JSON.stringify(list));
      else for (const r of list) out.stdout(`${r.id}  ${r.name}  version ${r.version}  ${r.rules?.length ?? 0} rules  ${r.phase}`);
      if (list.length === 0 && flags.json !== true) out.stdout('no managed rulesets');
    });
}
