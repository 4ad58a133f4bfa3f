// `moat tokens`: API tokens (`Authorization: Bearer`) of the control plane's
// users, scoped to accounts and to read or edit. Works on an existing
// database directly, also while `moat serve` runs; a token is printed once
// and only its hash is stored.

import type { Command } from 'commander';
import type { TokenInfo, TokensRepo } from '../../store/index.js';
import { withStore, type StoreTarget } from '../open-store.js';
import type { Output } from '../output.js';
import { DEFAULT_DATA_DIR } from './serve.js';

const collect = (v: string, acc: string[]) => [...acc, v];

function describe(t: TokenInfo): string {
  const scope = t.accounts.length === 0 ? 'all accounts of the user' : `account(s) ${t.accounts.join(' ')}`;
  return `${t.id}  "${t.name}"  ${t.email}  ${t.read_only ? 'read' : 'edit'}  ${scope}  created ${t.created_on}${t.revoked_on === null ? '' : ', revoked ' + t.revoked_on}`;
}

/** Registers `moat tokens create|list|revoke`. */
export function registerTokens(program: Command, out: Output): void {
  const tokens = program.command('tokens').description('manage API tokens (Authorization: Bearer) of the control plane\'s users');
  const withTokens = <T>(where: StoreTarget, fn: (t: TokensRepo) => Promise<T>): Promise<T> => withStore(where, (store) => fn(store.tokens));

  tokens
    .command('create')
    .description('create an API token for a user; prints it once (only a hash is stored)')
    .option('--data-dir <dir>', 'directory of the database (default $MOAT_DATA_DIR, else ./moat-data)', DEFAULT_DATA_DIR)
    .requiredOption('--email <email>', 'the user the token acts as')
    .requiredOption('--name <name>', 'what the token is for (shown by `moat tokens list`)')
    .option('--account <id>', 'limit the token to this account of the user; repeat for more (default: every account of the user)', collect, [])
    .option('--read-only', 'the token may read but not write (writes answer 403, code 7402)')
    .option('--json', 'print the result as JSON')
    .action(async (flags: { dataDir: string; email: string; name: string; account: string[]; readOnly?: boolean; json?: boolean }) => {
      const r = await withTokens(flags, (t) => t.create({ email: flags.email, name: flags.name, accounts: flags.account, readOnly: flags.readOnly === true }));
      if (flags.json === true) {
        out.stdout(JSON.stringify({ ...r.info, token: r.token }));
        return;
      }
      out.stdout(`created token ${describe(r.info)}`);
      out.stdout(`Authorization: Bearer ${r.token}   (shown once; only a hash is stored)`);
    });

  tokens
    .command('list')
    .description('list API tokens (never the tokens themselves)')
    .option('--data-dir <dir>', 'directory of the database (default $MOAT_DATA_DIR, else ./moat-data)', DEFAULT_DATA_DIR)
    .option('--email <email>', 'only the tokens of this user')
    .option('--json', 'print as JSON')
    .action(async (flags: { dataDir: string; email?: string; json?: boolean }) => {
      const list = await withTokens(flags, (t) => t.list(flags.email));
      if (flags.json === true) {
        out.stdout(JSON.stringify(list));
        return;
      }
      if (list.length === 0) out.stdout('no tokens');
      for (const t of list) out.stdout(describe(t));
    });

  tokens
    .command('revoke')
    .description('revoke an API token by id (see `moat tokens list`); takes effect on the next request')
    .option('--data-dir <dir>', 'directory of the database (default $MOAT_DATA_DIR, else ./moat-data)', DEFAULT_DATA_DIR)
    .requiredOption('--id <id>', 'the token id')
    .action(async (flags: { dataDir: string; id: string }) => {
      await withTokens(flags, (t) => t.revoke(flags.id));
      out.stdout(`revoked token ${flags.id}`);
    });
}
