// `moat users`: users of the control plane, their API keys, and the accounts
// and zones they may reach. Works on the database file directly, also while
// `moat serve` runs (SQLite serialises the writers).

import type { Command } from 'commander';
import type { UsersRepo } from '../../store/index.js';
import { withStore, type StoreTarget } from '../open-store.js';
import { CliError, type Output } from '../output.js';
import { DEFAULT_DATA_DIR } from './serve.js';

const collect = (v: string, acc: string[]) => [...acc, v];

/** Registers `moat users create|list|revoke|add-key`. */
export function registerUsers(program: Command, out: Output): void {
  const users = program.command('users').description('manage the users and API keys of the control plane');
  const withUsers = <T>(where: StoreTarget, fn: (u: UsersRepo) => Promise<T>): Promise<T> => withStore(where, (store) => fn(store.users));

  users
    .command('create')
    .description('create a user with a key and access to accounts (and zones); prints the key when it was generated')
    .option('--data-dir <dir>', 'directory of the database', DEFAULT_DATA_DIR)
    .requiredOption('--email <email>', 'the user\'s email (X-Auth-Email)')
    .requiredOption('--account <id>', 'account id (32 hex) the user may reach; repeat for more; created on first use', collect, [])
    .option('--zone <id>', 'zone id (32 hex) of the first account the user may reach; repeat for more', collect, [])
    .option('--key <key>', 'use this key (16-128 of A-Z a-z 0-9 _ -) instead of a generated one')
    .option('--json', 'print the result as JSON')
    .action(async (flags: { dataDir: string; email: string; account: string[]; zone: string[]; key?: string; json?: boolean }) => {
      // requiredOption is satisfied by the [] default of a repeatable option, so
      // a missing --account is caught here, as the usage error it is (exit 2).
      if (flags.account.length === 0) throw new CliError('users create: give at least one --account <id>');
      const r = await withUsers(flags, (u) => u.create({ email: flags.email, accounts: flags.account, zones: flags.zone, key: flags.key }));
      if (flags.json === true) {
        out.stdout(JSON.stringify({ ...r.user, key: flags.key === undefined ? r.key : undefined }));
        return;
      }
      out.stdout(`created user ${r.user.email} with access to account(s) ${r.user.accounts.join(', ')}${r.user.zones.length > 0 ? ' and zone(s) ' + r.user.zones.map((z) => z.id).join(', ') : ''}`);
      if (flags.key === undefined) out.stdout(`X-Auth-Key: ${r.key}   (shown once; only a hash is stored)`);
    });

  users
    .command('add-key')
    .description('give an existing user one more key; prints it')
    .option('--data-dir <dir>', 'directory of the database', DEFAULT_DATA_DIR)
    .requiredOption('--email <email>', 'the user')
    .option('--key <key>', 'use this key instead of a generated one')
    .action(async (flags: { dataDir: string; email: string; key?: string }) => {
      const k = await withUsers(flags, (u) => u.addKey(flags.email, flags.key));
      out.stdout(flags.key === undefined ? `X-Auth-Key: ${k}   (shown once; only a hash is stored)` : `added a key to ${flags.email}`);
    });

  users
    .command('list')
    .description('list users, their accounts, zones and keys (key hints only)')
    .option('--data-dir <dir>', 'directory of the database', DEFAULT_DATA_DIR)
    .option('--json', 'print as JSON')
    .action(async (flags: { dataDir: string; json?: boolean }) => {
      const list = await withUsers(flags, (u) => u.list());
      if (flags.json === true) {
        out.stdout(JSON.stringify(list));
        return;
      }
      if (list.length === 0) out.stdout('no users');
      for (const u of list) {
        out.stdout(`${u.email}  accounts: ${u.accounts.join(' ') || '-'}  zones: ${u.zones.map((z) => z.id).join(' ') || '-'}`);
        for (const k of u.keys) out.stdout(`  key ${k.id} (…${k.hint}) created ${k.created_on}${k.revoked_on === null ? '' : ', revoked ' + k.revoked_on}`);
      }
    });

  users
    .command('revoke')
    .description('revoke every key of a user, or one key with --key-id; takes effect on the next request')
    .option('--data-dir <dir>', 'directory of the database', DEFAULT_DATA_DIR)
    .requiredOption('--email <email>', 'the user')
    .option('--key-id <id>', 'revoke only this key (see `moat users list`)')
    .action(async (flags: { dataDir: string; email: string; keyId?: string }) => {
      const n = await withUsers(flags, (u) => u.revoke(flags.email, flags.keyId));
      out.stdout(`revoked ${n} key(s) of ${flags.email}`);
    });
}
